"""Hosted sessions in the console: the list (filters, live rows) and one session's timeline (header, sub-session
tree, messages with each tool call's verdict, audit row and approval, the waiting approval with its decide buttons,
cancel), kept live over /ws/events/. Thin: runtime_app's selectors and services, and the approval queue's
service (tools_app.services.approvals.approval_decide) do the work (docs/runtime.md)."""
from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.core.paginator import Paginator
from django.http import JsonResponse
from django.shortcuts import redirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from console_app.sessions import selectors
from console_app.sessions.forms import SessionFilterForm
from goclaw.authz import person_may, person_required
from goclaw.errors import ApplicationError, NotFound, ValidationError
from runtime_app.choices import ACTIVE_STATUSES, MessageRole, SessionStatus
from runtime_app.models import Session, SessionMessage
from runtime_app.selectors import session_get_for, session_list_for, session_messages
from runtime_app.services.sessions import session_cancel
from tools_app.admin.approvals import DECIDE_APPROVALS, VIEW_APPROVALS, approval_why_and_risk
from tools_app.choices import ApprovalStatus
from tools_app.security.scrub import default_scrubber
from tools_app.services.approvals import approval_decide

VIEW = ("runtime_app.view_session", "runtime_app.view_sessionmessage")
RUN = "runtime_app.run_session"
AUDIT = "tools_app.view_toolinvocation"  # the audit detail page's permission (console_app.audit.views)
PAGE_SIZE = 50
MESSAGES_PER_PAGE = 300
CONTENT_CHARS = 20_000  # a message's text on the page; the whole of it stays in the row (and the API)
ARGUMENT_CHARS = 2_000
# Only these are decided inline: "allow always" creates a rule, which the queue shows (and confirms) first.
INLINE_DECISIONS = ("allow_once", "deny")
VERDICT_CLASSES = {"ok": "good", "error": "bad", "denied": "bad", "timeout": "bad", "cancelled": "bad",
                   "rate_limited": "warn", "pending_approval": "warn"}


def _render(request, template: str, status: int = 200, **context) -> TemplateResponse:
    return TemplateResponse(request, template, {**admin.site.each_context(request), **context}, status=status)


def _actor(request) -> str:
    return f"staff:{request.user.get_username()}"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text) - limit} characters more)"


# --- the list -------------------------------------------------------------------------------------------------------
@person_required(*VIEW)
@require_GET
def session_list_page(request):
    """Sessions, newest activity first, filtered by agent key, user id and status; 50 a page."""
    form = SessionFilterForm(request.GET)
    context: dict[str, Any] = {"title": "Sessions", "form": form, "statuses": SessionStatus.values,
                               "values": request.GET}
    if not form.is_valid():
        return _render(request, "console_app/sessions/list.html", status=400, **context)
    filters = form.filters()
    page = Paginator(session_list_for(None, filters=filters), PAGE_SIZE).get_page(request.GET.get("page"))
    return _render(request, "console_app/sessions/list.html", page=page, query=urlencode(filters),
                   filtered=bool(filters), **context)


# --- one session ----------------------------------------------------------------------------------------------------
def _tool_calls(raw: Any) -> list[dict[str, str]]:
    """An assistant message's tool calls for display: the model's text, scrubbed (they are stored as sent, for an
    approved call to run with exactly those; runtime_app scrubs them on the way out too) and cut."""
    calls = []
    for call in raw if isinstance(raw, list) else []:
        if not isinstance(call, dict):
            continue
        arguments = call.get("arguments", "")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments, ensure_ascii=False)
        calls.append({"id": str(call.get("id", ""))[:200], "name": str(call.get("name", ""))[:200],
                      "arguments": _cut(default_scrubber.scrub(arguments)[0], ARGUMENT_CHARS)})
    return calls


def _message_rows(rows: list[SessionMessage]) -> list[dict[str, Any]]:
    approvals = selectors.approvals_by_id(m.approval_id for m in rows)
    return [{"m": m, "content": _cut(m.content, CONTENT_CHARS),
             "tool_calls": _tool_calls(m.tool_calls) if m.role == MessageRole.ASSISTANT else [],
             "verdict_class": VERDICT_CLASSES.get(m.verdict, "other"), "approval": approvals.get(m.approval_id)}
            for m in rows]


def _messages_window(request, session: Session) -> dict[str, Any]:
    """Which messages the page shows: the last MESSAGES_PER_PAGE, or those from `?from=<seq>` on (seqs run 1…n)."""
    last = selectors.session_last_seq(session)
    try:
        first = max(1, int(request.GET["from"]))
    except (KeyError, ValueError):
        first = max(1, last - MESSAGES_PER_PAGE + 1)
    rows = session_messages(session, after=first - 1, limit=MESSAGES_PER_PAGE)
    shown_to = rows[-1].seq if rows else first - 1
    return {"rows": _message_rows(rows), "earlier": max(1, first - MESSAGES_PER_PAGE) if first > 1 else None,
            "later": shown_to + 1 if shown_to < last else None, "last_seq": shown_to, "tail": shown_to >= last}


def _pending(session: Session) -> Any:
    """The approval request a parked session waits on, prepared as the approval queue shows it."""
    if session.status != SessionStatus.WAITING_APPROVAL:
        return None
    req = selectors.session_pending_approval(session)
    if req is not None:
        req.arguments_json = json.dumps(req.arguments, indent=2, ensure_ascii=False, sort_keys=True)
        req.why_lines, req.risk_line, req.risk_level = approval_why_and_risk(req)
    return req


def _state(request, session: Session) -> dict[str, Any]:
    """What the header, the approval panel and the tree show (the page and its live refresh share it)."""
    user = request.user
    tree, tree_cut = selectors.session_tree(session)
    pending = _pending(session)
    return {"session": session, "parent": session.parent if session.parent_id else None,
            "tree": tree, "tree_cut": tree_cut, "pending": pending,
            "may_cancel": session.status in ACTIVE_STATUSES and person_may(user, *VIEW, RUN),
            "may_decide": pending is not None and pending.status == ApprovalStatus.PENDING
            and person_may(user, *VIEW, DECIDE_APPROVALS),
            "may_audit": person_may(user, AUDIT), "may_view_approvals": person_may(user, VIEW_APPROVALS)}


@person_required(*VIEW)
@require_GET
def session_timeline_page(request, session_id):
    """One session: header, sub-sessions, messages in order, the waiting approval; live over the WebSocket."""
    try:
        session = session_get_for(None, session_id)
    except NotFound as exc:
        return _render(request, "console_app/sessions/timeline.html", status=404, title="Session", error=exc)
    state = _state(request, session)
    return _render(request, "console_app/sessions/timeline.html", title=f"Session {session.key}",
                   window=_messages_window(request, session), **state)


@person_required(*VIEW)
@never_cache
@require_GET
def session_timeline_live(request, session_id):
    """The timeline's parts re-rendered (JSON of escaped HTML) and the messages after `?after=<seq>`: the page asks
    for them when an event says its session or a sub-session changed."""
    try:
        session = session_get_for(None, session_id)
        after = max(0, int(request.GET.get("after", "0")))
    except NotFound as exc:
        return JsonResponse({"error": {"code": exc.code, "message": exc.message}}, status=404)
    except ValueError:
        return JsonResponse({"error": {"code": "invalid_after", "message": "after must be a number"}}, status=400)
    state = _state(request, session)
    rows = session_messages(session, after=after, limit=MESSAGES_PER_PAGE)

    def part(name: str, **extra) -> str:
        return render_to_string(f"console_app/sessions/_{name}.html", {**state, **extra}, request)

    return JsonResponse({
        "status": session.status, "header": part("header"), "approval": part("approval"), "tree": part("tree"),
        "messages": part("messages", rows=_message_rows(rows)), "last_seq": rows[-1].seq if rows else after,
        "more": len(rows) == MESSAGES_PER_PAGE})


def _back(session_id):
    return redirect("console:session_timeline", session_id=session_id)


@person_required(POST=(*VIEW, RUN))
def session_cancel_view(request, session_id):
    """The Cancel button: runtime_app's session_cancel (its model request, tool call and sub-sessions stop)."""
    try:
        session = session_get_for(None, session_id)
        session = session_cancel(session=session, actor=_actor(request))
    except NotFound as exc:
        return _render(request, "console_app/sessions/timeline.html", status=404, title="Session", error=exc)
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Session {session.key}: {session.status}")
    return _back(session_id)


@person_required(POST=(*VIEW, DECIDE_APPROVALS))
def session_approval_decide(request, session_id, approval_id):
    """Approve once / Deny on the call the session waits on, through the approval queue's service."""
    try:
        session = session_get_for(None, session_id)
    except NotFound as exc:
        return _render(request, "console_app/sessions/timeline.html", status=404, title="Session", error=exc)
    decision = request.POST.get("decision", "")
    try:
        if decision not in INLINE_DECISIONS:
            raise ValidationError("decide allow once or deny here; allow always from the approval queue",
                                  code="invalid_decision")
        req = selectors.session_waiting_approval_get(session, approval_id)
        req = approval_decide(approval_id=req.pk, decision=decision, actor=request.user,
                              note=request.POST.get("note", "")[:500])
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"{req.get_decision_display()}: {session.agent.key} {req.tool_name}")
    return _back(session_id)
