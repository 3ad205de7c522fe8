"""Agent links and delegation (docs/delegation.md). A delegation runs over an enabled link whose user lists allow
the caller's user, within the link's `max_concurrent` and the target's `max_delegation_load` (both enforced under
row locks: GoClaw stored max_concurrent and never enforced it). Delegating to a team lead puts the work on the
lead's board as a task; when the task finishes, `delegation_task_finished` hands its result back to the source."""
from __future__ import annotations

import threading
from typing import Any, Iterable

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from goclaw.errors import Conflict, ValidationError
from goclaw.events import agent_group, publish
from teams_app.actors import Actor
from teams_app.choices import DelegationStatus, LinkDirection, TaskStatus, TeamStatus
from teams_app.errors import AgentAtCapacity, DelegationNotAllowed
from teams_app.models import AgentLink, Delegation, Team, TeamTask
from teams_app.selectors_delegation import (delegation_as_dict, delegation_identifier, governing_link,
                                            link_allows_user, links_between, max_delegation_load, teams_led_by)
from teams_app.work import work_announce
from tools_app.labels import label
from tools_app.models import Agent

REQUEST_MAX = 19_000  # a team task's description holds it plus "Delegated by <key>" (20,000 at most)
RESULT_MAX = 100_000
SUBJECT_MAX = 200
DESCRIPTION_MAX = 2000
USER_LIST_MAX = 1000
USER_ID_MAX = 255
TEAMS_GROUP = "teams"
TASK_OUTCOMES = {TaskStatus.COMPLETED: DelegationStatus.COMPLETED, TaskStatus.FAILED: DelegationStatus.FAILED,
                 TaskStatus.CANCELLED: DelegationStatus.CANCELLED}


class DelegationInvalid(ValidationError):
    code = "delegation_invalid"


class DelegationConflict(Conflict):
    """The delegation is not running any more (or another call finished it first)."""

    code = "delegation_conflict"


class AgentLinkInvalid(ValidationError):
    code = "agent_link_invalid"


# --- agent links ---------------------------------------------------------------------------------------------------
def _user_ids(value: Any, name: str) -> list[str]:
    if not isinstance(value, (list, tuple)) or len(value) > USER_LIST_MAX or not all(
            isinstance(v, str) and v and len(v) <= USER_ID_MAX and "\x00" not in v for v in value):
        raise AgentLinkInvalid(f"{name} must be a list of at most {USER_LIST_MAX} user ids (non-empty strings of at "
                               f"most {USER_ID_MAX} characters)", details={name: ["Invalid list of user ids."]})
    return list(dict.fromkeys(value))


def agent_link_fields_clean(fields: dict[str, Any]) -> dict[str, Any]:
    """The link fields checked (types and ranges) and normalised (user lists de-duplicated); AgentLinkInvalid names
    the first wrong one."""
    clean: dict[str, Any] = {}
    for name, value in fields.items():
        if name == "direction":
            if value not in LinkDirection.values:
                raise AgentLinkInvalid("direction must be outbound or bidirectional",
                                       details={"direction": ["Not a valid choice."]})
        elif name == "max_concurrent":
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1000:
                raise AgentLinkInvalid("max_concurrent must be an integer from 1 to 1000",
                                       details={"max_concurrent": ["Must be an integer from 1 to 1000."]})
        elif name in ("allow_user_ids", "deny_user_ids"):
            value = _user_ids(value, name)
        elif name == "description":
            if not isinstance(value, str) or len(value) > DESCRIPTION_MAX or "\x00" in value:
                raise AgentLinkInvalid(f"description must be text of at most {DESCRIPTION_MAX} characters",
                                       details={"description": ["Too long or not text."]})
        elif name == "enabled":
            if not isinstance(value, bool):
                raise AgentLinkInvalid("enabled must be true or false", details={"enabled": ["Must be a boolean."]})
        else:
            raise AgentLinkInvalid(f"an agent link has no field {name!r}", details={name: ["Unknown field."]})
        clean[name] = value
    return clean


@transaction.atomic
def agent_link_create(*, actor: Actor, source: Agent, target: Agent, **fields: Any) -> AgentLink:
    """Let `source` delegate (and hand off) to `target` (and back, when bidirectional). One link per pair."""
    if source.pk == target.pk:
        raise AgentLinkInvalid("an agent cannot be linked to itself", details={"target": ["Same as source."]})
    values = agent_link_fields_clean(fields)
    try:
        with transaction.atomic():
            link = AgentLink.objects.create(source=source, target=target, **values)
    except IntegrityError:
        raise Conflict(f"a link from {source.key} to {target.key} exists already", code="agent_link_exists") from None
    return link


@transaction.atomic
def agent_link_update(*, actor: Actor, link: AgentLink, **fields: Any) -> AgentLink:
    """Change a link's direction, limits, user lists, description or switch. Running delegations keep going; a
    lower max_concurrent only stops new ones."""
    values = agent_link_fields_clean(fields)
    if values:
        AgentLink.objects.filter(pk=link.pk).update(**values)
    return AgentLink.objects.select_related("source", "target").get(pk=link.pk)


@transaction.atomic
def agent_link_delete(*, actor: Actor, link: AgentLink) -> None:
    """Remove a link. Its delegations stay (their link becomes empty) and still finish."""
    AgentLink.objects.filter(pk=link.pk).delete()


# --- delegation ----------------------------------------------------------------------------------------------------
def _publish(event: str, delegation: Delegation, actor: Actor, groups: Iterable[str] | None = None) -> None:
    payload = {"delegation": delegation_as_dict(delegation), "actor": str(actor)}
    keys = groups if groups is not None else (delegation.source.key, delegation.target.key)
    publish(event, payload, [agent_group(key) for key in keys] + [TEAMS_GROUP])


def _team_for(target: Agent, team_ref: Any) -> Team | None:
    teams = list(teams_led_by(target))
    if team_ref is None or team_ref == "":
        if len(teams) > 1:
            names = ", ".join(team.name for team in teams)
            raise DelegationInvalid(f"Agent {target.key} leads teams {names}: pass team to say which board the work "
                                    "goes to.")
        return teams[0] if teams else None
    if not isinstance(team_ref, (str, int)) or isinstance(team_ref, bool):
        raise DelegationInvalid("team must be a team's name or id.")
    for team in teams:
        if str(team_ref).strip().lower() in (team.name.lower(), str(team.pk)):
            return team
    names = ", ".join(team.name for team in teams)
    raise DelegationInvalid(f"Agent {target.key} leads no team {str(team_ref)[:100]!r}"
                            + (f" (it leads {names})." if names else " (it leads no team)."))


def _subject(request: str) -> str:
    first = next((line.strip() for line in request.splitlines() if line.strip()), "")
    return first[:SUBJECT_MAX] or "Delegated work"


# Delegations whose source waits for the result (`delegate` mode sync), from their creation until the commit that
# announces them: whatever runs the target (the runtime's subscriber, called in this process right after that commit)
# asks `delegation_awaited` so that the result is handed to the waiting caller only, not also told to its session.
_awaited: set[int] = set()
_awaited_lock = threading.Lock()


def delegation_awaited(delegation_id: int) -> bool:
    """Does the source of this just-created delegation wait for its result (mode sync)? Answered to the subscribers
    of `delegation.requested` while they run."""
    with _awaited_lock:
        return delegation_id in _awaited


def _awaited_done(delegation_id: int) -> None:
    with _awaited_lock:
        _awaited.discard(delegation_id)


@transaction.atomic
def delegation_create(*, source: Agent, target: Agent, request: str, user_id: str = "", session_key: str = "",
                      channel: str = "", chat_id: str = "", team: Any = None, wait: bool = False) -> Delegation:
    """`source` hands `request` to `target`: allowed by the governing link for `user_id`, within the link's
    max_concurrent and the target's max_delegation_load (the link row and the target row are locked before
    counting, so concurrent calls never exceed either). To a team lead, the request becomes a task on its board.
    `wait`: the caller waits for the result (`delegation_awaited`). Announced as work after commit."""
    if not isinstance(request, str) or not request.strip():
        raise DelegationInvalid("task must say what to do (a non-empty text).")
    if len(request) > REQUEST_MAX or "\x00" in request:
        raise DelegationInvalid(f"task is too long: at most {REQUEST_MAX} characters.")
    if target.pk == source.pk:
        raise DelegationInvalid("You cannot delegate to yourself.")
    if not target.enabled:
        raise DelegationNotAllowed(f"Agent {target.key} is disabled; delegate to another agent.")
    # Lock order everywhere: the link row, then the target agent row (FOR NO KEY UPDATE: inserts referencing them
    # still proceed; only other delegations to the same link / target wait).
    link = governing_link(links_between(source, target).select_for_update(no_key=True), source)
    if link is None:
        raise DelegationNotAllowed(f"You have no delegation link to agent {target.key}. DELEGATION.md lists the "
                                   "agents you can delegate to.")
    if not link_allows_user(link, user_id):
        raise DelegationNotAllowed(f"Your link to agent {target.key} does not allow delegating for this user.")
    target = Agent.objects.select_for_update(no_key=True).get(pk=target.pk)
    running = Delegation.objects.filter(status=DelegationStatus.RUNNING)
    over_link = running.filter(link=link).count()
    if over_link >= link.max_concurrent:
        raise AgentAtCapacity(
            f"Agent at capacity ({over_link}/{link.max_concurrent}). Try a different agent or handle it yourself. "
            f"(The limit is your link's: it allows {link.max_concurrent} running delegation"
            f"{'s' if link.max_concurrent != 1 else ''} to {target.key} at once.)",
            details={"limit": "link", "running": over_link, "max": link.max_concurrent})
    load, to_target = max_delegation_load(target), running.filter(target=target).count()
    if to_target >= load:
        raise AgentAtCapacity(
            f"Agent at capacity ({to_target}/{load}). Try a different agent or handle it yourself. "
            f"(The limit is the agent's: {target.key} takes {load} running delegation{'s' if load != 1 else ''} "
            "at once from all agents together.)",
            details={"limit": "agent", "running": to_target, "max": load})
    board = _team_for(target, team)
    delegation = Delegation.objects.create(
        source=source, target=target, link=link, request=request, status=DelegationStatus.RUNNING,
        user_id=label(user_id, USER_ID_MAX), session_key=label(session_key, 255))
    if board is not None:
        from teams_app.services.tasks import task_create

        delegation.task = task_create(
            actor=Actor.system(f"delegation:{delegation_identifier(delegation)}"), team=board,
            subject=_subject(request), description=f"{request}\n\nDelegated by {source.key}",
            user_id=label(user_id, USER_ID_MAX), channel=label(channel, 64), chat_id=label(chat_id, 255))
        Delegation.objects.filter(pk=delegation.pk).update(task=delegation.task)
    _publish("delegation.requested", delegation, Actor.for_agent(source))
    if wait:
        with _awaited_lock:
            _awaited.add(delegation.pk)
    work_announce("delegation.requested", delegation_id=delegation.pk)
    if wait:  # after the subscribers (on_commit callbacks run in order)
        transaction.on_commit(lambda pk=delegation.pk: _awaited_done(pk))
    return delegation


def _finish(*, delegation: Delegation, status: str, result: str, actor: Actor) -> Delegation:
    if not isinstance(result, str) or len(result) > RESULT_MAX or "\x00" in result:
        raise DelegationInvalid(f"result must be text of at most {RESULT_MAX} characters.")
    now = timezone.now()
    changed = Delegation.objects.filter(pk=delegation.pk, status=DelegationStatus.RUNNING).update(
        status=status, result=result, finished_at=now)
    if changed != 1:
        current = Delegation.objects.filter(pk=delegation.pk).values_list("status", flat=True).first()
        raise DelegationConflict(f"{delegation_identifier(delegation)} is {current or 'gone'}, not running: "
                                 "it cannot change any more.")
    delegation.status, delegation.result, delegation.finished_at = status, result, now
    _publish(f"delegation.{status}", delegation, actor)
    work_announce("delegation.finished", delegation_id=delegation.pk)
    return delegation


def _answerable(delegation: Delegation, agent: Agent) -> None:
    if delegation.target_id != agent.pk:
        raise DelegationNotAllowed(f"Only {delegation.target.key}, the agent it was delegated to, can answer "
                                   f"{delegation_identifier(delegation)}.")
    if delegation.task_id is not None:
        raise DelegationConflict(f"{delegation_identifier(delegation)} is task {delegation.task.identifier} on team "
                                 "board: its result comes from that task. Complete (or fail) the task instead.")


@transaction.atomic
def delegation_complete(*, agent: Agent, delegation: Delegation, result: str) -> Delegation:
    """The target answers an incoming delegation: running → completed with `result` (the source is told)."""
    _answerable(delegation, agent)
    return _finish(delegation=delegation, status=DelegationStatus.COMPLETED, result=result,
                   actor=Actor.for_agent(agent))


@transaction.atomic
def delegation_fail(*, agent: Agent, delegation: Delegation, result: str) -> Delegation:
    """The target gives up on an incoming delegation: running → failed with the reason as its result."""
    _answerable(delegation, agent)
    return _finish(delegation=delegation, status=DelegationStatus.FAILED, result=result, actor=Actor.for_agent(agent))


@transaction.atomic
def delegation_cancel(*, actor: Actor, delegation: Delegation, reason: str = "") -> Delegation:
    """The source (or a person) withdraws a running delegation; its board task, if unfinished, is cancelled too."""
    if actor.is_agent and actor.agent_id != delegation.source_id:
        raise DelegationNotAllowed(f"Only {delegation.source.key}, which delegated it, can cancel "
                                   f"{delegation_identifier(delegation)}.")
    if delegation.task_id is not None:
        # The board's lock order: the task row before the delegation row (finishing a task finishes its delegation
        # while holding the task), or a cancel racing the task's completion deadlocks.
        list(TeamTask.objects.select_for_update(of=("self",)).filter(pk=delegation.task_id).values_list("pk"))
    delegation = _finish(delegation=delegation, status=DelegationStatus.CANCELLED, result=reason, actor=actor)
    task = delegation.task
    if task is not None:
        task.refresh_from_db()
        # An archived board is read-only: its task stays as it is, and the delegation is cancelled all the same
        # (else the source could never withdraw it and it would hold the link's and the target's capacity).
        active = Team.objects.filter(pk=task.team_id, status=TeamStatus.ACTIVE).exists()
        if task.status not in TASK_OUTCOMES and active:
            from teams_app.services.tasks import task_cancel

            task_cancel(actor=Actor.system(f"delegation:{delegation_identifier(delegation)}"), task=task,
                        reason=f"{delegation_identifier(delegation)} was cancelled by {delegation.source.key}")
    return delegation


def delegation_task_finished(task: Any) -> None:
    """Called by the task services, in their transaction, when a task reaches completed / failed / cancelled: the
    delegation the task carries (if any) takes its outcome, and the source agent is told (`delegation.<status>`
    to its group), so the result flows back to whoever delegated. One conditional UPDATE … RETURNING (the task's
    row as committed in this transaction decides the outcome); nothing more when the task carries no delegation."""
    outcome = " ".join(f"WHEN '{t}' THEN '{d}'" for t, d in TASK_OUTCOMES.items())
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Delegation._meta.db_table} d SET status = CASE t.status {outcome} END, "
            f"result = left(t.result, %s), finished_at = %s FROM {TeamTask._meta.db_table} t "
            f"WHERE d.task_id = %s AND d.status = %s AND t.id = d.task_id AND t.status = ANY(%s) "
            f"RETURNING d.id, d.status, d.result = ''",
            [RESULT_MAX, timezone.now(), task.pk, DelegationStatus.RUNNING, list(TASK_OUTCOMES)])
        row = cursor.fetchone()
    if row is None:
        return
    pk, status, no_result = row
    if no_result:  # a failed or cancelled task may keep its reason in its last event rather than its result
        reason = _task_reason(task.pk, {v: k for k, v in TASK_OUTCOMES.items()}[status])
        if reason:
            Delegation.objects.filter(pk=pk).update(result=reason[:RESULT_MAX])
    delegation = Delegation.objects.select_related("source", "target", "task").get(pk=pk)
    _publish(f"delegation.{status}", delegation, Actor.system(f"task:{delegation.task.identifier}"),
             groups=(delegation.source.key, delegation.target.key))
    work_announce("delegation.finished", delegation_id=pk)


def _task_reason(task_id: int, status: str) -> str:
    """A failed or cancelled task may keep its reason in its last event rather than its result."""
    from teams_app.models import TeamEvent

    event = TeamEvent.objects.filter(task_id=task_id, event_type=status).order_by("-created_at", "-id").first()
    data = event.data if event and isinstance(event.data, dict) else {}
    reason = data.get("reason") or data.get("result") or ""
    return reason if isinstance(reason, str) else ""
