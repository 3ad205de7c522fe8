"""Human approvals (docs/approvals.md): resolve each call to allow / ask / deny / hold, durable requests bound to
the exact call, decisions (exactly one wins), expiry, running an approved call exactly once, "allow always" rules
and review-mode pending changes. Every failure path refuses: nothing runs that a person did not approve."""
from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import re
import shlex
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Callable

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from goclaw import events
from goclaw.db import pg_json, pg_text
from goclaw.errors import Conflict, Gone, NotFound, ValidationError
from tools_app.base import Tool, ToolContext
from tools_app.choices import AgentMode, ApprovalDecision, ApprovalStatus, PendingChangeStatus, PermissionScope, RuleMatch
from tools_app.models import Agent, ApprovalRequest, ApprovalRule, PendingChange, ToolPermission

logger = logging.getLogger("goclaw.approvals")

MAX_WAIT_SECONDS = 60
POLL_SECONDS = 0.25
HELD_TOOLS = frozenset({"write_file", "edit"})  # review/audit modes hold these as pending changes
PLAN_TOOL = "submit_plan"
_RANK = {"allow": 0, "ask": 1, "deny": 2}
# A widened (prefix/glob) exec rule only matches a plain command: one simple command, no chaining, pipes,
# redirection, substitution or variables. Anything else is asked again.
_SHELL_META = re.compile(r"[;&|<>`$\n\r\\(){}]")


# --- canonical form ---------------------------------------------------------------------------------
def canonical_arguments(args: Any) -> str:
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def arguments_hash(tool_name: str, args: Any) -> str:
    """Binds an approval to the exact call: sha256 of the tool name and the canonical arguments."""
    return hashlib.sha256(f"{tool_name}\n{canonical_arguments(args)}".encode()).hexdigest()


def normalize_command(command: str) -> str:
    return command.strip()


def _simple_commands(command: str) -> list[list[str]]:
    from tools_app.security.shell_check import extract_simple_commands

    return extract_simple_commands(command)


def _command_of(tool: Tool, args: dict) -> str | None:
    value = args.get(tool.command_argument) if tool.command_argument else None
    return value if isinstance(value, str) else None


# --- summary ----------------------------------------------------------------------------------------
def approval_summary(tool: Tool, args: dict, workspace=None) -> tuple[str, dict]:
    """What will run and where, for the person deciding: exec shows the command, the directory and every
    simple command the shell would run (wrappers and `sh -c` unwrapped)."""
    from tools_app.security.scrub import default_scrubber

    command = _command_of(tool, args)
    if command is not None:
        where = args.get("working_dir") or "."
        if workspace is not None:
            where = str(workspace / where) if where != "." else str(workspace)
        runs = [shlex.join(argv) for argv in _simple_commands(command)]
        summary = f"{tool.name} in {where}:\n$ {command}\nruns: " + ("; ".join(runs) or "(nothing parseable)")
        details = {"command": command, "working_dir": where, "simple_commands": runs}
    elif isinstance(args.get("path"), str):
        path = args["path"]
        if tool.name == "write_file":
            summary = f"{'append to' if args.get('append') else 'write'} {path}: {len(args.get('content') or '')} characters"
        elif tool.name == "edit":
            summary = (f"edit {path}: replace {len(args.get('old_string') or '')} characters with "
                       f"{len(args.get('new_string') or '')}{' (every occurrence)' if args.get('replace_all') else ''}")
        else:
            summary = f"{tool.name} {path}"
        details = {"path": path}
    else:
        parts = [f"{k}={json.dumps(v, ensure_ascii=False)[:120]}" for k, v in sorted(args.items())]
        summary = f"{tool.name}({', '.join(parts)})"
        details = {}
    summary, _ = default_scrubber.scrub(summary[:4000])
    details, _ = default_scrubber.scrub_data(details)
    return summary, details


# --- deciding allow / ask / deny / hold ---------------------------------------------------------------
@dataclass(frozen=True)
class Decision:
    action: str  # allow | ask | deny | hold
    reason: str = ""


def permission_for(agent: Agent, tool_name: str) -> str | None:
    """The ToolPermission verdict for this tool: a deny in any scope wins, else the most specific scope
    (agent > mode > global) that names the tool or one of its groups; None when nothing names it."""
    from tools_app.policy import cached
    from tools_app.registry import registry

    rows = cached(("permissions", agent.pk, agent.mode, registry.version), lambda: list(ToolPermission.objects.filter(
        Q(scope=PermissionScope.GLOBAL) | Q(scope=PermissionScope.AGENT, agent=agent) | Q(scope=PermissionScope.MODE, mode=agent.mode)
    ).values_list("scope", "tool", "permission")))
    matching = [(scope, perm) for scope, name, perm in rows if tool_name in registry.expand([name])]
    if any(perm == "deny" for _, perm in matching):
        return "deny"
    for scope in (PermissionScope.AGENT, PermissionScope.MODE, PermissionScope.GLOBAL):
        perms = [perm for s, perm in matching if s == scope]
        if perms:
            return max(perms, key=_RANK.__getitem__)
    return None


def allowlist_covers(patterns: list[str], command: str) -> bool:
    """True when every simple command the shell would run matches an allowlist glob (so `allowed && other`
    does not pass), no program name is computed at run time, and nothing is redirected to a file."""
    if not patterns or ">" in command:
        return False
    commands = _simple_commands(command)
    if not commands:
        return False
    for argv in commands:
        if "$(?)" in argv[0] or "${?}" in argv[0]:
            return False
        text = " ".join(argv)
        if not any(fnmatch.fnmatchcase(text, p.strip()) for p in patterns):
            return False
    return True


def exec_matrix(config: dict, command: str) -> Decision:
    """GoClaw's security (deny|allowlist|full) × ask (off|on-miss|always) matrix, without its safe-bins."""
    security, ask = config.get("exec_security", "full"), config.get("exec_ask", "off")
    if security == "deny":
        return Decision("deny", "exec is disabled for this agent (exec_security=deny)")
    if ask == "always":
        return Decision("ask", "every command needs approval (exec_ask=always)")
    hit = allowlist_covers(config.get("exec_allowlist") or [], command)
    if hit:
        return Decision("allow")
    if security == "allowlist":
        if ask == "on-miss":
            return Decision("ask", "the command is not covered by the exec allowlist")
        return Decision("deny", "the command is not covered by this agent's exec allowlist")
    if ask == "on-miss":
        return Decision("ask", "the command is not covered by the exec allowlist (exec_ask=on-miss)")
    return Decision("allow")


def plan_approved(agent: Agent, user_id: str, session_key: str) -> bool:
    return ApprovalRequest.objects.filter(
        agent=agent, user_id=user_id, session_key=session_key, tool_name=PLAN_TOOL,
        decision__in=[ApprovalDecision.ALLOW_ONCE, ApprovalDecision.ALLOW_ALWAYS],
    ).exists()


def approval_resolve(*, agent: Agent, tool: Tool, args: dict, config: dict, user_id: str = "", session_key: str = "") -> Decision:
    """allow / ask / deny / hold for one call. A deny from any source wins; structural mode rules (plan,
    audit, review holds) are not relaxed by an `allow` permission; an explicit permission replaces the mode's
    default; always_require_approval and the exec matrix can only make it stricter."""
    permission = permission_for(agent, tool.name)
    if permission == "deny":
        return Decision("deny", f"tool {tool.name} is denied by a tool permission")
    mode = agent.mode
    if mode == AgentMode.PLAN and tool.mutating and not plan_approved(agent, user_id, session_key):
        return Decision("deny", f"agent {agent.key} is in plan mode: call {PLAN_TOOL} with your plan and wait for a "
                                f"person to approve it before using {tool.name} in this session")
    if mode == AgentMode.AUDIT and tool.mutating and tool.name not in HELD_TOOLS:
        return Decision("deny", f"agent {agent.key} is in audit mode: only file changes (held for review) are possible")
    command = _command_of(tool, args)
    matrix = exec_matrix(config, command) if command is not None else Decision("allow")
    if matrix.action == "deny":
        return matrix
    if mode in (AgentMode.REVIEW, AgentMode.AUDIT) and tool.name in HELD_TOOLS:
        return Decision("hold", f"agent {agent.key} is in {mode} mode: file changes are held for a person's review")

    if permission is not None:
        decision = Decision(permission, f"tool {tool.name} is set to ask by a tool permission" if permission == "ask" else "")
    elif mode == AgentMode.MANUAL or (mode in (AgentMode.CAUTIOUS, AgentMode.REVIEW) and tool.mutating):
        decision = Decision("ask", f"agent {agent.key} is in {mode} mode")
    else:
        decision = Decision("allow")
    if tool.always_require_approval and decision.action == "allow":
        decision = Decision("ask", f"tool {tool.name} requires a person's approval for every call")
    if matrix.action == "ask" and decision.action == "allow":
        decision = matrix
    return decision


# --- the gate ---------------------------------------------------------------------------------------
def approval_gate(ctx: ToolContext, tool: Tool, args: dict, call) -> Any:
    """pipeline.approval_gate: allow, deny, or pending (a durable ApprovalRequest or a held PendingChange).
    Any error refuses the call (fail closed)."""
    from tools_app.pipeline import ApprovalVerdict

    try:
        decision = approval_resolve(agent=call.agent, tool=tool, args=args, config=ctx.settings,
                                    user_id=ctx.user_id, session_key=ctx.session_key)
        if decision.action == "allow":
            return ApprovalVerdict("allow")
        if decision.action == "deny":
            return ApprovalVerdict("deny", decision.reason)
        if decision.action == "hold":
            change = pending_change_create(agent=call.agent, tool=tool, args=args, ctx=ctx, call_context=call_context_of(call))
            return ApprovalVerdict("pending", f"{decision.reason}. Change {change.id} to {change.path} is waiting for a "
                                              "person to accept it; it has not been applied yet.",
                                   {"pending_change_id": str(change.id)})
        if not tool.always_require_approval:
            rule = approval_rule_match(agent=call.agent, tool=tool, args=args, user_id=ctx.user_id)
            if rule is not None:
                return ApprovalVerdict("allow")
        request = approval_request_create(agent=call.agent, tool=tool, args=args, ctx=ctx, reason=decision.reason,
                                          call_context=call_context_of(call))
        return ApprovalVerdict(
            "pending",
            f"{decision.reason}: waiting for a person to approve this {tool.name} call until "
            f"{request.expires_at.isoformat()}. Poll GET /api/v1/approvals/{request.id}?wait=30 and, once approved, "
            f"run it with POST /api/v1/approvals/{request.id}/execute.",
            {"approval_id": str(request.id), "expires_at": request.expires_at.isoformat()},
        )
    except Exception:
        logger.exception("approval gate failed for %s:%s; refusing the call", ctx.agent_key, tool.name)
        return ApprovalVerdict("deny", "the approval check failed; the call was refused")


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
    from tools_app.security.scrub import default_scrubber

    safe_args, _ = default_scrubber.scrub_data(args)
    summary, details = approval_summary(tool, args, ctx.workspace)
    if tool.always_require_approval:
        details["always_require_approval"] = True  # no allow-always rule for it
    now = timezone.now()
    req = ApprovalRequest.objects.create(
        agent=agent, user_id=pg_text(ctx.user_id[:255]), session_key=pg_text(ctx.session_key[:255]), channel=pg_text(ctx.channel[:64]),
        call_context=pg_json(call_context or {}), tool_name=tool.name, arguments=pg_json(safe_args), args_hash=arguments_hash(tool.name, args), summary=pg_text(summary),
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
                req.rule = _rule_create(req, actor=actor, match=rule_match, pattern=rule_pattern,
                                        user_only=rule_user_only, expires_at=rule_expires_at)
            approved = decision != ApprovalDecision.DENY
            req.status = ApprovalStatus.APPROVED if approved else ApprovalStatus.DENIED
            req.decision, req.decided_at, req.note = decision, now, note[:500]
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


# --- running an approved call -------------------------------------------------------------------------
def _refused(status: str, message: str, observations: list[str] | None = None):
    from tools_app.pipeline import Outcome

    return Outcome(status=status, for_llm=message, is_error=True, observations=observations or [])


def _vet(call, reg) -> tuple[Tool | None, ToolContext, dict, list[str], Any]:
    """Steps 1-3 again before a held or approved call runs: the tool must still be available, the arguments
    valid, the pre-hooks (shell safety check, access control) must pass and no source may now deny it."""
    from tools_app import pipeline
    from tools_app.choices import InvocationStatus as S
    from tools_app.hooks import hooks

    ctx = pipeline.build_context(call, reg)
    tool = pipeline.resolve_tool(call.tool, ctx, reg)
    if tool is None:
        return None, ctx, call.arguments, [], _refused(S.DENIED, f"tool {call.tool} is no longer available to this agent")
    problems = pipeline.validate_arguments(tool, call.arguments)
    if problems:
        return tool, ctx, call.arguments, [], _refused(S.INVALID, f"invalid arguments for {tool.name}: " + "; ".join(problems))
    pre = hooks.run_pre(ctx, tool, call.arguments)
    if pre.blocked:
        return tool, ctx, call.arguments, pre.observations, _refused(S.DENIED, pre.blocked, pre.observations)
    decision = approval_resolve(agent=call.agent, tool=tool, args=pre.args, config=ctx.settings,
                                user_id=ctx.user_id, session_key=ctx.session_key)
    if decision.action == "deny":
        return tool, ctx, pre.args, pre.observations, _refused(S.DENIED, decision.reason, pre.observations)
    return tool, ctx, pre.args, pre.observations, None


def _run_vetted(call, reg, *, expected_hash: str, claim: Callable[[], None], on_mismatch: Callable[[], None]):
    """Vet, check the hash, claim (exactly once), then run steps 6-9 with the pipeline's own functions and
    write the audit row. Refusals are recorded and returned as outcomes; nothing is claimed for them."""
    from tools_app import pipeline

    started = time.perf_counter()
    tool, ctx, args, observations, refusal = _vet(call, reg)
    if refusal is None and arguments_hash(tool.name, args) != expected_hash:
        on_mismatch()
    if refusal is not None:
        outcome, name, error = refusal, getattr(tool, "name", call.tool), refusal.for_llm
    else:
        claim()
        outcome, name, args, error = pipeline.run_approved(ctx, tool, args, observations)
    outcome.duration_ms = (time.perf_counter() - started) * 1000
    pipeline.record(ctx, call, name, args, outcome, error)
    return outcome


def call_context_of(call) -> dict:
    """What else decided the original call's catalog, so a resumed call is vetted in the same context."""
    return {"provider": call.provider, "chat_id": call.chat_id, "peer_kind": call.peer_kind,
            "subagent_depth": call.subagent_depth, "request_allow": call.request_allow}


def _call_for(row, arguments: dict):
    from tools_app.pipeline import ToolCall

    context = row.call_context or {}
    return ToolCall(agent=row.agent, tool=row.tool_name, arguments=arguments, user_id=row.user_id,
                    session_key=row.session_key, channel=row.channel, provider=context.get("provider", ""),
                    chat_id=context.get("chat_id", ""), peer_kind=context.get("peer_kind", ""),
                    subagent_depth=context.get("subagent_depth", 0), request_allow=context.get("request_allow"))


def approval_execute(*, approval_id, agent: Agent | None, arguments: dict | None = None, reg=None):
    """Run an approved call exactly once (orchestrator: short atomic statements; the tool runs outside any
    transaction). Refuses unless the request is this agent's, approved, unused and within its deadline, and the
    arguments hash to the approved ones; the atomic approved→consumed UPDATE makes a replay a Conflict."""
    from tools_app.registry import registry

    qs = ApprovalRequest.objects.select_related("agent").filter(pk=approval_id)
    req = (qs.filter(agent=agent) if agent is not None else qs).first()
    if req is None:
        raise NotFound("no such approval request", code="approval_not_found")
    if req.status in (ApprovalStatus.PENDING, ApprovalStatus.APPROVED) and req.consumed_at is None and req.is_overdue:
        approval_expire_if_overdue(approval_id=req.pk)
        req.status = ApprovalStatus.EXPIRED
    if req.status == ApprovalStatus.EXPIRED:
        raise Gone("this approval expired; the call was denied", code="approval_expired")
    if req.status != ApprovalStatus.APPROVED:
        raise Conflict(f"this request is {req.status}, not approved", code="approval_not_approved", details={"status": req.status})
    if req.consumed_at is not None:
        raise Conflict("this approval was already used; ask again to run the call again", code="approval_already_used")

    def mismatch() -> None:
        logger.warning("approval %s: arguments do not match the approved call; refused", req.pk)
        if arguments is None:  # the stored copy is scrubbed: the agent must resend the exact arguments
            raise ValidationError("resend the exact arguments of the approved call", code="arguments_required")
        raise Conflict("these arguments are not the approved ones; the call was refused", code="arguments_mismatch")

    def claim() -> None:
        now = timezone.now()
        if not ApprovalRequest.objects.filter(pk=req.pk, status=ApprovalStatus.APPROVED, consumed_at__isnull=True,
                                              expires_at__gt=now).update(consumed_at=now):
            raise Conflict("this approval was already used or has expired", code="approval_already_used")

    outcome = _run_vetted(_call_for(req, req.arguments if arguments is None else arguments), reg or registry,
                          expected_hash=req.args_hash, claim=claim, on_mismatch=mismatch)
    if outcome.invocation_id and outcome.status != "denied":
        ApprovalRequest.objects.filter(pk=req.pk).update(invocation_id=outcome.invocation_id)
    outcome.extra = {**outcome.extra, "approval_id": str(req.pk)}
    return outcome


def tool_execute_waiting(call, wait_seconds: float = 0, reg=None):
    """pipeline.execute, then (when it asked a person and wait_seconds > 0) wait for the decision: approved →
    run it through approval_execute and return the normal result; denied or expired → a `denied` outcome;
    still pending → the pending outcome (HTTP 202)."""
    from tools_app import pipeline
    from tools_app.registry import registry

    outcome = pipeline.execute(call, reg or registry)
    approval_id = outcome.extra.get("approval_id")
    if outcome.status != "pending_approval" or not approval_id or wait_seconds <= 0:
        return outcome
    req = approval_wait(approval_id=approval_id, seconds=wait_seconds)
    if req.status == ApprovalStatus.APPROVED:
        return approval_execute(approval_id=req.pk, agent=call.agent, arguments=call.arguments, reg=reg)
    if req.status == ApprovalStatus.PENDING:
        return outcome
    outcome.status, outcome.is_error = "denied", True
    outcome.for_llm = {"denied": "a person denied this call", "expired": "nobody approved this call in time; it was denied",
                       "cancelled": "the approval request was cancelled"}.get(req.status, f"approval {req.status}")
    outcome.extra = {"approval_id": str(req.pk), "approval_status": req.status}
    return outcome


# --- allow-always rules -----------------------------------------------------------------------------
def _literal_words(pattern: str) -> int:
    """How many whole words precede the first wildcard: a widened rule must fix more than the program name."""
    literal = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
    words = literal.split()
    if literal and not literal[-1].isspace() and words and literal != pattern:
        words = words[:-1]  # the last word is cut by the wildcard
    return len(words)


def _plain_command(command: str) -> bool:
    return not _SHELL_META.search(command) and len(_simple_commands(command)) == 1


def _rule_create(req: ApprovalRequest, *, actor, match: str, pattern: Any, user_only: bool,
                 expires_at: datetime | None) -> ApprovalRule:
    if req.details.get("always_require_approval"):
        raise ValidationError(f"{req.tool_name} needs a person's approval for every call: allow always is not possible",
                              code="rule_not_allowed")
    match = match or RuleMatch.EXACT
    if match not in RuleMatch.values:
        raise ValidationError(f"rule match must be one of {', '.join(RuleMatch.values)}", code="invalid_rule")
    command = req.details.get("command")
    args_hash = ""
    if command is not None:
        command = normalize_command(command)
        if match == RuleMatch.EXACT:
            if pattern not in (None, "", command):
                raise ValidationError("an exact rule covers the approved command as it is", code="invalid_rule")
            pattern = command
        else:
            if not isinstance(pattern, str) or not pattern.strip():
                raise ValidationError(f"a {match} rule needs a pattern", code="invalid_rule")
            covers = command.startswith(pattern) if match == RuleMatch.PREFIX else fnmatch.fnmatchcase(command, pattern)
            if not covers or not _plain_command(command):
                raise ValidationError("the pattern must cover the approved command, which must be one plain command",
                                      code="invalid_rule")
            fixed = len(pattern.split()) - (0 if pattern.endswith(" ") else 1) if match == RuleMatch.PREFIX else _literal_words(pattern)
            if fixed < 2:
                raise ValidationError("a widened rule must fix more than the program name (e.g. 'git push origin ')",
                                      code="invalid_rule")
    elif match == RuleMatch.EXACT:
        pattern, args_hash = canonical_arguments(req.arguments), req.args_hash
    elif match == RuleMatch.GLOB:
        try:
            globs = json.loads(pattern) if isinstance(pattern, str) else pattern
        except ValueError:
            raise ValidationError("a glob rule pattern must be a JSON object", code="invalid_rule") from None
        if not isinstance(globs, dict) or not _args_match(globs, req.arguments):
            raise ValidationError("a glob rule is a JSON object of the call's arguments (string values may be globs) "
                                  "that matches the approved call", code="invalid_rule")
        pattern = canonical_arguments(globs)
    else:
        raise ValidationError("prefix rules are for commands only", code="invalid_rule")
    return ApprovalRule.objects.create(
        agent=req.agent, user_id=req.user_id if user_only else "", tool_name=req.tool_name, match=match, pattern=pattern,
        args_hash=args_hash, expires_at=expires_at, created_by=actor if getattr(actor, "pk", None) else None, created_from=req,
    )


def _args_match(globs: dict, args: dict) -> bool:
    """Same argument names; string values match by glob, other values must be equal."""
    if set(globs) != set(args):
        return False
    for name, expected in globs.items():
        value = args[name]
        if isinstance(expected, str) and isinstance(value, str):
            if not fnmatch.fnmatchcase(value, expected):
                return False
        elif expected != value:
            return False
    return True


def _rule_matches(rule: ApprovalRule, tool: Tool, args: dict) -> bool:
    command = _command_of(tool, args)
    if command is not None:
        command = normalize_command(command)
        if rule.match == RuleMatch.EXACT:
            return command == rule.pattern
        if not _plain_command(command):
            return False
        if rule.match == RuleMatch.PREFIX:
            return command.startswith(rule.pattern)
        return fnmatch.fnmatchcase(command, rule.pattern)
    if rule.match == RuleMatch.EXACT:
        return bool(rule.args_hash) and rule.args_hash == arguments_hash(tool.name, args)
    if rule.match == RuleMatch.GLOB:
        try:
            return _args_match(json.loads(rule.pattern), args)
        except (ValueError, TypeError):
            return False
    return False


def approval_rule_match(*, agent: Agent, tool: Tool, args: dict, user_id: str) -> ApprovalRule | None:
    """The first active rule of this agent (and user) that covers this call; its use is counted atomically."""
    now = timezone.now()
    rules = (ApprovalRule.objects.filter(agent=agent, tool_name=tool.name, revoked_at__isnull=True)
             .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now)).filter(Q(user_id="") | Q(user_id=user_id))
             .order_by("created_at"))
    for rule in rules:
        if _rule_matches(rule, tool, args):
            ApprovalRule.objects.filter(pk=rule.pk).update(use_count=F("use_count") + 1, last_used_at=now)
            return rule
    return None


@transaction.atomic
def approval_rule_revoke(*, rule: ApprovalRule, actor) -> ApprovalRule:
    ApprovalRule.objects.filter(pk=rule.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now(), revoked_by=actor if getattr(actor, "pk", None) else None)
    rule.refresh_from_db()
    return rule


# --- review / audit: held file changes ---------------------------------------------------------------
def _change_payload(change: PendingChange) -> dict:
    return {"id": str(change.id), "agent": change.agent.key, "tool": change.tool_name, "path": change.path,
            "summary": change.summary, "status": change.status, "session_key": change.session_key}


@transaction.atomic
def pending_change_create(*, agent: Agent, tool: Tool, args: dict, ctx: ToolContext, call_context: dict | None = None) -> PendingChange:
    """Hold a write_file/edit call; the exact arguments are kept to apply it on accept."""
    summary, _ = approval_summary(tool, args, ctx.workspace)
    change = PendingChange.objects.create(
        agent=agent, user_id=ctx.user_id[:255], session_key=ctx.session_key[:255], channel=ctx.channel[:64],
        call_context=pg_json(call_context or {}), tool_name=tool.name, path=str(args.get("path", ""))[:4096], arguments=args,
        args_hash=arguments_hash(tool.name, args), summary=summary,
    )
    events.publish("pending_change.created", _change_payload(change), ["approvals", events.agent_group(agent.key)])
    return change


def pending_change_decide(*, change_id, accept: bool, actor, reg=None) -> PendingChange:
    """Accept (apply the held call now, through the pipeline's own steps) or reject one pending change.
    Orchestrator: the pending→accepted/rejected UPDATE claims it exactly once, then the write runs outside any
    transaction; a refusal or tool error leaves it `failed` with the message."""
    from tools_app.registry import registry

    now = timezone.now()
    status = PendingChangeStatus.ACCEPTED if accept else PendingChangeStatus.REJECTED
    claimed = PendingChange.objects.filter(pk=change_id, status=PendingChangeStatus.PENDING).update(
        status=status, decided_at=now, decided_by=actor if getattr(actor, "pk", None) else None)
    change = PendingChange.objects.select_related("agent").filter(pk=change_id).first()
    if change is None:
        raise NotFound("no such pending change", code="pending_change_not_found")
    if not claimed:
        raise Conflict(f"this change is already {change.status}", code="pending_change_already_decided",
                       details={"status": change.status})
    if accept:
        def mismatch() -> None:
            raise Conflict("the held change no longer matches what was recorded", code="arguments_mismatch")

        try:
            outcome = _run_vetted(_call_for(change, change.arguments), reg or registry, expected_hash=change.args_hash,
                                  claim=lambda: None, on_mismatch=mismatch)
            change.result, change.invocation_id = outcome.for_llm[:10000], outcome.invocation_id or None
            change.status = PendingChangeStatus.FAILED if outcome.is_error else PendingChangeStatus.ACCEPTED
        except Conflict as exc:
            change.result, change.status = exc.message, PendingChangeStatus.FAILED
        PendingChange.objects.filter(pk=change.pk).update(status=change.status, result=change.result,
                                                          invocation_id=change.invocation_id)
    with transaction.atomic():
        events.publish("pending_change.resolved", _change_payload(change), ["approvals", events.agent_group(change.agent.key)])
    return change


def pending_change_decide_batch(*, agent: Agent, session_key: str, accept: bool, actor, reg=None) -> list[PendingChange]:
    """Accept or reject every pending change of one agent session, oldest first (already decided ones are skipped)."""
    ids = list(PendingChange.objects.filter(agent=agent, session_key=session_key, status=PendingChangeStatus.PENDING)
               .order_by("created_at").values_list("pk", flat=True))
    done = []
    for change_id in ids:
        try:
            done.append(pending_change_decide(change_id=change_id, accept=accept, actor=actor, reg=reg))
        except Conflict:
            continue
    return done
