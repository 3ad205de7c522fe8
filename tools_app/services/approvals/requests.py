"""Approval requests: durable, bound to the exact call (arguments hash), decided exactly once, expiring, and waited
for (long poll)."""
from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from goclaw import events
from goclaw.db import pg_json, pg_text
from goclaw.errors import Conflict, Gone, NotFound, ValidationError
from tools_app.base import Tool, ToolContext
from tools_app.choices import ApprovalDecision, ApprovalStatus, RuleMatch
from tools_app.models import Agent, ApprovalRequest
from tools_app.labels import echo
from tools_app.security.scrub import default_scrubber
from tools_app.services.approvals.effects import normalised_workspace_path
from tools_app.services.approvals.decision import arguments_hash
from tools_app.services.approvals.identity import identity_store
from tools_app.services.approvals.rules import approval_rule_create

logger = logging.getLogger("goclaw.approvals")

MAX_WAIT_SECONDS = 60
POLL_SECONDS = 0.25


# --- summary ----------------------------------------------------------------------------------------
def approval_summary(tool: Tool, args: dict, workspace=None) -> tuple[str, dict]:
    """What will run and where, for the person deciding (the tool's own `summarize`), scrubbed; a path argument also
    shows the normalised workspace path a path rule would be matched against."""
    summary, details = tool.summarize(args, workspace)
    if "path" in details:
        resolved = normalised_workspace_path(workspace, details["path"])
        if resolved is not None:
            details["resolved_path"] = resolved
    summary, _ = default_scrubber.scrub(summary[:4000])
    details, _ = default_scrubber.scrub_data(details)
    return summary, details


# --- requests ---------------------------------------------------------------------------------------
def approval_timeout(config: dict) -> timedelta:
    seconds = config.get("approval_timeout_seconds") or settings.APPROVAL_TIMEOUT_SECONDS
    return timedelta(seconds=int(seconds))


def _payload(req: ApprovalRequest) -> dict:
    return {
        "id": str(req.id), "agent": req.agent.key, "tool": req.tool_name, "status": req.status, "decision": req.decision,
        "summary": req.summary, "details": req.details, "arguments": req.arguments, "reason": req.reason,
        "user_id": req.user_id, "session_key": req.session_key, "requested_at": req.requested_at,
        "expires_at": req.expires_at, "decided_at": req.decided_at,
        "decided_by": req.decided_by.get_username() if req.decided_by_id else None,
    }


def _publish(event: str, req: ApprovalRequest) -> None:
    events.publish(event, _payload(req), ["approvals", events.agent_group(req.agent.key)])
    transaction.on_commit(_wake_waiters)


@transaction.atomic
def approval_request_create(*, agent: Agent, tool: Tool, args: dict, ctx: ToolContext, reason: str = "",
                            call_context: dict | None = None) -> ApprovalRequest:
    """A durable request for this exact call (arguments scrubbed for display, the hash binds the real ones)."""
    safe_args, _ = default_scrubber.scrub_data(args)
    summary, details = approval_summary(tool, args, ctx.workspace.root if ctx.workspace is not None else None)
    reason, _ = default_scrubber.scrub(reason[:500])
    if tool.always_require_approval:
        details["always_require_approval"] = True  # no allow-always rule for it
    now = timezone.now()
    request_id = uuid.uuid4()
    identity, stored_context = identity_store(ctx, call_context or {}, request_id)
    req = ApprovalRequest.objects.create(
        id=request_id, agent=agent, **identity, call_context=pg_json(stored_context), tool_name=tool.name, arguments=pg_json(safe_args), args_hash=arguments_hash(tool.name, args), summary=pg_text(summary),
        details=pg_json(details), reason=pg_text(reason[:500]), requested_at=now, expires_at=now + approval_timeout(ctx.settings),
    )
    _publish("approval.requested", req)
    return req


def _expire(req: ApprovalRequest) -> bool:
    """Mark an overdue pending (or approved, unused) request expired; True when this call did it."""
    done = ApprovalRequest.objects.filter(
        pk=req.pk, status__in=[ApprovalStatus.PENDING, ApprovalStatus.APPROVED], consumed_at__isnull=True,
        expires_at__lte=timezone.now(),
    ).update(status=ApprovalStatus.EXPIRED)
    if done:
        req.status = ApprovalStatus.EXPIRED
        _publish("approval.resolved", req)
    return bool(done)


@transaction.atomic
def approval_expire_if_overdue(*, approval_id) -> bool:
    req = ApprovalRequest.objects.select_related("agent", "decided_by").filter(pk=approval_id).first()
    return req is not None and _expire(req)


@transaction.atomic
def approval_sweep_expired(limit: int = 500) -> int:
    """Expire every overdue request (the django-q2 schedule runs this; decisions and executions also check
    the deadline themselves, so expiry holds without a worker)."""
    overdue = list(
        ApprovalRequest.objects.select_for_update(skip_locked=True, of=("self",)).select_related("agent", "decided_by")
        .filter(status__in=[ApprovalStatus.PENDING, ApprovalStatus.APPROVED], consumed_at__isnull=True,
                expires_at__lte=timezone.now())[:limit]
    )
    return sum(_expire(req) for req in overdue)


def approval_decide(*, approval_id, decision: str, actor, note: str = "", rule_match: str = RuleMatch.EXACT,
                    rule_pattern: Any = None, rule_user_only: bool = False, rule_expires_at: datetime | None = None) -> ApprovalRequest:
    """allow_once / allow_always / deny a pending request. The row lock makes exactly one concurrent decision
    win; the others get Conflict. A request past its deadline is marked expired and the decision refused (Gone).
    allow_always also creates the ApprovalRule in the same transaction."""
    if decision not in ApprovalDecision.values:
        raise ValidationError(f"decision must be one of {', '.join(ApprovalDecision.values)}", code="invalid_decision")
    with transaction.atomic():
        req = ApprovalRequest.objects.select_for_update(of=("self",)).select_related("agent").filter(pk=approval_id).first()
        if req is None:
            raise NotFound("no such approval request", code="approval_not_found")
        expired = req.status == ApprovalStatus.PENDING and req.is_overdue and _expire(req)
        if not expired and req.status == ApprovalStatus.EXPIRED:
            expired = True
        if not expired:
            if req.status != ApprovalStatus.PENDING:
                raise Conflict(f"this request was already decided ({req.status})", code="approval_already_decided",
                               details={"status": req.status, "decision": req.decision})
            now = timezone.now()
            if decision == ApprovalDecision.ALLOW_ALWAYS:
                req.rule = approval_rule_create(req, actor=actor, match=rule_match, pattern=rule_pattern,
                                        user_only=rule_user_only, expires_at=rule_expires_at)
            approved = decision != ApprovalDecision.DENY
            req.status = ApprovalStatus.APPROVED if approved else ApprovalStatus.DENIED
            req.decision, req.decided_at, req.note = decision, now, echo(note, 500)
            req.decided_by = actor if getattr(actor, "pk", None) else None
            if approved:  # from now on the deadline is the one for running it
                req.expires_at = max(req.expires_at, now + approval_timeout(req.agent.other_config or {}))
            req.save(update_fields=["status", "decision", "decided_at", "note", "decided_by", "expires_at", "rule"])
            _publish("approval.resolved", req)
    if expired:
        raise Gone("this approval request expired; the call was denied", code="approval_expired")
    return req


@transaction.atomic
def approval_cancel(*, approval_id, agent: Agent | None) -> ApprovalRequest:
    """The agent (or staff, agent=None) withdraws a pending request."""
    qs = ApprovalRequest.objects.select_related("agent", "decided_by").filter(pk=approval_id)
    if agent is not None:
        qs = qs.filter(agent=agent)
    req = qs.first()
    if req is None:
        raise NotFound("no such approval request", code="approval_not_found")
    if not ApprovalRequest.objects.filter(pk=req.pk, status=ApprovalStatus.PENDING).update(status=ApprovalStatus.CANCELLED):
        raise Conflict(f"this request is {req.status}, not pending", code="approval_not_pending", details={"status": req.status})
    req.status = ApprovalStatus.CANCELLED
    _publish("approval.resolved", req)
    return req


# --- waiting ----------------------------------------------------------------------------------------
_decided = threading.Condition()


def _wake_waiters() -> None:
    with _decided:
        _decided.notify_all()


def approval_wait(*, approval_id, seconds: float) -> ApprovalRequest:
    """Long-poll until the request leaves `pending` or `seconds` (at most 60) pass. Reads one indexed row every
    0.25 s outside any transaction; a decision made in this process wakes the waiter at once."""
    deadline = time.monotonic() + max(0.0, min(float(seconds), MAX_WAIT_SECONDS))
    while True:
        row = ApprovalRequest.objects.filter(pk=approval_id).values_list("status", "expires_at").first()
        if row is None:
            raise NotFound("no such approval request", code="approval_not_found")
        status, expires_at = row
        if status != ApprovalStatus.PENDING:
            break
        if expires_at <= timezone.now():
            approval_expire_if_overdue(approval_id=approval_id)
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        with _decided:
            _decided.wait(min(POLL_SECONDS, remaining))
    return ApprovalRequest.objects.select_related("agent", "decided_by").get(pk=approval_id)


