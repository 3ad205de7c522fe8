"""Database helpers for hot paths."""
from __future__ import annotations

from django.db import connection
from django.db.models import Model


class FastInsert:
    """`INSERT` of one row with the SQL built once, not compiled by the ORM on every call (audit rows are
    written on every tool call). Field defaults and `pre_save` hooks apply as with `objects.create()`;
    no signals are sent."""

    def __init__(self, model: type[Model]):
        self.model = model
        self.fields = list(model._meta.concrete_fields)
        columns = ", ".join(connection.ops.quote_name(f.column) for f in self.fields)
        placeholders = ", ".join(["%s"] * len(self.fields))
        self.sql = f"INSERT INTO {connection.ops.quote_name(model._meta.db_table)} ({columns}) VALUES ({placeholders})"

    def __call__(self, **values) -> Model:
        obj = self.model(**values)
        params = [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in self.fields]
        with connection.cursor() as cursor:
            cursor.execute(self.sql, params)
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
