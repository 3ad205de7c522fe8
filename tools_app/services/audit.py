"""The audit trail's retention purge and its export rows (CSV, JSON lines). See docs/audit-search.md."""
from __future__ import annotations

import csv
import io
import json
import logging
from datetime import datetime, timedelta
from typing import Any, Iterable, Iterator

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from tools_app.models import AuditEvent, StoredToolOutput, ToolInvocation
from tools_app.security.scrub import default_scrubber

logger = logging.getLogger("goclaw.audit")

PURGE_BATCH = 5000


# --- audit events ------------------------------------------------------------------------------------------
def audit_event_record(*, kind: str, actor: str = "", target: str = "", details: dict[str, Any] | None = None) -> str:
    """Append one AuditEvent (append-only; docs/audit-integrity.md) and return its id. Written in the caller's
    transaction when there is one, so a decision and its record commit together."""
    from goclaw.db import pg_json
    from tools_app.labels import label

    event = AuditEvent.objects.create(kind=label(kind, 64), actor=label(actor, 160), target=label(target, 255),
                                      details=pg_json(default_scrubber.scrub_data(details or {})[0]))
    return str(event.id)


# --- retention ---------------------------------------------------------------------------------------------
def audit_purge_expired(*, retention_days: int | None = None, dry_run: bool = False, batch_size: int = PURGE_BATCH,
                        now: datetime | None = None) -> dict[str, Any]:
    """Delete audit rows older than the retention (GOCLAW_AUDIT_RETENTION_DAYS; 0 keeps them forever) and the
    stored outputs of those calls. Orchestrator: one short transaction per batch of `batch_size` rows, so a large
    purge never holds one long transaction or its locks. Returns (and logs) what it removed."""
    days = settings.AUDIT_RETENTION_DAYS if retention_days is None else retention_days
    report: dict[str, Any] = {"retention_days": days, "cutoff": None, "removed": 0, "outputs_removed": 0,
                              "batches": 0, "oldest_kept": None, "dry_run": dry_run}
    if days <= 0:
        report["oldest_kept"] = _oldest()
        logger.info("audit purge: retention is 0 (keep forever); nothing removed")
        return report
    cutoff = (now or timezone.now()) - timedelta(days=days)
    report["cutoff"] = cutoff
    expired = ToolInvocation.objects.filter(created_at__lt=cutoff)
    if dry_run:
        report["removed"] = expired.count()
        report["outputs_removed"] = expired.filter(output_id__isnull=False).count()
        report["oldest_kept"] = _oldest(at_or_after=cutoff)
        return report
    while True:
        removed, outputs = _purge_batch(cutoff, batch_size)
        if not removed:
            break
        report["removed"] += removed
        report["outputs_removed"] += outputs
        report["batches"] += 1
    report["oldest_kept"] = _oldest()
    logger.info("audit purge: removed %d audit rows and %d stored outputs older than %s (retention %d days); "
                "oldest kept: %s", report["removed"], report["outputs_removed"], cutoff.isoformat(), days,
                report["oldest_kept"].isoformat() if report["oldest_kept"] else "none")
    return report


@transaction.atomic
def _purge_batch(cutoff: datetime, batch_size: int) -> tuple[int, int]:
    """The oldest `batch_size` expired rows (rows another purge holds are skipped) and their stored outputs."""
    batch = list(ToolInvocation.objects.select_for_update(skip_locked=True).filter(created_at__lt=cutoff)
                 .order_by("created_at").values_list("id", "output_id")[:batch_size])
    if not batch:
        return 0, 0
    outputs = [output for _, output in batch if output]
    removed, _ = ToolInvocation.objects.filter(pk__in=[pk for pk, _ in batch]).delete()
    outputs_removed = StoredToolOutput.objects.filter(pk__in=outputs).delete()[0] if outputs else 0
    return removed, outputs_removed


def _oldest(at_or_after: datetime | None = None) -> datetime | None:
    qs = ToolInvocation.objects.all() if at_or_after is None else ToolInvocation.objects.filter(created_at__gte=at_or_after)
    return qs.order_by("created_at").values_list("created_at", flat=True).first()


# --- export ------------------------------------------------------------------------------------------------
EXPORT_FIELDS = ("created_at", "id", "agent_key", "user_id", "session_key", "channel", "actor", "tool_name", "status",
                 "observed", "observe_reasons", "duration_ms", "result_size", "error", "arguments", "output_id",
                 "approval_id", "pending_change_id", "request_id", "sandbox_backend", "sandbox_profile")
EXPORT_CHUNK_ROWS = 2000
_FLUSH_CHARS = 64 * 1024
# A spreadsheet runs a cell that starts with one of these as a formula (CSV injection).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _export_record(row: dict[str, Any]) -> dict[str, Any]:
    """One row as exported: the stored text scrubbed again (rows kept from before a detector existed)."""
    record = dict(row)
    record["arguments"] = default_scrubber.scrub_data(row["arguments"])[0]
    record["observe_reasons"] = default_scrubber.scrub_data(row["observe_reasons"])[0]
    record["error"] = default_scrubber.scrub(row["error"])[0] if row["error"] else ""
    return record


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        text = value.isoformat()
    elif isinstance(value, (dict, list)):
        text = json.dumps(value, ensure_ascii=False, cls=DjangoJSONEncoder)
    else:
        text = str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def _rows(qs: QuerySet[ToolInvocation]) -> Iterator[dict[str, Any]]:
    # A server-side cursor: PostgreSQL hands over EXPORT_CHUNK_ROWS at a time, whatever the number of matches.
    return qs.values(*EXPORT_FIELDS).iterator(chunk_size=EXPORT_CHUNK_ROWS)


def audit_export_csv(qs: QuerySet[ToolInvocation]) -> Iterator[str]:
    """The rows of `qs` as CSV text chunks (a header first), streamed: memory stays flat whatever the count."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(EXPORT_FIELDS)
    for row in _rows(qs):
        record = _export_record(row)
        writer.writerow([_csv_cell(record[name]) for name in EXPORT_FIELDS])
        if buffer.tell() >= _FLUSH_CHARS:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def audit_export_jsonl(qs: QuerySet[ToolInvocation]) -> Iterator[str]:
    """The rows of `qs` as JSON lines (one object per call), streamed like the CSV."""
    return _chunks(json.dumps(_export_record(row), ensure_ascii=False, cls=DjangoJSONEncoder) + "\n"
                   for row in _rows(qs))


def _chunks(lines: Iterable[str]) -> Iterator[str]:
    pending: list[str] = []
    size = 0
    for line in lines:
        pending.append(line)
        size += len(line)
        if size >= _FLUSH_CHARS:
            yield "".join(pending)
            pending, size = [], 0
    if pending:
        yield "".join(pending)
