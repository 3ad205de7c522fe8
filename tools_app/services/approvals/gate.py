"""The approval step of the pipeline: allow, deny, or pending (a durable request or a held file change). A resumed
call (`ToolCall.grant`) redeems a person's decision here, exactly once, after every other check passed again."""
from __future__ import annotations

import logging

from django.db.models import Q
from django.utils import timezone

from tools_app.calls import ApprovalVerdict, ToolCall
from tools_app.base import Tool, ToolContext
from tools_app.choices import AgentMode, PermissionScope
from tools_app.labels import labels_of
from tools_app.models import ApprovalRule, ToolPermission
from tools_app.registry import registry
from tools_app.security.shell_check import check_command
from tools_app.services.approvals.changes import pending_change_create
from tools_app.services.approvals.decision import Decision, allowlist_covers, approval_resolve, arguments_hash
from tools_app.services.approvals.identity import call_context_of
from tools_app.services.approvals.requests import approval_request_create
from tools_app.services.approvals.rules import approval_rule_match

logger = logging.getLogger("goclaw.approvals")


def approval_gate(ctx: ToolContext, tool: Tool, args: dict, call: ToolCall) -> ApprovalVerdict:
    """allow, deny, or pending (a durable ApprovalRequest or a held PendingChange). Any error refuses the call (fail
    closed). A resumed call carries the person's decision (`call.grant`): it stands in for `ask` and `hold`, never for
    a `deny` some source gives now, and it is redeemed (hash checked, claimed once) only here."""
    try:
        labels = labels_of(ctx)  # approvals store and compare the scrubbed labels of caller-chosen ids
        decision = approval_resolve(agent=call.agent, tool=tool, args=args, config=ctx.settings, tools=ctx.tools,
                                    user_id=labels.user_id, session_key=labels.session_key, workspace=_root(ctx))
    except Exception:
        logger.exception("approval check failed for %s:%s; refusing the call", ctx.agent_key, tool.name)
        return ApprovalVerdict("deny", "the approval check failed; the call was refused")
    if decision.action == "deny":
        return ApprovalVerdict("deny", decision.reason)
    if call.grant is not None:
        call.grant.redeem(arguments_hash(tool.name, args))  # raises (conflict) when it does not match or is used
        return ApprovalVerdict("allow")
    if decision.action == "allow":
        return ApprovalVerdict("allow")
    try:
        return _ask(ctx, tool, args, call, decision)
    except Exception:
        logger.exception("approval gate failed for %s:%s; refusing the call", ctx.agent_key, tool.name)
        return ApprovalVerdict("deny", "the approval check failed; the call was refused")


def _root(ctx: ToolContext):
    return ctx.workspace.root if ctx.workspace is not None else None


def _ask(ctx: ToolContext, tool: Tool, args: dict, call: ToolCall, decision: Decision) -> ApprovalVerdict:
    """A person must decide: hold the change, or let a matching allow-always rule answer, or ask."""
    if decision.action == "hold":
        change = pending_change_create(agent=call.agent, tool=tool, args=args, ctx=ctx, call_context=call_context_of(call))
        return ApprovalVerdict("pending", f"{decision.reason}. Change {change.id} to {change.path} is waiting for a "
                                          "person to accept it; it has not been applied yet.",
                               {"pending_change_id": str(change.id)})
    if not tool.always_require_approval:
        rule = approval_rule_match(agent=call.agent, tool=tool, args=args, user_id=labels_of(ctx).user_id,
                                   workspace=_root(ctx))
        if rule is not None:
            return ApprovalVerdict("allow")
    request = approval_request_create(agent=call.agent, tool=tool, args=args, ctx=ctx, reason=decision.reason,
                                      call_context=call_context_of(call), why=_why(ctx, tool, args, call, decision))
    return ApprovalVerdict(
        "pending",
        f"{decision.reason}: waiting for a person to approve this {tool.name} call until "
        f"{request.expires_at.isoformat()}. Poll GET /api/v1/approvals/{request.id}?wait=30 and, once approved, "
        f"run it with POST /api/v1/approvals/{request.id}/execute.",
        {"approval_id": str(request.id), "expires_at": request.expires_at.isoformat()},
    )


def _why(ctx: ToolContext, tool: Tool, args: dict, call: ToolCall, decision: Decision) -> dict:
    """Why a person is asked, as data and as lines for people: the deciding reason, then the facts behind it (mode,
    ask permissions and their scope, the exec settings, the tool's own flag, shell-check observations, rules)."""
    try:
        return _why_facts(ctx, tool, args, call, decision)
    except Exception:  # the explanation informs; it never stops the request
        logger.exception("could not explain the approval of %s:%s", ctx.agent_key, tool.name)
        return {"reason": decision.reason, "lines": [decision.reason] if decision.reason else []}


def _why_facts(ctx: ToolContext, tool: Tool, args: dict, call: ToolCall, decision: Decision) -> dict:
    agent, config = call.agent, ctx.settings or {}
    why: dict = {"reason": decision.reason, "mode": agent.mode}
    lines = [f"Asked because {decision.reason}." if decision.reason else "Asked."]
    if agent.mode != AgentMode.AUTONOMOUS:
        lines.append(f"Agent mode: {AgentMode(agent.mode).label}.")
    tools = ctx.tools if ctx.tools is not None else registry
    asking = [{"scope": scope, "tool": name, "mode": mode}
              for scope, name, mode in ToolPermission.objects.filter(
                  Q(scope=PermissionScope.GLOBAL) | Q(scope=PermissionScope.AGENT, agent=agent)
                  | Q(scope=PermissionScope.MODE, mode=agent.mode), permission="ask")
              .values_list("scope", "tool", "mode").order_by("scope", "tool")
              if tool.name in tools.expand([name])]
    if asking:
        why["permissions"] = asking
        lines.append("Tool permission set to ask: " + ", ".join(
            f"{p['tool']} ({p['scope']}{' ' + p['mode'] if p['mode'] else ''})" for p in asking) + ".")
    if tool.always_require_approval:
        why["always_require_approval"] = True
        lines.append(f"{tool.name} requires a person's approval for every call.")
    command = tool.command_for(args)
    if command is not None:
        allowlist = config.get("exec_allowlist") or []
        covered = bool(allowlist) and allowlist_covers(allowlist, command, workspace=_root(ctx),
                                                       working_dir=args.get("working_dir"))
        why["exec"] = {"security": config.get("exec_security", "full"), "ask": config.get("exec_ask", "off"),
                       "allowlist": "covered" if covered else ("not covered" if allowlist else "none")}
        lines.append("Exec settings: security={security}, ask={ask}, allowlist {allowlist}.".format(**why["exec"]))
        verdict = check_command(command, disabled_groups=frozenset(config.get("shell_disabled_rule_groups", ()) or ()))
        if verdict.observe:
            why["observations"] = list(verdict.reasons)[:10]
            lines.append("Shell check observed: " + "; ".join(why["observations"]) + ".")
    if not tool.always_require_approval:
        now = timezone.now()
        rules = (ApprovalRule.objects.filter(agent=agent, tool_name=tool.name, revoked_at__isnull=True)
                 .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now)).count())
        why["rules"] = rules
        lines.append(f"No allow-always rule covers this call ({rules} active for {tool.name})." if rules
                     else f"No allow-always rule exists for {tool.name} on this agent.")
    why["lines"] = lines
    return why
