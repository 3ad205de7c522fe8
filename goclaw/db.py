"""Database helpers for hot paths."""
from __future__ import annotations

import re
import weakref
from typing import Any, Sequence

from django.db import connection
from django.db.models import Model

_PLACEHOLDER_RE = re.compile(r"\$([1-9][0-9]*)(?![0-9])")
_NAME_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_PREPARED_SQL: dict[str, str] = {}  # name -> PREPARE text: one name never stands for two statements


class PreparedStatement:
    """A hot statement PostgreSQL parses and plans once per connection (`PREPARE`), then only runs (`EXECUTE`).
    For the rate-limit statement parsing and planning cost more than running it (measured 280 -> 110 µs a call).
    Django switches psycopg's own preparation off, hence SQL-level PREPARE through Django's cursor (so it is
    logged and counted like any query). A prepared statement belongs to the server session and survives
    rollbacks; a new connection prepares it again. The statement is sent whole every time instead behind a
    transaction-pooling proxy, which keeps no session (Django's setting for that case, DISABLE_SERVER_SIDE_CURSORS),
    and with server-side binding (OPTIONS server_side_binding), where the driver binds and may prepare it itself.

    `sql` uses PostgreSQL's own placeholders ($1, $2, ... , each may repeat) and holds no `%`; `types` gives a
    type per placeholder, or is empty to let PostgreSQL infer them (an INSERT's columns)."""

    def __init__(self, name: str, sql: str, types: Sequence[str] = ()):
        if not _NAME_RE.match(name):
            raise ValueError(f"PreparedStatement: {name!r} is not a plain lower-case SQL name")
        if "%" in sql:
            raise ValueError("PreparedStatement: the SQL must not contain '%' (it is also run through the driver)")
        count = max((int(n) for n in _PLACEHOLDER_RE.findall(sql)), default=0)
        if types and len(types) != count:
            raise ValueError(f"PreparedStatement {name}: {len(types)} types for {count} placeholders")
        self.name = name
        self.param_count = count
        self.prepare_sql = f"PREPARE {name}{' (' + ', '.join(types) + ')' if types else ''} AS {sql}"
        # A connection that already holds `name` runs it as it is: two statements under one name would mix up.
        if _PREPARED_SQL.setdefault(name, self.prepare_sql) != self.prepare_sql:
            raise ValueError(f"PreparedStatement: the name {name} is already used by another statement")
        self.execute_sql = f"EXECUTE {name}" + (f" ({', '.join(['%s'] * count)})" if count else "")
        self.direct_sql = _PLACEHOLDER_RE.sub(lambda m: f"%(p{m.group(1)})s", sql)
        self._prepared_on: weakref.WeakSet = weakref.WeakSet()  # the DB-API connections that hold it

    def execute(self, cursor, params: Sequence[Any]) -> None:
        """Run the statement on `cursor` (a Django cursor) with `params` for $1, $2, ..."""
        if len(params) != self.param_count:
            raise ValueError(f"PreparedStatement {self.name}: {len(params)} parameters for {self.param_count} placeholders")
        db = cursor.db
        if db.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS") or db.settings_dict.get("OPTIONS", {}).get("server_side_binding"):
            cursor.execute(self.direct_sql, {f"p{i}": value for i, value in enumerate(params, 1)})
            return
        raw = db.connection
        if raw not in self._prepared_on:
            # Looked up first, not assumed absent: a PREPARE whose answer never reached us would otherwise make
            # every later call on this connection fail (a duplicate name), and an error would abort a transaction.
            cursor.execute("SELECT 1 FROM pg_prepared_statements WHERE name = %s", [self.name])
            if cursor.fetchone() is None:
                cursor.execute(self.prepare_sql)
            self._prepared_on.add(raw)
        cursor.execute(self.execute_sql, params)


class FastInsert:
    """`INSERT` of one row, prepared once per connection instead of compiled by the ORM and planned by PostgreSQL
    on every call (audit rows are written on every tool call). Field defaults and `pre_save` hooks apply as with
    `objects.create()`; no signals are sent."""

    def __init__(self, model: type[Model]):
        self.model = model
        self.fields = list(model._meta.concrete_fields)
        columns = ", ".join(connection.ops.quote_name(f.column) for f in self.fields)
        placeholders = ", ".join(f"${i}" for i in range(1, len(self.fields) + 1))
        self.statement = PreparedStatement(
            f"goclaw_insert_{model._meta.db_table}"[:63],
            f"INSERT INTO {connection.ops.quote_name(model._meta.db_table)} ({columns}) VALUES ({placeholders})")

    def __call__(self, **values) -> Model:
        obj = self.model(**values)
        params = [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in self.fields]
        with connection.cursor() as cursor:
            self.statement.execute(cursor, params)
        obj._state.adding = False
        obj._state.db = "default"
        return obj


_UNSTORABLE = {0: "\ufffd"}  # PostgreSQL text and jsonb cannot hold NUL


def pg_text(value: str) -> str:
    """`value` made storable in PostgreSQL: NUL and lone surrogates become U+FFFD (display copies only)."""
    if "\x00" in value:
        value = value.translate(_UNSTORABLE)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "replace").decode("utf-8")
    return value


def pg_json(obj):
    """A JSON-like structure with every string (keys included) passed through `pg_text`."""
    if isinstance(obj, str):
        return pg_text(obj)
    if isinstance(obj, dict):
        return {pg_text(str(k)): pg_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [pg_json(v) for v in obj]
    return obj
