"""Where sealed values live, and the key rotation that re-seals them (docs/secrets.md).

goclaw/ imports no app, so apps tell it where they keep values sealed with goclaw.crypto: each registers, from
`AppConfig.ready()`, the model, the field (the whole column, or one key of a JSON column) and how to rebuild the
associated data of a row. `encryption_key_rotate` walks that registry and re-seals, with the current key, every value
that names another key, in short row-locked batches, so it can run beside live traffic and be interrupted and re-run.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import models, transaction
from django.db.models import F
from django.db.models.fields.json import KeyTextTransform

from goclaw import crypto

logger = logging.getLogger("goclaw.secrets")

_PASSES = 3  # rows held by live traffic (skipped while locked) are tried again this many times in all


@dataclass(frozen=True)
class EncryptedField:
    """One place an app keeps sealed values: `model.field` (or `model.field[json_key]` inside a JSON column), and
    `associated_data(row)`, the associated data the value was sealed with (it binds the value to that row)."""

    model: type[models.Model]
    field: str
    associated_data: Callable[[Any], str]
    json_key: str | None = None

    @property
    def label(self) -> str:
        where = f"{self.field}[{self.json_key}]" if self.json_key else self.field
        return f"{self.model._meta.label}.{where}"


ENCRYPTED_FIELDS: dict[str, EncryptedField] = {}


def encrypted_field_register(model: type[models.Model], field_name: str, *, associated_data: Callable[[Any], str],
                             json_key: str | None = None) -> EncryptedField:
    """Declare a place holding sealed values (called from an app's `ready()`): rotation re-seals it. Registering the
    same place again replaces the entry."""
    model_field = model._meta.get_field(field_name)
    if json_key is not None and not isinstance(model_field, models.JSONField):
        raise ValueError(f"{model._meta.label}.{field_name} is not a JSON field: json_key needs one")
    if json_key is None and not isinstance(model_field, (models.TextField, models.CharField)):
        raise ValueError(f"{model._meta.label}.{field_name} must be a text field to hold sealed values")
    spec = EncryptedField(model=model, field=field_name, associated_data=associated_data, json_key=json_key)
    ENCRYPTED_FIELDS[spec.label] = spec
    return spec


@dataclass
class FieldRotation:
    """What rotation did (or, in a dry run, would do) to one registered place. `failed` names rows only
    (`model pk field`), never values; `left` counts values still under another key that were not tried (stopped by
    --max-batches, or their row stayed locked by live traffic): run again."""

    label: str
    rotated: int = 0
    already_current: int = 0
    failed: list[str] = field(default_factory=list)
    left: int = 0


@dataclass
class RotationReport:
    key_id: str
    dry_run: bool
    fields: list[FieldRotation]

    @property
    def failed(self) -> list[str]:
        return [row for one in self.fields for row in one.failed]

    @property
    def left(self) -> int:
        return sum(one.left for one in self.fields)

    @property
    def complete(self) -> bool:
        """Every registered value is sealed with the current key: the old keys may be removed."""
        return not self.failed and not self.left


def _sealed_values(spec: EncryptedField):
    """Rows of `spec` holding a value, annotated with it as text (`_sealed`), in primary-key order."""
    value = KeyTextTransform(spec.json_key, spec.field) if spec.json_key else F(spec.field)
    return (spec.model._base_manager.annotate(_sealed=value).exclude(_sealed__isnull=True).exclude(_sealed="")
            .order_by("pk"))


def _write(spec: EncryptedField, row, sealed: str) -> None:
    if spec.json_key is None:
        spec.model._base_manager.filter(pk=row.pk).update(**{spec.field: sealed})
        return
    data = dict(getattr(row, spec.field) or {})
    data[spec.json_key] = sealed
    spec.model._base_manager.filter(pk=row.pk).update(**{spec.field: data})


def _failure(spec: EncryptedField, row) -> str:
    where = f"{spec.field}[{spec.json_key}]" if spec.json_key else spec.field
    return f"{spec.model._meta.label} {row.pk} {where}"


def _rotate_batch(spec: EncryptedField, todo, after, batch_size: int, dry_run: bool, result: FieldRotation,
                  failed_pks: set) -> tuple[Any, bool]:
    """One batch in its own short transaction: lock the next rows still under another key (skipping rows live
    traffic holds), re-seal each with the current key. Returns (last primary key seen, whether any row came)."""
    with transaction.atomic():
        rows = todo.filter(pk__gt=after) if after is not None else todo
        if not dry_run:
            rows = rows.select_for_update(skip_locked=True)
        rows = list(rows.only("pk", spec.field)[:batch_size])
        for row in rows:
            if row.pk in failed_pks:
                continue
            try:
                sealed = crypto.reseal(row._sealed, associated_data=spec.associated_data(row))
            except crypto.DecryptionError as exc:
                failed_pks.add(row.pk)
                result.failed.append(_failure(spec, row))
                logger.error("key rotation: %s does not open: %s", _failure(spec, row), exc)
                continue
            if not dry_run:
                _write(spec, row, sealed)
            result.rotated += 1
    return (rows[-1].pk if rows else after), bool(rows)


def encryption_key_rotate(*, batch_size: int = 200, max_batches: int | None = None,
                          dry_run: bool = False) -> RotationReport:
    """Re-seal with the current key every registered value sealed with another (old keys open them). Each batch is
    its own transaction with row locks, so the run is safe beside live traffic and safe to interrupt and re-run;
    values that open with no configured key are listed (by row, never by value) and left untouched. `dry_run`
    opens and counts without writing. Orchestrates short transactions itself: do not call inside one."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    current = crypto.current_key_id()
    prefix = f"{crypto.VERSION}:{current}:"
    batches, report = 0, RotationReport(key_id=current, dry_run=dry_run, fields=[])
    for spec in ENCRYPTED_FIELDS.values():
        result = FieldRotation(label=spec.label)
        report.fields.append(result)
        values = _sealed_values(spec)
        result.already_current = values.filter(_sealed__startswith=prefix).count()
        todo = values.exclude(_sealed__startswith=prefix)
        failed_pks: set = set()
        for _ in range(1 if dry_run else _PASSES):
            rotated_before, after, stopped = result.rotated, None, False
            while True:
                if max_batches is not None and batches >= max_batches:
                    stopped = True
                    break
                after, got_rows = _rotate_batch(spec, todo, after, batch_size, dry_run, result, failed_pks)
                if not got_rows:
                    break
                batches += 1
            if stopped or dry_run or result.rotated == rotated_before:
                break
        if not dry_run:
            result.left = todo.exclude(pk__in=failed_pks).count()
        elif max_batches is not None and batches >= max_batches:
            result.left = max(todo.count() - result.rotated - len(result.failed), 0)
        logger.info("key rotation%s: %s: rotated %d, already current %d, failed %d, left %d",
                    " (dry run)" if dry_run else "", spec.label, result.rotated, result.already_current,
                    len(result.failed), result.left)
    return report
