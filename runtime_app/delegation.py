"""Delegations to hosted agents (docs/runtime.md "Delegating to hosted agents"). teams_app announces a delegation
after it commits; when its target is hosted, a session of the target (origin delegation, ref `delegation:<id>`)
is created for the runners to run. When that session ends, the source agent's quality gates judge the result (a
failing one sends the target a revision prompt, in the same session), then the delegation is completed or failed
with it, and, when the source delegated from a hosted session without waiting (mode async), the outcome is announced
into that session, which runs again. Cancelling the delegation cancels the session."""
from __future__ import annotations

import logging
import threading

from django.db import transaction

from goclaw.errors import ApplicationError
from runtime_app import gates
from runtime_app.choices import ACTIVE_STATUSES, MessageRole, SessionOrigin, SessionStatus
from runtime_app.models import Session, SessionMessage
from runtime_app.runs import is_hosted
from runtime_app.services import sessions as svc
from teams_app.choices import DelegationStatus
from teams_app.models import Delegation
from teams_app.selectors_delegation import delegation_identifier
from teams_app.services.delegation import RESULT_MAX, delegation_awaited, delegation_complete, delegation_fail

logger = logging.getLogger("goclaw.runtime")

S = SessionStatus
EVENT = "delegation.completed"
NOTE_MAX_CHARS = 2000


def _delegation_of(session: Session) -> Delegation | None:
    number = session.ref[len(gates.REF_PREFIX):]
    if not session.ref.startswith(gates.REF_PREFIX) or not (number.isascii() and number.isdigit()) or len(number) > 18:
        return None
    return Delegation.objects.select_related("source", "target").filter(pk=int(number)).first()


def source_session(delegation: Delegation) -> Session | None:
    """The source's hosted session the delegation was made from (its call context's session key), if any."""
    if not delegation.session_key:
        return None
    return Session.objects.select_related("agent").filter(key=delegation.session_key,
                                                          agent_id=delegation.source_id).first()


# --- a delegation is requested: the target's session ----------------------------------------------------------------
def on_delegation_requested(delegation_id: int) -> None:
    """Start a session of a hosted target for a new delegation (runners run it; nothing runs in this thread). A
    delegation that became a board task, or one to an external agent, is left as it is."""
    delegation = Delegation.objects.select_related("source", "target").filter(pk=delegation_id).first()
    if delegation is None or delegation.status != DelegationStatus.RUNNING or delegation.task_id is not None:
        return
    if not is_hosted(delegation.target):
        return
    ref = gates.delegation_ref(delegation)
    if Session.objects.filter(agent=delegation.target, origin=SessionOrigin.DELEGATION, ref=ref).exists():
        return  # announced twice (nothing announces twice today; a retried announcement may)
    parent = source_session(delegation)
    ident, source = delegation_identifier(delegation), delegation.source.key
    try:
        with transaction.atomic():
            session = svc.session_create(
                agent=delegation.target, created_by=f"delegation:{source}", user_id=delegation.user_id,
                channel=parent.channel if parent else "", chat_id=parent.chat_id if parent else "",
                message=f"[Delegation {ident} from {source}]: {delegation.request}", parent=parent,
                origin=SessionOrigin.DELEGATION, ref=ref, label=f"{ident} from {source}",
                sync=delegation_awaited(delegation.pk))
            # Its outcome is told to the source's session by `_finish`, once the gates passed: never the raw result.
            Session.objects.filter(pk=session.pk).update(announced=True)
    except ApplicationError as exc:
        _finish(delegation, None, ok=False, text=f"{delegation.target.key} could not start on it: {exc.message}")


def on_delegation_finished(delegation_id: int) -> None:
    """A cancelled delegation stops what still runs for it (its target's session, a gate's reviewer)."""
    if not Delegation.objects.filter(pk=delegation_id, status=DelegationStatus.CANCELLED).exists():
        return
    for session in Session.objects.filter(ref=gates.delegation_ref(delegation_id), status__in=ACTIVE_STATUSES) \
            .select_related("agent"):
        svc.session_cancel(session=session, actor="delegation", reason="delegation_cancelled", announce=False)


# --- the target's session ended: gates, then the delegation's outcome ---------------------------------------------
def on_delegation_session_end(session_id) -> None:
    """Called after the commit that ends a delegation session: judge a completed result by the source's gates
    (unless the delegating session skips them), then complete or fail the delegation; or ask for a revision."""
    session = Session.objects.select_related("agent", "parent").filter(pk=session_id).first()
    delegation = _delegation_of(session) if session is not None else None
    if delegation is None or delegation.status != DelegationStatus.RUNNING or delegation.target_id != session.agent_id:
        return
    if session.status != S.COMPLETED:
        why = session.error or session.end_reason or session.status
        _finish(delegation, session, ok=False, text=f"{delegation.target.key}'s run {session.status}: {why}")
        return
    decided = _review(delegation, session)
    if decided is not None:
        _finish(delegation, session, ok=decided[0], text=decided[1])


def revision_marker(gate: gates.Gate) -> str:
    return f"[{gate.name}, revision "


def revisions_asked(session: Session, gate: gates.Gate) -> int:
    """How many revisions `gate` asked of this session already (its prompts are the session's own messages)."""
    return SessionMessage.objects.filter(session=session, role=MessageRole.USER,
                                         content__startswith=revision_marker(gate)).count()


def _review(delegation: Delegation, session: Session) -> tuple[bool, str] | None:
    """(passed, the delegation's result or why it failed), or None when a gate sent the target a revision prompt
    (the session runs again and ends here again). A gate's reviewer delegates without gates (`skip_gates`), and so
    does everything under a session that skips them: no gate ever judges a gate's own work."""
    result = session.result
    if session.skip_gates:  # inherited from the delegating session (an evaluate loop's round, a gate's reviewer)
        return True, result
    notes = []
    cancel = threading.Event()
    for gate in gates.gates_for(delegation.source, EVENT):
        verdict = gates.gate_check(gate, delegation=delegation, session=session, result=result, cancel=cancel)
        if verdict.passed:
            continue
        asked = revisions_asked(session, gate)
        if gate.block_on_failure and verdict.retryable and asked < gate.max_retries:
            if _ask_revision(delegation, session, gate, verdict.feedback, asked + 1):
                return None
            return False, f"Rejected by {gate.name}: {verdict.feedback}"  # no revision possible any more
        if gate.block_on_failure:
            after = f" after {asked} revision{'s' if asked != 1 else ''}" if asked else ""
            return False, f"Rejected by {gate.name}{after}: {verdict.feedback}"
        said = gates.cut_text(verdict.feedback, NOTE_MAX_CHARS)
        notes.append(f"[Note: {gate.name} did not pass (not blocking): {said}]")
    if notes:
        tail = "\n\n" + "\n".join(notes)
        result = result[: RESULT_MAX - len(tail)] + tail
    return True, result


def _ask_revision(delegation: Delegation, session: Session, gate: gates.Gate, feedback: str, number: int) -> bool:
    """Post the revision prompt into the target's session (it runs again); False if the delegation ended first."""
    if not Delegation.objects.filter(pk=delegation.pk, status=DelegationStatus.RUNNING).exists():
        return False
    content = (f"{revision_marker(gate)}{number} of {gate.max_retries}]\n"
               f"Your result was rejected by a quality gate: {feedback.rstrip('. ')}. Revise it.")
    try:
        svc.session_message_post(session=session, content=content)
    except ApplicationError as exc:  # archived or gone meanwhile
        logger.info("delegation %s: no revision asked: %s", delegation.pk, exc.message)
        return False
    return True


def _finish(delegation: Delegation, session: Session | None, *, ok: bool, text: str) -> None:
    """Complete or fail the delegation as its target, and tell the source's session when it did not wait (one
    transaction: the outcome and the announcement go together)."""
    text = text[:RESULT_MAX]
    try:
        with transaction.atomic():
            finish = delegation_complete if ok else delegation_fail
            delegation = finish(agent=delegation.target, delegation=delegation, result=text)
            if session is not None and session.parent_id is not None and not session.sync:
                _announce(session, delegation)
    except ApplicationError as exc:  # finished meanwhile (cancelled by its source, answered by its target)
        logger.info("delegation %s: outcome not recorded: %s", delegation.pk, exc.message)


def _announce(session: Session, delegation: Delegation) -> None:
    """The delegation's outcome as an `announce` message on the source's session, which runs again to read it."""
    heading = (f"[Delegation {delegation_identifier(delegation)} result from {delegation.target.key} "
               f"({delegation.status})]")
    svc.session_announce(parent_id=session.parent_id, heading=heading, body=delegation.result, child=session)


def register() -> None:
    """Called from RuntimeAppConfig.ready()."""
    from teams_app.work import work_subscribe

    work_subscribe("delegation.requested", on_delegation_requested)
    work_subscribe("delegation.finished", on_delegation_finished)
    svc.session_end_subscribe(SessionOrigin.DELEGATION, on_delegation_session_end)

