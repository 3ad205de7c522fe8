"""What people and goclaw do about a member's hosted run (docs/teams.md, "Hosted members"): a person stops it from
the board, and a run that makes no progress is escalated to the lead. teams_app never sees the runtime: the stop
is announced through `teams_app.work` (the runtime cancels), and the runtime's stuck sweep calls in here."""
from __future__ import annotations

from typing import Any

from django.db import transaction

from teams_app.actors import Actor
from teams_app.choices import MemberRole, TaskStatus, TeamEventType, TeamStatus
from teams_app.errors import TaskInvalid
from teams_app.models import Team, TeamEvent, TeamTask
from teams_app.services.common import event_record, member_role, require_role
from teams_app.services.mailbox import message_system_send
from teams_app.work import work_announce

STUCK_ACTOR = Actor.system("stuck")
STUCK_REASON = "member_stuck"


@transaction.atomic
def member_stop_request(*, actor: Actor, team: Team, agent: Any) -> TeamEvent:
    """A person stops the hosted run working for `agent` on `team` (the board's Stop): recorded on the board's log,
    then announced to the runtime, which cancels the member's team session after commit."""
    require_role(team, actor, (MemberRole.LEAD,), "stop members")
    if member_role(team, agent) is None:
        raise TaskInvalid(f"{agent.key} is not in team {team.name}.")
    event = event_record(team, None, TeamEventType.STOPPED, actor, {"member": agent.key})
    work_announce("member.stop_requested", team_id=team.pk, agent_id=agent.pk, actor=str(actor))
    return event


def _stuck_text(agent: Any, minutes: int, task: TeamTask | None) -> str:
    on = f" on {task.identifier} ({task.subject[:100]})" if task is not None else ""
    return (f"[Escalation] {agent.key} has made no progress{on} for {minutes} minutes. Message it, reassign its "
            f"task, or have a person stop it from the team board.")


@transaction.atomic
def member_stuck_escalate(*, team_id: int, agent: Any, run: str, idle_minutes: int,
                          session_key: str = "") -> TeamEvent | None:
    """Tell the lead that `agent`'s run `run` (an identifier of the run and how far it got) has stalled: an
    `escalated` event on the board and a system message to the lead (about the member's task in progress, if any;
    `session_key`: the lead's session that started the work). Once per `run`; None when already told, the team is
    archived or the agent is not (or no longer) a member of it."""
    team = Team.objects.select_for_update(of=("self",)).select_related("lead").filter(pk=team_id).first()
    if team is None or team.status != TeamStatus.ACTIVE or member_role(team, agent) not in (
            MemberRole.MEMBER, MemberRole.REVIEWER):
        return None
    # The team row lock serialises concurrent sweeps: one of them escalates, the others find its event.
    if TeamEvent.objects.filter(team=team, event_type=TeamEventType.ESCALATED, data__reason=STUCK_REASON,
                                data__run=run).exists():
        return None
    task = (TeamTask.objects.select_related("owner").filter(team=team, owner=agent, status=TaskStatus.IN_PROGRESS)
            .order_by("number").first())
    event = event_record(team, task, TeamEventType.ESCALATED, STUCK_ACTOR,
                         {"reason": STUCK_REASON, "member": agent.key, "run": run, "idle_minutes": idle_minutes})
    message_system_send(team=team, to=team.lead, task=task, sender=str(STUCK_ACTOR), session_key=session_key,
                        text=_stuck_text(agent, idle_minutes, task))
    return event
