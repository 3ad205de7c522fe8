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
from django.db.models import QuerySet
from django.utils import timezone

from goclaw.audit_trail import audit_purge_batch, purgeable_models
from goclaw.db import FastInsert, pg_json
from tools_app.labels import label
from tools_app.models import AuditEvent, StoredToolOutput, ToolInvocation
from tools_app.security.scrub import default_scrubber

logger = logging.getLogger("goclaw.audit")

PURGE_BATCH = 5000


# --- audit events ------------------------------------------------------------------------------------------
_insert_event = FastInsert(AuditEvent)


def audit_actor(actor: Any) -> str:
    """How an audit event names who acted: "staff:<username>" for a person, "agent:<key>" for an agent, else "system"."""
    if getattr(actor, "get_username", None):
        return f"staff:{actor.get_username()}"
    if getattr(actor, "key", None):
        return f"agent:{actor.key}"
    return "system"


def audit_event_record(*, kind: str, actor: str = "", target: str = "", details: dict[str, Any] | None = None) -> str:
    """Append one AuditEvent (append-only; docs/audit-integrity.md) and return its id. Written in the caller's
    transaction when there is one, so a decision and its record commit together."""
    return str(_insert_event(kind=label(kind, 64), actor=label(actor, 160), target=label(target, 255),
                             details=pg_json(default_scrubber.scrub_data(details or {})[0])))


# --- retention ---------------------------------------------------------------------------------------------
def audit_purge_expired(*, retention_days: int | None = None, dry_run: bool = False, batch_size: int = PURGE_BATCH,
                        now: datetime | None = None) -> dict[str, Any]:
    """Remove audit rows older than the retention (GOCLAW_AUDIT_RETENTION_DAYS; 0 keeps them forever) from every
    append-only table: invocations, stored outputs, audit events. Orchestrator: each batch of `batch_size` rows is
    one short transaction through the database's purge function, which records what it removed
    (goclaw.audit_trail, docs/audit-integrity.md). Returns (and logs) what it removed."""
    days = settings.AUDIT_RETENTION_DAYS if retention_days is None else retention_days
    report: dict[str, Any] = {"retention_days": days, "cutoff": None, "removed": 0, "outputs_removed": 0,
                              "batches": 0, "tables": {}, "oldest_kept": None, "dry_run": dry_run}
    if days <= 0:
        report["oldest_kept"] = _oldest()
        logger.info("audit purge: retention is 0 (keep forever); nothing removed")
        return report
    cutoff = (now or timezone.now()) - timedelta(days=days)
    report["cutoff"] = cutoff
    for model in purgeable_models():
        removed = 0
        if dry_run:
            removed = model.objects.filter(created_at__lt=cutoff).count()
        else:
            while batch := audit_purge_batch(model, cutoff, batch_size):
                removed += batch
                report["batches"] += 1
        report["tables"][model._meta.label] = removed
    report["removed"] = report["tables"][ToolInvocation._meta.label]
    report["outputs_removed"] = report["tables"][StoredToolOutput._meta.label]
    report["oldest_kept"] = _oldest(at_or_after=cutoff) if dry_run else _oldest()
    if not dry_run:
        logger.info("audit purge: removed %d audit rows and %d stored outputs older than %s (retention %d days); "
                    "%s; oldest kept: %s", report["removed"], report["outputs_removed"], cutoff.isoformat(), days,
                    ", ".join(f"{label}: {n}" for label, n in report["tables"].items()),
                    report["oldest_kept"].isoformat() if report["oldest_kept"] else "none")
    return report


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


def _export_record(row: dict[str, Any], payloads: bool = True) -> dict[str, Any]:
    """One row as exported: the stored text scrubbed again (rows kept from before a detector existed); without
    `payloads` (the person lacks tools_app.view_payload) masked as every other page masks them."""
    if not payloads:
        from tools_app.selectors_audit import invocation_payloads_masked

        return invocation_payloads_masked(row)
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


def audit_export_csv(qs: QuerySet[ToolInvocation], *, payloads: bool = True) -> Iterator[str]:
    """The rows of `qs` as CSV text chunks (a header first), streamed: memory stays flat whatever the count."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(EXPORT_FIELDS)
    for row in _rows(qs):
        record = _export_record(row, payloads)
        writer.writerow([_csv_cell(record[name]) for name in EXPORT_FIELDS])
        if buffer.tell() >= _FLUSH_CHARS:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def audit_export_jsonl(qs: QuerySet[ToolInvocation], *, payloads: bool = True) -> Iterator[str]:
    """The rows of `qs` as JSON lines (one object per call), streamed like the CSV."""
    return _chunks(json.dumps(_export_record(row, payloads), ensure_ascii=False, cls=DjangoJSONEncoder) + "\n"
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


# --- reads of payloads and exports (docs/permissions.md) ---------------------------------------------------
def audit_payload_viewed(*, person, invocation_ids: Iterable[Any], where: str, target: str = "list",
                         output_ids: Iterable[Any] = ()) -> str | None:
    """Record that `person` was shown the payloads (arguments, errors, stored outputs) of these audit rows (and
    stored outputs), `where` being "api", "admin" or "console". Nothing shown, nothing recorded (None)."""
    ids, outputs = [str(pk) for pk in invocation_ids], [str(pk) for pk in output_ids]
    if not ids and not outputs:
        return None
    details: dict[str, Any] = {"invocations": ids, "where": where}
    if outputs:
        details["outputs"] = outputs
    return audit_event_record(kind="audit.payload_viewed", actor=f"staff:{person.get_username()}", target=str(target),
                              details=details)


def audit_exported(*, person, filters: dict[str, str], rows: int, fmt: str, payloads: bool) -> str:
    """Record an export of the audit trail: who, with which filters, how many rows, whether payloads were in it."""
    return audit_event_record(kind="audit.exported", actor=f"staff:{person.get_username()}", target="export",
                              details={"filters": filters, "rows": rows, "format": fmt, "payloads": payloads})
