"""Audit search pages: the search (filters in the query string, count-free pages), one call with its links, and
the export of a search as CSV or JSON lines, streamed. Thin: tools_app.selectors_audit and tools_app.services.audit
do the work (docs/audit-search.md)."""
from __future__ import annotations

import json
import logging
from urllib.parse import urlencode

from django.contrib import admin
from django.core.serializers.json import DjangoJSONEncoder
from django.http import StreamingHttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from goclaw.authz import person_required
from goclaw.errors import NotFound, ValidationError
from tools_app.choices import InvocationStatus
from tools_app.security.scrub import default_scrubber
from tools_app.selectors_audit import (PAYLOAD_PERMISSION, AuditFilters, audit_filters_parse, audit_invocation_get,
                                       audit_invocation_links, audit_page, audit_search, output_masked, payload_masked,
                                       payloads_visible)
from tools_app.services.audit import audit_export_csv, audit_export_jsonl, audit_exported, audit_payload_viewed

logger = logging.getLogger("goclaw.audit")

PERMISSION = "tools_app.view_toolinvocation"
EXPORT_PERMISSION = "tools_app.export_audit"
_EXPORTS = {"csv": (audit_export_csv, "text/csv; charset=utf-8"),
            "jsonl": (audit_export_jsonl, "application/x-ndjson; charset=utf-8")}


def _filters(request) -> AuditFilters:
    """The checked filters; the free text searches the payloads (arguments, errors), so it needs view_payload like
    reading them (else a person could read a masked payload by guessing it)."""
    filters = audit_filters_parse(request.GET)
    if filters.q and not payloads_visible(request.user):
        raise ValidationError(f"text search reads the arguments and errors: it needs the {PAYLOAD_PERMISSION} "
                              f"permission", code="invalid_audit_filter", details={"q": f"needs {PAYLOAD_PERMISSION}"})
    return filters


def _summary(row, visible: bool) -> tuple[str, str]:
    """The search page's payload column and its tooltip for one row (the template cuts them)."""
    if visible:
        return row.error or str(row.arguments), row.error
    return payload_masked(row.error) if row.error else json.dumps(payload_masked(row.arguments), ensure_ascii=False), ""


def _render(request, template: str, status: int = 200, **context) -> TemplateResponse:
    return TemplateResponse(request, template, {**admin.site.each_context(request), **context}, status=status)


@person_required(PERMISSION)
@require_GET
def audit_search_page(request):
    """The search form and one page of matching calls, newest first (payloads masked without view_payload)."""
    visible = payloads_visible(request.user)
    context = {"title": "Audit search", "statuses": InvocationStatus.values, "values": request.GET,
               "payloads_visible": visible, "may_export": request.user.has_perm(EXPORT_PERMISSION)}
    try:
        filters = _filters(request)
        page = audit_page(filters, older_than=request.GET.get("older", ""), newer_than=request.GET.get("newer", ""))
    except ValidationError as exc:
        return _render(request, "console_app/audit/search.html", status=400, error=exc, **context)
    for row in page.rows:
        row.payload_text, row.payload_title = _summary(row, visible)
    if visible:
        audit_payload_viewed(person=request.user, invocation_ids=[row.pk for row in page.rows], where="console")
    query = filters.query_items()
    return _render(request, "console_app/audit/search.html", filters=filters, page=page,
                   query=urlencode(query), searched=bool(query), **context)


@person_required(PERMISSION)
@require_GET
def audit_detail_page(request, invocation_id: str):
    """One call: what was asked (scrubbed again for display; masked without view_payload, the read recorded with
    it) and every row it links to."""
    try:
        row = audit_invocation_get(invocation_id)
    except NotFound as exc:
        return _render(request, "console_app/audit/detail.html", status=404, title="Audit row", error=exc)
    links = audit_invocation_links(row)
    visible = payloads_visible(request.user)
    if visible:
        audit_payload_viewed(person=request.user, invocation_ids=[row.pk], where="console", target=str(row.pk),
                             output_ids=[links.output.pk] if links.output else ())
        arguments = default_scrubber.scrub_data(row.arguments)[0]
        error_text = default_scrubber.scrub(row.error)[0] if row.error else ""
        observations = [default_scrubber.scrub(str(o))[0] for o in row.observe_reasons or []]
        output_head = default_scrubber.scrub(links.output.head)[0] if links.output else ""
    else:
        arguments = payload_masked(row.arguments)
        error_text = payload_masked(row.error) if row.error else ""
        observations = [payload_masked(str(o)) for o in row.observe_reasons or []]
        output_head = output_masked(None, links.output.chars) if links.output else ""
    return _render(request, "console_app/audit/detail.html", title=f"Call {row.pk}", row=row, links=links,
                   arguments=json.dumps(arguments, indent=2, ensure_ascii=False, cls=DjangoJSONEncoder),
                   error_text=error_text, observations=observations, output_head=output_head,
                   payloads_visible=visible, events=_events(row, links))


def _events(row, links) -> list[dict]:
    """The events published about this call (they are delivered live, not stored): the event, where it went, and
    the stored row that is its durable record."""
    payload = {"invocation_id": str(row.pk), "agent": row.agent_key, "tool": row.tool_name, "status": row.status,
               "duration_ms": round(row.duration_ms, 3), "session_key": row.session_key, "observed": row.observed}
    events = [{"name": "tool.executed", "groups": [f"agent.{row.agent_key}", "invocations"], "at": row.created_at,
               "payload": json.dumps(payload, ensure_ascii=False), "record": "this audit row"}]
    for approval in links.approvals:
        if approval.pk == row.approval_id:
            events.append({"name": "approval.requested", "groups": ["approvals", f"agent.{row.agent_key}"],
                           "at": approval.requested_at, "record": "the approval request"})
        if approval.pk == row.approval_id and approval.status != "pending":
            events.append({"name": "approval.resolved", "groups": ["approvals", f"agent.{row.agent_key}"],
                           "at": approval.decided_at, "record": f"the approval request ({approval.status})"})
    for change in links.changes:
        if change.pk == row.pending_change_id:
            events.append({"name": "pending_change.created", "groups": ["approvals", f"agent.{row.agent_key}"],
                           "at": change.created_at, "record": "the held change"})
        if change.pk == row.pending_change_id and change.status != "pending":
            events.append({"name": "pending_change.resolved", "groups": ["approvals", f"agent.{row.agent_key}"],
                           "at": change.decided_at, "record": f"the held change ({change.status})"})
    return events


@person_required(PERMISSION, EXPORT_PERMISSION)
@require_GET
def audit_export(request, fmt: str):
    """The whole search (every page, same filters) as a download, streamed from a server-side cursor; payloads
    masked without view_payload. The export is recorded (who, filters, rows) before the first byte leaves."""
    try:
        filters: AuditFilters = _filters(request)
    except ValidationError as exc:
        return _render(request, "console_app/audit/search.html", status=400, error=exc, title="Audit search",
                       statuses=InvocationStatus.values, values=request.GET)
    produce, content_type = _EXPORTS[fmt]
    visible = payloads_visible(request.user)
    rows = audit_search(filters)
    audit_exported(person=request.user, filters=dict(filters.query_items()), rows=rows.count(), fmt=fmt,
                   payloads=visible)
    logger.info("audit export (%s) by %s: %s", fmt, request.user.get_username(),
                default_scrubber.scrub(urlencode(filters.query_items()))[0])
    response = StreamingHttpResponse(produce(rows, payloads=visible), content_type=content_type)
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = f'attachment; filename="goclaw-audit-{stamp}.{fmt}"'
    response["Cache-Control"] = "no-store"
    return response
