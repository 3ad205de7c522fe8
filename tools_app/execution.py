"""Running tool calls: the public service behind the API, the admin, the MCP endpoint and jobs. Every path here goes
through `tools_app.pipeline.execute` (the one orchestrator): a first run, a run that waits for a person, an approved
call run exactly once, an accepted file change applied. Orchestrators: short atomic statements, the tool itself
runs outside any transaction."""
from __future__ import annotations

import logging

from django.utils import timezone

from goclaw import crypto
from goclaw.errors import Conflict, Gone, NotFound, ValidationError
from tools_app import pipeline
from tools_app.calls import Grant, Outcome, ToolCall
from tools_app.choices import ApprovalStatus, PendingChangeStatus
from tools_app.models import Agent, ApprovalRequest, PendingChange
from tools_app.registry import ToolRegistry
from tools_app.services.approvals.changes import (
    pending_change_claim, pending_change_finish, pending_change_ids_for_session, pending_change_open,
    pending_change_publish_resolved,
)
from tools_app.services.approvals.identity import held_call
from tools_app.services.approvals.requests import approval_expire_if_overdue, approval_wait

logger = logging.getLogger("goclaw.execution")

_WAIT_ENDED = {"denied": "a person denied this call", "expired": "nobody approved this call in time; it was denied",
               "cancelled": "the approval request was cancelled"}


def tool_execute(call: ToolCall, wait_seconds: float = 0, tools: ToolRegistry | None = None) -> Outcome:
    """Run one call. When a person must approve it and `wait_seconds` > 0, wait for the decision: approved → run it
    (`approval_execute`) and return the normal result; denied or expired → a `denied` outcome; still pending →
    the pending outcome (HTTP 202)."""
    outcome = pipeline.execute(call, tools)
    approval_id = outcome.extra.get("approval_id")
    if outcome.status != "pending_approval" or not approval_id or wait_seconds <= 0:
        return outcome
    req = approval_wait(approval_id=approval_id, seconds=wait_seconds)
    if req.status == ApprovalStatus.APPROVED:
        return approval_execute(approval_id=req.pk, agent=call.agent, arguments=call.arguments, tools=tools)
    if req.status == ApprovalStatus.PENDING:
        return outcome
    return approval_refused_outcome(req, outcome)


def approval_refused_outcome(req: ApprovalRequest, outcome: Outcome | None = None) -> Outcome:
    """What the model is told when the person's wait ended without an approval (denied, expired, cancelled): the
    pending `outcome` (its audit row kept) turned into a denial, or a new one."""
    outcome = outcome or Outcome(status="denied", for_llm="")
    outcome.status, outcome.is_error = "denied", True
    outcome.for_llm = _WAIT_ENDED.get(req.status, f"approval {req.status}")
    outcome.extra = {"approval_id": str(req.pk), "approval_status": req.status}
    return outcome


def approval_execute(*, approval_id, agent: Agent | None, arguments: dict | None = None,
                     tools: ToolRegistry | None = None) -> Outcome:
    """Run an approved call exactly once. Refuses unless the request is this agent's, approved, unused and within
    its deadline; then the call runs through every pipeline step again (tool set, policy, hooks, rate limit and
    approval decision of now), and the approval step checks the arguments hash to the approved ones and claims the
    request (approved → consumed, atomically: a replay is a Conflict)."""
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

    grant = Grant(args_hash=req.args_hash, claim=claim, on_mismatch=mismatch)
    outcome = pipeline.execute(held_call(req, req.arguments if arguments is None else arguments, grant), tools)
    if outcome.invocation_id and outcome.status != "denied":
        ApprovalRequest.objects.filter(pk=req.pk).update(invocation_id=outcome.invocation_id)
    outcome.extra = {**outcome.extra, "approval_id": str(req.pk)}
    return outcome


def pending_change_decide(*, change_id, accept: bool, actor, tools: ToolRegistry | None = None) -> PendingChange:
    """Accept (apply the held call now, through every pipeline step again) or reject one pending change. The claim
    decides it exactly once; a refusal or tool error leaves it `failed` with the message. Once decided, the sealed
    arguments are erased: only the scrubbed copy and the audit row remain."""
    change = pending_change_claim(change_id=change_id, accept=accept, actor=actor)
    if accept:
        def mismatch() -> None:
            raise Conflict("the held change no longer matches what was recorded", code="arguments_mismatch")

        try:
            grant = Grant(args_hash=change.args_hash, claim=lambda: None, on_mismatch=mismatch)
            outcome = pipeline.execute(held_call(change, pending_change_open(change), grant), tools)
            status = PendingChangeStatus.FAILED if outcome.is_error else PendingChangeStatus.ACCEPTED
            pending_change_finish(change, status=status, result=outcome.for_llm, invocation_id=outcome.invocation_id or None)
        except Conflict as exc:
            pending_change_finish(change, status=PendingChangeStatus.FAILED, result=exc.message)
        except crypto.DecryptionError:
            logger.error("pending change %s: the sealed arguments do not open (key changed?); not applied", change.pk)
            pending_change_finish(change, status=PendingChangeStatus.FAILED,
                                  result="the held change could not be opened (the encryption key changed?); nothing was written")
    pending_change_publish_resolved(change)
    return change


def pending_change_decide_batch(*, agent: Agent, session_key: str, accept: bool, actor,
                                tools: ToolRegistry | None = None) -> list[PendingChange]:
    """Accept or reject every pending change of one agent session, oldest first (already decided ones are skipped)."""
    done = []
    for change_id in pending_change_ids_for_session(agent=agent, session_key=session_key):
        try:
            done.append(pending_change_decide(change_id=change_id, accept=accept, actor=actor, tools=tools))
        except Conflict:
            continue
    return done
