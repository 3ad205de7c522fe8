"""Audit search: query-string filters parsed and checked, the search queryset (exact filters, a time range and
PostgreSQL full-text search over the scrubbed arguments and errors), count-free keyset pages and a call's links.
See docs/audit-search.md."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from datetime import timezone as dt_timezone
from typing import Any, Mapping

from django.contrib.postgres.search import SearchQuery
from django.db.models import Q, QuerySet
from django.db.models.functions import Length, Substr
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from goclaw.authz import person_may
from goclaw.db import pg_text
from goclaw.errors import NotFound, ValidationError
from tools_app.choices import InvocationStatus
from tools_app.models import ApprovalRequest, PendingChange, StoredToolOutput, ToolInvocation
from tools_app.models.invocations import invocation_search_document
from tools_app.security.scrub import default_scrubber

# Query-string name -> model field, for the exact-match filters.
EXACT_FILTERS = {"agent": "agent_key", "user": "user_id", "session": "session_key", "tool": "tool_name",
                 "actor": "actor", "status": "status"}
FILTER_NAMES = (*EXACT_FILTERS, "since", "until", "q")
QUERY_MAX_CHARS = 500
PAGE_SIZE = 50


@dataclass(frozen=True)
class AuditFilters:
    """A checked audit search: `values` are the query-string values as given (to show and share them), the rest
    what the queryset uses."""

    values: dict[str, str] = field(default_factory=dict)
    exact: dict[str, str] = field(default_factory=dict)
    since: datetime | None = None
    until: datetime | None = None
    q: str = ""

    def query_items(self) -> list[tuple[str, str]]:
        """The non-empty filters in a stable order, for links (pages, export) that keep this search."""
        return [(name, self.values[name]) for name in FILTER_NAMES if self.values.get(name)]


def audit_filters_parse(params: Mapping[str, Any]) -> AuditFilters:
    """Check every filter of a query string; ValidationError (code `invalid_audit_filter`, details: field ->
    problem) names each bad value instead of letting it reach the database."""
    values = {name: str(params.get(name, "") or "").strip() for name in FILTER_NAMES}
    problems: dict[str, str] = {}
    exact = {EXACT_FILTERS[name]: pg_text(value) for name, value in values.items() if name in EXACT_FILTERS and value}
    if values["status"] and values["status"] not in InvocationStatus.values:
        problems["status"] = f"unknown status; one of: {', '.join(InvocationStatus.values)}"
    since = _moment(values["since"], "since", problems)
    until = _moment(values["until"], "until", problems, end_of_day=True)
    if since and until and since >= until:
        problems["until"] = "must be later than since"
    if len(values["q"]) > QUERY_MAX_CHARS:
        problems["q"] = f"at most {QUERY_MAX_CHARS} characters"
    if problems:
        raise ValidationError("some filters are not valid: " + "; ".join(f"{k}: {v}" for k, v in problems.items()),
                              code="invalid_audit_filter", details=problems)
    return AuditFilters(values=values, exact=exact, since=since, until=until, q=pg_text(values["q"]))


def _moment(value: str, name: str, problems: dict[str, str], *, end_of_day: bool = False) -> datetime | None:
    """An ISO 8601 date or date-time (a naive one is in the server's time zone); a bare date as `until` means
    the end of that day."""
    if not value:
        return None
    try:
        moment = parse_datetime(value)
        day = None if moment else parse_date(value)
    except ValueError:
        moment = day = None
    if day is not None:
        moment = datetime.combine(day + timedelta(days=1) if end_of_day else day, time.min)
    if moment is None:
        problems[name] = "not a date or date-time (e.g. 2026-11-23 or 2026-11-23T14:30)"
        return None
    return timezone.make_aware(moment) if timezone.is_naive(moment) else moment


def audit_search(filters: AuditFilters) -> QuerySet[ToolInvocation]:
    """The audit rows a search selects, newest first (id breaks ties so keyset pages are exact). The free text
    is matched through the GIN index on `invocation_search_document` (websearch syntax, 'simple' config)."""
    qs = ToolInvocation.objects.filter(**filters.exact)
    if filters.since:
        qs = qs.filter(created_at__gte=filters.since)
    if filters.until:
        qs = qs.filter(created_at__lt=filters.until)
    if filters.q:
        query = SearchQuery(filters.q, config="simple", search_type="websearch")
        qs = qs.alias(document=invocation_search_document()).filter(document=query)
    return qs.order_by("-created_at", "-id")


# --- count-free pages ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AuditPage:
    """One page of a search: `older` / `newer` are the cursors of the neighbouring pages (None at an end)."""

    rows: list[ToolInvocation]
    older: str | None
    newer: str | None


def audit_cursor(row: ToolInvocation) -> str:
    """A row's place in the newest-first order, as it appears in a URL."""
    stamp = row.created_at.astimezone(dt_timezone.utc)
    return f"{int(stamp.timestamp()) * 1_000_000 + stamp.microsecond}.{row.pk.hex}"


def _cursor_parse(value: str) -> tuple[datetime, uuid.UUID]:
    try:
        micros, _, ident = value.partition(".")
        seconds, micro = divmod(int(micros), 1_000_000)
        moment = datetime.fromtimestamp(seconds, dt_timezone.utc).replace(microsecond=micro)
        return moment, uuid.UUID(hex=ident)
    except (ValueError, OverflowError, OSError):
        raise ValidationError("this page link is broken; start from the first page",
                              code="invalid_audit_cursor", details={"cursor": "not a page position"}) from None


def audit_page(filters: AuditFilters, *, older_than: str = "", newer_than: str = "",
               size: int = PAGE_SIZE) -> AuditPage:
    """A page of `size` rows after (`older_than`) or before (`newer_than`) a cursor, or the newest page. It reads
    size + 1 rows to know whether another page follows, and never counts the matches."""
    qs = audit_search(filters)
    if newer_than:
        moment, ident = _cursor_parse(newer_than)
        qs = qs.filter(Q(created_at__gt=moment) | Q(created_at=moment, id__gt=ident), created_at__gte=moment)
        rows = list(qs.order_by("created_at", "id")[: size + 1])
        more = len(rows) > size
        rows = rows[:size][::-1]
        return AuditPage(rows, audit_cursor(rows[-1]) if rows else None, audit_cursor(rows[0]) if more else None)
    if older_than:
        moment, ident = _cursor_parse(older_than)
        qs = qs.filter(Q(created_at__lt=moment) | Q(created_at=moment, id__lt=ident), created_at__lte=moment)
    rows = list(qs[: size + 1])
    more = len(rows) > size
    rows = rows[:size]
    return AuditPage(rows, audit_cursor(rows[-1]) if more else None,
                     audit_cursor(rows[0]) if older_than and rows else None)


# --- one call and what it links to -------------------------------------------------------------------------
def audit_invocation_get(invocation_id: str) -> ToolInvocation:
    try:
        ident = uuid.UUID(str(invocation_id))
    except ValueError:
        raise NotFound("no such audit row", code="invocation_not_found") from None
    row = ToolInvocation.objects.filter(pk=ident).first()
    if row is None:
        raise NotFound("no such audit row (it may have been purged)", code="invocation_not_found")
    return row


@dataclass(frozen=True)
class AuditLinks:
    """What one call is linked to: the approval it waited for or redeemed, the held change it was or applied,
    the pending row of the same decision (for an approved run) and its stored output."""

    approvals: list[ApprovalRequest]
    changes: list[PendingChange]
    held_rows: list[ToolInvocation]
    output: StoredToolOutput | None  # annotated: `chars` (its length) and `head` (its beginning)


def _linked(own_id, invocation_id) -> Q:
    """Rows whose run this call is (`invocation_id`), or the one this call was held as (`own_id`)."""
    return Q(invocation_id=invocation_id) | Q(pk=own_id) if own_id else Q(invocation_id=invocation_id)


def audit_invocation_links(row: ToolInvocation, *, output_preview_chars: int = 4000) -> AuditLinks:
    """Exact links only: the pending row carries `approval_id` / `pending_change_id`; the approved run is the
    request's or change's `invocation_id`; the output is `output_id` (its length and head, not the whole text)."""
    approvals = list(ApprovalRequest.objects.select_related("decided_by")
                     .filter(_linked(row.approval_id, row.pk)).order_by("requested_at"))
    changes = list(PendingChange.objects.select_related("decided_by").defer("sealed_arguments")
                   .filter(_linked(row.pending_change_id, row.pk)).order_by("created_at"))
    held: list[ToolInvocation] = []
    approval_ids = [a.pk for a in approvals if a.pk != row.approval_id]
    change_ids = [c.pk for c in changes if c.pk != row.pending_change_id]
    if approval_ids or change_ids:
        held = list(ToolInvocation.objects.filter(Q(approval_id__in=approval_ids) | Q(pending_change_id__in=change_ids))
                    .exclude(pk=row.pk).order_by("created_at"))
    output = None
    if row.output_id:
        output = (StoredToolOutput.objects.filter(pk=row.output_id)
                  .annotate(chars=Length("content"), head=Substr("content", 1, output_preview_chars))
                  .defer("content").first())
    return AuditLinks(approvals, changes, held, output)


# --- payloads: what a person without tools_app.view_payload sees -----------------------------------------------
# An audit row's payloads are what the agent sent and what came back: arguments, the error text, the observe reasons,
# and the stored output. They are stored scrubbed; people who may read audit rows but not payloads (Operators) see
# each string cut to a short preview, stored outputs not at all. Every entrypoint (API, admin, console) masks with
# these functions and records the reads that show payloads (tools_app.services.audit.audit_payload_viewed).
PAYLOAD_PERMISSION = "tools_app.view_payload"
PAYLOAD_PREVIEW_CHARS = 40
PAYLOAD_FIELDS = ("arguments", "error", "observe_reasons")
_MASK_DEPTH = 32  # deeper structures (agents choose the nesting) are summarised rather than walked


def payloads_visible(user) -> bool:
    """May this person read audit payloads as stored (and so have the read recorded)?"""
    return person_may(user, PAYLOAD_PERMISSION)


def payload_preview(text: str) -> str:
    """A payload string as people without view_payload see it: scrubbed again (rows kept from before a detector
    existed), then cut to its first PAYLOAD_PREVIEW_CHARS characters with its length."""
    text = default_scrubber.scrub(text)[0] if text else ""
    if len(text) <= PAYLOAD_PREVIEW_CHARS:
        return text
    return f"{text[:PAYLOAD_PREVIEW_CHARS]}…({len(text)} chars)"


def payload_masked(value: Any, _depth: int = 0) -> Any:
    """`value` (arguments, observe reasons, an error) with every string, keys included, replaced by its preview;
    numbers, booleans and null are kept, the shape too (down to _MASK_DEPTH levels)."""
    if isinstance(value, str):
        return payload_preview(value)
    if isinstance(value, (dict, list, tuple)) and _depth >= _MASK_DEPTH:
        return "…(nested deeper)"
    if isinstance(value, dict):
        return {payload_preview(str(key)): payload_masked(item, _depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [payload_masked(item, _depth + 1) for item in value]
    return value


def output_masked(content: str | None, chars: int | None = None) -> str:
    """What people without view_payload see of a stored output: that it exists and its size, never its text."""
    size = chars if chars is not None else len(content or "")
    return f"(hidden: {size} characters; reading stored outputs needs {PAYLOAD_PERMISSION})"


def invocation_payloads_masked(record: dict[str, Any]) -> dict[str, Any]:
    """A serialised invocation (API row, export record) with its payload fields masked; other fields unchanged."""
    masked = dict(record)
    for name in PAYLOAD_FIELDS:
        if name in masked:
            masked[name] = payload_masked(masked[name])
    return masked
