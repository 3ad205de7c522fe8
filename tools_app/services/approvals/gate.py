"""The approval step of the pipeline: allow, deny, or pending (a durable request or a held file change). A resumed
call (`ToolCall.grant`) redeems a person's decision here, exactly once, after every other check passed again."""
from __future__ import annotations

import logging


from tools_app.calls import ApprovalVerdict, ToolCall
from tools_app.base import Tool, ToolContext
from tools_app.labels import labels_of
from tools_app.services.approvals.changes import pending_change_create
from tools_app.services.approvals.decision import Decision, approval_resolve, arguments_hash
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
                                      call_context=call_context_of(call))
    return ApprovalVerdict(
        "pending",
        f"{decision.reason}: waiting for a person to approve this {tool.name} call until "
        f"{request.expires_at.isoformat()}. Poll GET /api/v1/approvals/{request.id}?wait=30 and, once approved, "
        f"run it with POST /api/v1/approvals/{request.id}/execute.",
        {"approval_id": str(request.id), "expires_at": request.expires_at.isoformat()},
    )
