"""What every team service shares: the role checks (who may do what on a board), input checks with sentences for
the model, and `event_record` (the audit row plus the realtime event, published after commit)."""
from __future__ import annotations

import json
from typing import Any, Iterable

from django.core.serializers.json import DjangoJSONEncoder

from goclaw import events
from teams_app.actors import Actor
from teams_app.choices import MemberRole, TeamEventType, TeamStatus
from teams_app.errors import TaskInvalid, TeamInvalid, TeamNotFound, TeamPermissionDenied
from teams_app.models import Team, TeamEvent, TeamMember, TeamTask

TEAMS_GROUP = "teams"
ANY_ROLE = (MemberRole.LEAD, MemberRole.MEMBER, MemberRole.REVIEWER)
# Events the lead's own agent group hears about (besides the team groups and the owner's group).
LEAD_EVENTS = frozenset({TeamEventType.REVIEWED, TeamEventType.COMPLETED, TeamEventType.FAILED,
                         TeamEventType.ESCALATED, TeamEventType.ASKED_USER, TeamEventType.STALE,
                         TeamEventType.RELEASED, TeamEventType.UNBLOCKED})
_ROLE_AS_SUBJECT = {MemberRole.LEAD: "the lead", MemberRole.MEMBER: "a member", MemberRole.REVIEWER: "a reviewer"}


def team_group(team_id: Any) -> str:
    return f"team.{team_id}"


def member_role(team: Team, agent: Any) -> str | None:
    """The role of `agent` (an Agent or its id) in `team`, or None when it is not a member."""
    agent_id = getattr(agent, "pk", agent)
    if agent_id is None:
        return None
    # .order_by(): no join through the model's default ordering (team name, agent key) for a one-row lookup.
    team_id = getattr(team, "pk", team)
    return (TeamMember.objects.filter(team_id=team_id, agent_id=agent_id).order_by()
            .values_list("role", flat=True).first())


def require_role(team: Team, actor: Actor, roles: Iterable[str], action: str) -> str:
    """Check that `actor` may do `action` ("cancel tasks") in `team`; return its role ("person" / "system" for
    people and goclaw itself, who pass every check). An agent outside the team gets TeamNotFound: it never learns
    that other teams exist."""
    if not actor.is_agent:
        return "person" if actor.is_person else "system"
    role = member_role(team, actor.agent_id)
    if role is None:
        raise TeamNotFound(f"Team {team.name!r} was not found among your teams.")
    roles = tuple(roles)
    if role not in roles:
        raise TeamPermissionDenied(f"Only {_roles_phrase(roles)} can {action} in team {team.name}; "
                                   f"you are {_ROLE_AS_SUBJECT.get(role, role)}.")
    return role


def _roles_phrase(roles: tuple[str, ...]) -> str:
    names = {MemberRole.LEAD: "the lead", MemberRole.MEMBER: "members", MemberRole.REVIEWER: "reviewers"}
    parts = [names.get(r, r) for r in roles]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " or " + parts[-1]


def require_writable(team: Team) -> None:
    """Archived teams are read-only."""
    if team.status != TeamStatus.ACTIVE:
        raise TeamInvalid(f"Team {team.name} is archived; its board can be read but not changed.")


def clean_text(field: str, value: Any, limit: int, *, required: bool = False, error: type = TaskInvalid) -> str:
    """`value` as text within `limit` characters, never truncated silently; NUL (which PostgreSQL text cannot hold)
    is refused."""
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise error(f"{field} must be text, not {type(value).__name__}.")
    if "\x00" in value:
        raise error(f"{field} contains a NUL character.")
    if len(value) > limit:
        raise error(f"{field} is {len(value):,} characters long; the limit is {limit:,}. Shorten it (or attach a "
                    f"file with the full text).")
    if required and not value.strip():
        raise error(f"{field} is required.")
    return value


def clean_int(field: str, value: Any, low: int, high: int, *, error: type = TaskInvalid) -> int:
    """`value` as an integer in [low, high] (a string of digits is accepted; booleans and fractions are not)."""
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value.strip()) <= 12:
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        raise error(f"{field} must be a whole number between {low} and {high}.")
    if not low <= value <= high:
        raise error(f"{field} must be between {low} and {high} (got {value}).")
    return value


def clean_session_key(value: Any) -> str:
    """A caller's session key as its call context gave it, to store: only ever matched against that agent's own
    sessions (an external agent writes its call context itself), so it is kept, not judged."""
    return value[:255].replace("\x00", "") if isinstance(value, str) else ""


def actor_label(actor: Any) -> str:
    return str(actor) if actor is not None else "system"


def event_data(data: dict[str, Any] | None) -> dict[str, Any]:
    """An event's data as the audit row stores it (datetimes as ISO text, like every JSON payload)."""
    return json.loads(json.dumps(data or {}, cls=DjangoJSONEncoder))


def event_publish(event_type: str, team_id: int, task: dict[str, Any] | None, actor: str, data: dict[str, Any], *,
                  owner_key: str | None = None, lead_key: str | None = None) -> None:
    """Publish `team_task.<event_type>` (after commit) to the team's group, the all-teams group, the owner's agent
    group (`owner_key`: pass it only while the owner is in the team) and the lead's (for events the lead acts on)."""
    events.publish_many([event_item(event_type, team_id, task, actor, data, owner_key=owner_key, lead_key=lead_key)])


def event_item(event_type: str, team_id: int, task: dict[str, Any] | None, actor: str, data: dict[str, Any], *,
               owner_key: str | None = None, lead_key: str | None = None) -> tuple[str, dict[str, Any], list[str]]:
    """What `event_publish` publishes, for `goclaw.events.publish_many` (a batch's events handed over at once)."""
    groups = [team_group(team_id), TEAMS_GROUP]
    if owner_key:
        groups.append(events.agent_group(owner_key))
    if lead_key and event_type in LEAD_EVENTS:
        groups.append(events.agent_group(lead_key))
    return f"team_task.{event_type}", {"team": team_id, "task": task, "actor": actor, "data": data}, groups


def event_record(team: Team, task: TeamTask | None, event_type: str, actor: Any,
                 data: dict[str, Any] | None = None, *, owner_in_team: bool | None = None) -> TeamEvent:
    """Write the audit row of something that happened on `team`'s board and publish `team_task.<event_type>`
    (after commit) to the team's group, the all-teams group, the task owner's agent group (while it is in the team),
    and the lead's for events the lead acts on. `owner_in_team`: the caller already knows (saves a query)."""
    from teams_app.selectors import task_as_dict

    data = event_data(data)
    event = TeamEvent.objects.create(team=team, task=task, event_type=event_type, actor=actor_label(actor), data=data)
    owner_key = None
    # A finished task keeps its owner after the owner leaves the team: a former member hears nothing more.
    if task is not None and task.owner_id:
        if owner_in_team is None and isinstance(actor, Actor) and actor.is_agent and actor.agent_id == task.owner_id:
            owner_in_team = True  # an agent acting on the board has passed require_role in this transaction
        if owner_in_team is None:
            owner_in_team = member_role(team, task.owner_id) is not None
        if owner_in_team:
            owner_key = task.owner.key
    lead_key = team.lead.key if event_type in LEAD_EVENTS else None
    event_publish(event_type, team.pk, task_as_dict(task) if task is not None else None, event.actor, data,
                  owner_key=owner_key, lead_key=lead_key)
    return event
