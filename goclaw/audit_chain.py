"""Tamper-evident audit rows (docs/audit-integrity.md).

Every row of an append-only table (a `ChainedRecord`) carries its place in a chain: `chain` (a UUID), `chain_seq`
(0, 1, 2, …) and `chain_hash` = HMAC-SHA256(audit key, previous row's hash ‖ table ‖ chain ‖ seq ‖ canonical
content); the first row of a chain follows 32 zero bytes. The key never enters the database, so nobody who only
has the database (its superuser included) can make a changed, removed or added row fit its chain again.

Chains: each process writes its hot-path rows (group commit, `goclaw.db.FastInsert`) on a chain of its own per
table, so threads and processes never wait for each other's links; rows written inside a caller's transaction (or
by the ORM) form a chain of their own, committed or rolled back with that transaction, so a rollback never leaves a
hole in a longer chain. A write whose outcome is unknown (an error) ends the process's chain: the next row starts a
new one, so whether or not the failed rows were committed, every chain stays whole."""
from __future__ import annotations

import hmac
import os
import threading
import uuid
from datetime import datetime, timedelta, timezone as dt_timezone
from decimal import Decimal
from functools import lru_cache
from typing import Any, Callable, Iterable, Mapping

import orjson

ZERO = bytes(32)
CHAIN_FIELDS = ("chain", "chain_seq", "chain_hash")
_INT64 = (-(2**63), 2**63 - 1)


class AppendOnlyError(RuntimeError):
    """An audit row was to be changed or removed in place: they are append-only (retention purges go through the
    database's goclaw_audit_purge function)."""


# --- the key --------------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def audit_keys() -> tuple[bytes, ...]:
    """The current audit key first, then older ones (verification of chains written before a key change)."""
    from django.conf import settings

    raw = [settings.GOCLAW_AUDIT_KEY, *settings.GOCLAW_AUDIT_OLD_KEYS]
    return tuple(value.encode() for value in raw if value)


def digest(key: bytes, prev: bytes, label: str, chain: Any, seq: int, content: bytes) -> bytes:
    """One link: HMAC-SHA256 over the previous hash, where the row sits, and its canonical content."""
    return hmac.digest(key, b"%b%b\n%b\n%d\n%b" % (prev, label.encode(), str(chain).encode(), seq, content), "sha256")


# --- canonical content ------------------------------------------------------------------------------------------
# One text per row, the same whether computed from the values about to be written or from the row read back: every
# value is reduced to what PostgreSQL keeps of it (a timestamp to the microsecond in UTC, a JSON number to its
# decimal value, a UUID to its lower-case form). Empty values (None, "", False, 0, [], {}) are left out, so a column
# added later with an empty default does not change the content of the rows written before it.
def _json(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            return None  # written as JSON null
        if not value.is_integer():
            return value
        value = int(Decimal(repr(value)))  # jsonb keeps 1e20 as the integer 100000000000000000000
    if isinstance(value, int):
        # orjson writes 64-bit integers only; the NUL prefix keeps the text form apart from any stored string
        return value if _INT64[0] <= value <= _INT64[1] else f"\x00int:{value}"
    if isinstance(value, Decimal):
        return _json(int(value)) if value == value.to_integral_value() else float(value)
    return str(value)


def _uuid(value: Any) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _timestamp(value: Any) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        return value.replace(tzinfo=dt_timezone.utc)
    return value if value.utcoffset() == _NO_OFFSET else value.astimezone(dt_timezone.utc)


_NO_OFFSET = timedelta(0)
# Converters to what PostgreSQL gives back; None: the value as it is (orjson writes str, int, bool, float (shortest
# repr, what float8 keeps), UUID (lower case) and aware datetimes (to the microsecond, with their offset) itself).
_CONVERT: dict[str, Callable[[Any], Any] | None] = {
    "UUIDField": _uuid,
    "DateTimeField": _timestamp,
    "FloatField": float,
    "JSONField": _json,
    "CharField": None, "TextField": None, "BooleanField": None,
    "IntegerField": None, "BigIntegerField": None, "SmallIntegerField": None, "PositiveIntegerField": None,
    "PositiveBigIntegerField": None, "PositiveSmallIntegerField": None,
}


@lru_cache(maxsize=None)
def _fields(model) -> tuple[tuple[str, Callable[[Any], Any] | None], ...]:
    return tuple((f.attname, _CONVERT.get(f.get_internal_type(), str)) for f in model._meta.concrete_fields
                 if f.attname not in CHAIN_FIELDS)


def table_label(model) -> str:
    return model._meta.db_table


def canonical(model, values: Mapping[str, Any]) -> bytes:
    """The row's content as hashed: its non-empty columns (chain columns excluded), normalised, keys sorted."""
    content = {}
    for name, convert in _fields(model):
        value = values.get(name)
        if value:
            content[name] = convert(value) if convert is not None else value
    return orjson.dumps(content, option=orjson.OPT_SORT_KEYS)


# --- writing --------------------------------------------------------------------------------------------------
def stamp(model, rows: Iterable[Any], chain: Any, seq: int, prev: bytes, *,
          get: Callable[[Any, str], Any] | None = None, put: Callable[[Any, str, Any], None] | None = None) -> tuple[int, bytes]:
    """Give `rows` (dicts of attname → value, or model instances with get/put) the next places of `chain`, from
    `seq` on after the hash `prev`; returns the position after the last one: (next seq, its predecessor's hash)."""
    key, label = audit_keys()[0], table_label(model)
    names = [name for name, _ in _fields(model)]
    for row in rows:
        content = canonical(model, row if get is None else {name: get(row, name) for name in names})
        prev = digest(key, prev, label, chain, seq, content)
        if put is None:
            row["chain"], row["chain_seq"], row["chain_hash"] = chain, seq, prev.hex()
        else:
            put(row, "chain", chain)
            put(row, "chain_seq", seq)
            put(row, "chain_hash", prev.hex())
        seq += 1
    return seq, prev


def stamp_new_chain(model, rows: Iterable[Any], **accessors) -> None:
    """`rows` as a chain of their own (rows written in a caller's transaction, or by the ORM)."""
    stamp(model, rows, uuid.uuid4(), 0, ZERO, **accessors)


class ProcessChain:
    """This process's chain for one table, extended by one writer at a time (the lock is held over the INSERT, so
    rows are committed in chain order and the position moves only once they are)."""

    _all: list["ProcessChain"] = []

    def __init__(self, model) -> None:
        self.model = model
        self.lock = threading.Lock()
        self._restart()
        ProcessChain._all.append(self)

    def _restart(self) -> None:
        self.chain, self.seq, self.prev = uuid.uuid4(), 0, ZERO

    def write(self, rows: list[dict], insert: Callable[[], Any]) -> Any:
        """Stamp `rows` and run `insert` (which writes and commits them); on any error the chain ends here."""
        with self.lock:
            position = stamp(self.model, rows, self.chain, self.seq, self.prev)
            try:
                result = insert()
            except BaseException:
                self._restart()
                raise
            self.seq, self.prev = position
            return result

    @classmethod
    def restart_all(cls) -> None:
        """In a forked child: its own chains (a chain shared by two processes would fork)."""
        for chain in cls._all:
            chain.lock = threading.Lock()
            chain._restart()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=ProcessChain.restart_all)
