import uuid

from django.db import models
from django.utils import timezone


class WorkerHeartbeat(models.Model):
    """Last time a django-q2 worker ran the heartbeat task: /healthz reads it to know the worker is alive."""

    name = models.CharField(max_length=100, primary_key=True)
    beat_at = models.DateTimeField()
    pid = models.IntegerField(default=0)
    host = models.CharField(max_length=255, blank=True)

    def __str__(self) -> str:
        return f"{self.name} @ {self.beat_at:%Y-%m-%d %H:%M:%S}"


class CacheGeneration(models.Model):
    """A counter per named cache (`policy`, `toolsets`, …), bumped in the transaction of every change to the data
    behind it; each process compares the counters at most every 0.5 s and drops a cache whose counter moved."""

    name = models.CharField(max_length=64, primary_key=True)
    value = models.BigIntegerField(default=0)
    changed_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.name} generation {self.value}"


# --- the audit trail's integrity (goclaw/audit_chain.py, docs/audit-integrity.md) -----------------------------------
class ChainedQuerySet(models.QuerySet):
    """Rows of an append-only table: created, never updated or deleted through the ORM (the database refuses it too)."""

    def bulk_create(self, objs, *args, **kwargs):
        from goclaw.audit_chain import stamp_new_chain

        objs = list(objs)
        stamp_new_chain(self.model, objs, get=getattr, put=setattr)  # one call's rows: one chain
        return super().bulk_create(objs, *args, **kwargs)

    def update(self, **kwargs):
        from goclaw.audit_chain import AppendOnlyError

        raise AppendOnlyError(f"{self.model._meta.label} rows are append-only")

    def delete(self):
        from goclaw.audit_chain import AppendOnlyError

        raise AppendOnlyError(f"{self.model._meta.label} rows are append-only (retention purges them)")


class ChainedRecord(models.Model):
    """An append-only, tamper-evident row: its place in a chain of rows hashed with a key the database never sees.
    Subclasses need a `created_at` column (retention and checkpoints go by it), must not use auto_now fields (their
    value would be set after the row is hashed), and their migration calls goclaw_protect_append_only('<table>')."""

    chain = models.UUIDField(null=True, blank=True, editable=False)
    chain_seq = models.BigIntegerField(null=True, blank=True, editable=False)
    chain_hash = models.CharField(max_length=64, blank=True, editable=False)

    objects = ChainedQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        from goclaw.audit_chain import AppendOnlyError, stamp_new_chain

        if not self._state.adding:
            raise AppendOnlyError(f"{self._meta.label} rows are append-only")
        if self.chain is None:  # else its writer placed it on a chain of its own (the checkpoints' one)
            stamp_new_chain(type(self), [self], get=getattr, put=setattr)
        kwargs["force_insert"] = True
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        from goclaw.audit_chain import AppendOnlyError

        raise AppendOnlyError(f"{self._meta.label} rows are append-only (retention purges them)")


class AuditCheckpoint(ChainedRecord):
    """The head (last seq and hash) of every chain that grew since the previous checkpoint, recorded periodically:
    a chain whose recorded head is gone was cut short. Checkpoints form one chain of their own."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    heads = models.JSONField(default=dict, help_text='{"<table>": {"<chain>": [seq, "hash", "created_at", "row id"]}}')
    window_start = models.DateTimeField(help_text="rows created since then were looked at")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"audit checkpoint {self.chain_seq} at {self.created_at:%Y-%m-%d %H:%M:%S}"


class AuditPurge(ChainedRecord):
    """What one retention purge batch removed from one table (written in the purge's transaction): the chains it cut
    at the front, each with the last removed row's place, so the chain's first kept row can be verified."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    table = models.CharField(max_length=128)
    cutoff = models.DateTimeField()
    removed = models.IntegerField(default=0)
    cut_chains = models.JSONField(default=dict, help_text='{"<chain>": [last removed seq, "its hash"]}')
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"purge of {self.removed} rows from {self.table} before {self.cutoff:%Y-%m-%d}"
