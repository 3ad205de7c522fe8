"""Database helpers for hot paths."""
from __future__ import annotations

import json
import re
import select
import threading
import uuid
from datetime import date, datetime
from typing import Any, Callable, Sequence

import orjson
import psycopg
from psycopg.pq import ExecStatus
from django.db import connection, connections
from django.db.models import FileField, Model

TUPLES_OK = ExecStatus.TUPLES_OK
_PLACEHOLDER_RE = re.compile(r"\$([1-9][0-9]*)(?![0-9])")


class _BindingCursor(psycopg.Cursor):
    """Parameters bound on the server, the statement unnamed (what a transaction-pooling proxy can carry). Keeps the
    statement it ran where Django's query log looks for it (the SQL with its $n placeholders; values apart)."""

    def _convert_query(self, query, params=None):
        self._query = super()._convert_query(query, params)
        return self._query


class _PreparingCursor(_BindingCursor):
    """…and every statement it runs prepared once per connection (Django's own cursors quote parameters into the SQL
    text on the client, and prepare nothing)."""

    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=True, binary=binary)


class PreparedStatement:
    """A hot statement that PostgreSQL parses and plans once per connection and then only runs, its parameters
    bound on the server (no quoting into the SQL text: for the rate-limit take and the audit INSERT that quoting
    and the parsing of literals cost more than running the statement). psycopg keeps the connection's prepared
    statements (a new connection prepares again; after a rollback psycopg deallocates them all and prepares each
    again on its next use). Behind a transaction-pooling proxy, which keeps no session (Django's DISABLE_SERVER_SIDE_CURSORS),
    the statement is sent whole each time, still with its parameters bound on the server.

    Runs through Django's cursor wrapper, so it is logged, counted and wrapped like any query. `sql` uses
    PostgreSQL's placeholders ($1, $2, …, each may repeat) and holds no `%`. Nothing may PREPARE statements of its
    own by SQL on these connections: psycopg ends a rollback with DEALLOCATE ALL (and prepares its own again)."""

    def __init__(self, sql: str, types: Sequence[str] = ()):
        if "%" in sql:
            raise ValueError("PreparedStatement: the SQL must not contain '%' (it is also run through the driver)")
        self.param_count = max((int(n) for n in _PLACEHOLDER_RE.findall(sql)), default=0)
        if types and len(types) != self.param_count:
            raise ValueError(f"PreparedStatement: {len(types)} types for {self.param_count} placeholders")
        # With `types`, every use of a placeholder is cast to its type (the driver sends a Python value with the
        # type it picks: an int as int2, a str as unknown).
        cast = (lambda n: f"::{types[int(n) - 1]}") if types else (lambda n: "")
        self.sql = _PLACEHOLDER_RE.sub(lambda m: f"%(p{m.group(1)})s{cast(m.group(1))}", sql)

    def run(self, params: Sequence[Any], using: str = "default") -> list[tuple]:
        """Run the statement with `params` for $1, $2, … on the `using` connection; the rows it returns."""
        if len(params) != self.param_count:
            raise ValueError(f"PreparedStatement: {len(params)} parameters for {self.param_count} placeholders")
        db = connections[using]
        db.close_if_health_check_failed()
        db.ensure_connection()
        pooled = db.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS")
        with db.wrap_database_errors:
            raw = db.connection
            if raw.prepare_threshold is None:  # Django turns psycopg's own preparing off; explicit requests only
                raw.prepare_threshold = 2**31 - 1
            raw_cursor = (_BindingCursor if pooled else _PreparingCursor)(raw)
        with db._prepare_cursor(raw_cursor) as cursor:
            cursor.execute(self.sql, {f"p{i}": value for i, value in enumerate(params, 1)})
            result = raw_cursor.pgresult
            return raw_cursor.fetchall() if result is not None and result.status == TUPLES_OK else []


class Combiner:
    """Flat combining for a statement that can serve many callers at once: callers of this process that arrive
    while one batch is being written queue up, and the first of them to find the way free writes everything
    queued by then, in one statement on its own connection; each caller gets its own result. A lone caller runs
    its item at once, without any hand-over. When a batch with others' items fails, each caller runs its own
    item again alone on its own connection, so one bad item (or connection) costs nobody else anything.

    `run_batch(items) -> results` (one per item, in order) must be correct for any mix of items; callers inside a
    transaction must not come here (their writes belong to that transaction): `run_batch([item])` directly."""

    MAX_BATCH = 256

    def __init__(self, run_batch: Callable[[list], list]):
        self.run_batch = run_batch
        self.lock = threading.Lock()
        self.done = threading.Condition(self.lock)
        self.queue: list[_Item] = []
        self.busy = False

    def __call__(self, value: Any) -> Any:
        item = _Item(value)
        with self.lock:
            self.queue.append(item)
        while True:
            with self.lock:
                while self.busy and item.state is _Item.QUEUED:
                    self.done.wait()
                if item.state is not _Item.QUEUED:
                    break
                # Nobody is writing: this caller writes what is queued (the oldest items first).
                batch, self.queue = self.queue[:self.MAX_BATCH], self.queue[self.MAX_BATCH:]
                self.busy = True
            self._write(batch, alone=len(batch) == 1 and batch[0] is item)
        if item.state is _Item.FAILED:
            return self.run_batch([value])[0]  # alone, on this caller's own connection: its error is its own
        return item.result

    def _write(self, batch: list["_Item"], alone: bool) -> None:
        state, results = _Item.FAILED, [None] * len(batch)
        try:
            results = self.run_batch([i.value for i in batch])
            state = _Item.DONE
        except Exception:
            if alone:  # the caller's own item alone: its error as it is
                state = _Item.RAISED
                raise
        finally:
            with self.lock:
                for i, result in zip(batch, results):
                    i.state, i.result = state, result
                self.busy = False
                self.done.notify_all()


class _Item:
    """One caller's item waiting in a Combiner."""

    # FAILED: a batch with others' items failed, the caller runs its item again alone; RAISED: the caller's own run
    # failed and raised to it.
    QUEUED, DONE, FAILED, RAISED = "queued", "done", "failed", "raised"
    __slots__ = ("value", "state", "result")

    def __init__(self, value: Any) -> None:
        self.value, self.state, self.result = value, self.QUEUED, None


class FastInsert:
    """`INSERT` of one row, prepared once per connection with its values bound on the server, instead of compiled
    by the ORM, quoted into SQL and planned by PostgreSQL on every call (audit rows are written on every tool
    call). Field defaults apply as with `objects.create()`; no model instance is built and no signals are sent.

    Group commit (`Combiner`): rows that threads of this process insert at the same moment, outside any
    transaction, go to PostgreSQL in one statement and one synchronous commit; each thread returns only once the
    commit holding its row is done. A row inside a caller's transaction is written in that transaction, alone."""

    def __init__(self, model: type[Model]):
        self.model = model
        self.fields = list(model._meta.concrete_fields)
        special = [f.name for f in self.fields if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)
                   or isinstance(f, FileField)]
        if special:  # their value comes from pre_save, which needs an instance
            raise ValueError(f"FastInsert({model.__name__}): fields with their own pre_save: {special}")
        self.defaults = {f.attname: f.get_default for f in self.fields}
        quote = connection.ops.quote_name
        columns = ", ".join(quote(f.column) for f in self.fields)
        record = ", ".join(f"{quote(f.attname)} {f.db_type(connection)}" for f in self.fields)
        self.pk = model._meta.pk
        # The rows travel as one JSON text (a list of objects keyed by attname): one parameter binds far faster than
        # a parameter (or an array) per column, and one statement serves a row and a batch alike.
        self.statement = PreparedStatement(
            f"INSERT INTO {quote(model._meta.db_table)} ({columns}) "
            f"SELECT {', '.join(quote(f.attname) for f in self.fields)} FROM json_to_recordset($1::json) AS r({record})")
        self.group_commit = Combiner(self._insert)
        from goclaw.models import ChainedRecord  # goclaw.models imports nothing of this module

        # An append-only audit table: each row gets its place in a tamper-evident chain (goclaw.audit_chain).
        self.chain = None
        if issubclass(model, ChainedRecord):
            from goclaw.audit_chain import ProcessChain

            self.chain = ProcessChain(model)

    def __call__(self, **values) -> Any:
        """Insert one row from field attnames → values (JSON types, UUIDs and datetimes), durably (committed) unless
        inside a caller's transaction; returns its primary key."""
        row = {name: values.pop(name) if name in values else default() for name, default in self.defaults.items()}
        if values:
            raise TypeError(f"FastInsert({self.model.__name__}): unknown fields {sorted(values)}")
        if connection.in_atomic_block:
            self._insert([row])
        else:
            self.group_commit(row)
        return row[self.pk.attname]

    def _insert(self, rows: list[dict]) -> list[None]:
        if self.chain is not None:
            if connection.in_atomic_block:  # a caller's transaction: its rows are a chain of their own
                from goclaw.audit_chain import stamp_new_chain

                stamp_new_chain(self.model, rows)
            else:  # committed by this statement: this process's chain, extended in commit order
                return self.chain.write(rows, lambda: self._run(rows))
        return self._run(rows)

    def _run(self, rows: list[dict]) -> list[None]:
        try:
            text = orjson.dumps(rows).decode()
        except TypeError:  # an integer past 64 bits (a caller's JSON may hold one): the standard encoder writes it
            text = json.dumps(rows, default=_as_json_text)
        self.statement.run([text])
        return [None] * len(rows)


def _as_json_text(value: Any) -> str:
    """UUIDs and datetimes as orjson writes them (a datetime to the microsecond, unlike Django's JSON encoder)."""
    if isinstance(value, (datetime, date, uuid.UUID)):
        return value.isoformat() if not isinstance(value, uuid.UUID) else str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


_UNSTORABLE = {0: "\ufffd"}  # PostgreSQL text and jsonb cannot hold NUL


def pg_storable(value: str) -> bool:
    """Whether PostgreSQL text can hold `value` as it is (and it can be sent as UTF-8): no NUL, no lone surrogate."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def pg_text(value: str) -> str:
    """`value` made storable in PostgreSQL: NUL becomes U+FFFD and a lone surrogate "?" (display copies only)."""
    if pg_storable(value):
        return value
    return value.translate(_UNSTORABLE).encode("utf-8", "replace").decode("utf-8")


def pg_json(obj):
    """A JSON-like structure with every string (keys included) passed through `pg_text`."""
    if isinstance(obj, str):
        return pg_text(obj)
    if isinstance(obj, dict):
        return {pg_text(str(k)): pg_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [pg_json(v) for v in obj]
    return obj


def close_connections_the_server_ended(**kwargs) -> None:
    """At the start of a request: close every idle database connection of this thread that the server has already
    spoken on. An idle session hears nothing unless the server ended it (a restart, `pg_terminate_backend`, an idle
    timeout): its termination message, or end of file, waits in the socket. Left open, the request's first query
    would fail on it (a 503); closed, Django connects again. One zero-timeout poll per connection, no round trip
    (Django's CONN_HEALTH_CHECKS would cost a query per request)."""
    for db in connections.all(initialized_only=True):
        raw = db.connection
        if raw is None or db.in_atomic_block or raw.closed:
            continue
        try:
            readable, _, _ = select.select([raw.fileno()], [], [], 0)
        except (OSError, ValueError, psycopg.Error):
            readable = True
        if readable:
            db.close()
