"""Approval requests: durable, bound to the exact call (arguments hash), decided exactly once, expiring, and waited
for (long poll)."""
from __future__ import annotations

import logging
import shlex
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
from tools_app.security.shell_check import analyse_for_rules
from tools_app.services.approvals.effects import TEXT, _path_judge, command_effects, normalised_workspace_path
from tools_app.services.approvals.decision import arguments_hash
from tools_app.services.approvals.identity import identity_store
from tools_app.services.approvals.rules import approval_rule_create
from tools_app.services.audit import audit_actor, audit_event_record
from tools_app.services.notifications import notification_deliveries_create

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


# --- risk: what the analysed command does -------------------------------------------------------------
# Worst first; "high" effects reach past the workspace or cannot be undone.
RISK_TEXT = {
    "privilege": "runs with elevated privileges", "delete": "deletes files", "outside": "names paths outside the workspace",
    "send": "uploads local data", "network": "uses the network", "run": "runs other programs or code",
    "write": "writes files", "config": "changes a program's configuration",
    "unknown": "does things goclaw cannot classify", "change": "changes files or state (a mutating tool)",
}
HIGH_RISK = frozenset({"privilege", "delete", "outside", "send"})
_PRIVILEGE_WRAPPERS = frozenset({"sudo", "doas", "su", "pkexec", "run0"})


def approval_risk(tool: Tool, args: dict, workspace=None) -> dict:
    """What the call does, from the shell analysis of the command it runs (never its text): effects with the commands
    that have them, a level (high / medium / low) and one line for people. Tools without a command: mutating or not."""
    found: dict[str, list[str]] = {}

    def add(effect: str, where: str = "") -> None:
        places = found.setdefault(effect, [])
        if where and where not in places and len(places) < 3:
            places.append(where[:120])

    command = tool.command_for(args)
    if command is None:
        if tool.mutating:
            add("change", str(args.get("path", "")) if isinstance(args.get("path"), str) else "")
    else:
        analysis = analyse_for_rules(command)
        escapes = _path_judge(workspace, args.get("working_dir"))
        if escapes is None:
            add("outside", "the working directory")
        for view in analysis.commands:
            shown = shlex.join(view.argv)
            if any(layer and layer[0] in _PRIVILEGE_WRAPPERS for layer in view.layers):
                add("privilege", shown)
            for effect, _ in command_effects(view.argv, escapes or (lambda _: False)):
                if effect != TEXT:
                    add(effect, shown)
            for op, target in view.redirects:
                if ">" in op and not target.startswith("&") and target != "/dev/null":
                    add("write", f"{shown} {op} {target}")
                    if escapes is not None and escapes(target):
                        add("outside", target)
            if escapes is not None:
                for arg in view.argv[1:]:
                    if escapes(arg):
                        add("outside", arg)
            if view.problems or view.inline_code:
                add("unknown", shown)
        if analysis.problems:
            add("unknown", "; ".join(analysis.problems))
    effects = [{"effect": e, "text": RISK_TEXT[e], "where": found[e]} for e in RISK_TEXT if e in found]
    level = "high" if HIGH_RISK & found.keys() else ("medium" if found else "low")
    parts = [e["text"] + (f" ({', '.join(e['where'])})" if e["where"] else "") for e in effects]
    line = f"Risk ({level}): " + ("; ".join(parts) if parts else "reads only")
    risk, _ = default_scrubber.scrub_data({"level": level, "effects": effects, "line": line})
    return risk


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
                            call_context: dict | None = None, why: dict | None = None) -> ApprovalRequest:
    """A durable request for this exact call (arguments scrubbed for display, the hash binds the real ones), with
    why it asks (`why`, from the gate) and its risk in `details`; its notifications are created in the same
    transaction."""
    safe_args, _ = default_scrubber.scrub_data(args)
    root = ctx.workspace.root if ctx.workspace is not None else None
    summary, details = approval_summary(tool, args, root)
    reason, _ = default_scrubber.scrub(reason[:500])
    if tool.always_require_approval:
        details["always_require_approval"] = True  # no allow-always rule for it
    try:
        details["risk"] = approval_risk(tool, args, root)
    except Exception:  # the risk line informs; it never stops a request from reaching people
        logger.exception("risk analysis failed for %s:%s", agent.key, tool.name)
    if why:
        details["why"], _ = default_scrubber.scrub_data(why)
    now = timezone.now()
    request_id = uuid.uuid4()
    identity, stored_context = identity_store(ctx, call_context or {}, request_id)
    req = ApprovalRequest.objects.create(
        id=request_id, agent=agent, **identity, call_context=pg_json(stored_context), tool_name=tool.name, arguments=pg_json(safe_args), args_hash=arguments_hash(tool.name, args), summary=pg_text(summary),
        details=pg_json(details), reason=pg_text(reason[:500]), requested_at=now, expires_at=now + approval_timeout(ctx.settings),
    )
    notification_deliveries_create(req)
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
            audit_event_record(kind="approval.decided", actor=audit_actor(actor), target=str(req.pk), details={
                "agent": req.agent.key, "tool": req.tool_name, "decision": decision, "note": req.note,
                "args_hash": req.args_hash, "rule": req.rule_id, "summary": req.summary[:500]})
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
    audit_event_record(kind="approval.cancelled", actor=audit_actor(agent), target=str(req.pk),
                       details={"agent": req.agent.key, "tool": req.tool_name})
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


