"""Teams and their members (docs/teams.md, "Teams"): people (staff) create teams, set members and roles, change the
lead and the board's settings, and archive a team (its board becomes read-only). The lead is kept in step with its
TeamMember row (role lead)."""
from __future__ import annotations

from typing import Any, Iterable

from django.db import transaction
from django.utils import timezone

from goclaw import events
from teams_app.actors import Actor
from teams_app.choices import MemberRole, TaskStatus, TeamEventType, TeamStatus
from teams_app.errors import TaskConflict, TeamInvalid, TeamNotFound, TeamPermissionDenied
from teams_app.models import Team, TeamMember, TeamTask
from teams_app.services.common import TEAMS_GROUP, actor_label, clean_int, clean_text, event_record, team_group

NAME_MAX = 100
DESCRIPTION_MAX = 10_000
# Board settings a team carries, with their bounds (the model's validators).
SETTINGS_BOUNDS = {"lock_minutes": (1, 24 * 60), "stale_after_minutes": (1, 30 * 24 * 60),
                   "review_stale_after_minutes": (1, 30 * 24 * 60)}
WORKER_ROLES = (MemberRole.MEMBER, MemberRole.REVIEWER)


def _require_person(actor: Actor, action: str) -> None:
    if actor.is_agent:
        raise TeamPermissionDenied(f"Only people can {action}; ask an administrator.")


def _clean_settings(settings: dict[str, Any]) -> dict[str, Any]:
    cleaned: dict[str, Any] = {}
    for key, value in settings.items():
        if key == "blocker_escalation":
            if not isinstance(value, bool):
                raise TeamInvalid("blocker_escalation must be true or false.")
            cleaned[key] = value
        elif key in SETTINGS_BOUNDS:
            cleaned[key] = clean_int(key, value, *SETTINGS_BOUNDS[key], error=TeamInvalid)
        else:
            raise TeamInvalid(f"Unknown team setting {str(key)[:60]!r}; settings are blocker_escalation, "
                              f"{', '.join(SETTINGS_BOUNDS)}.")
    return cleaned


def _clean_name(name: Any, exclude_pk: int | None = None) -> str:
    name = clean_text("name", name, NAME_MAX, required=True, error=TeamInvalid).strip()
    if Team.objects.filter(name__iexact=name).exclude(pk=exclude_pk).exists():
        raise TeamInvalid(f"A team named {name!r} already exists; choose another name.",
                          details={"name": ["already taken"]})
    return name


def _publish_team(event: str, team: Team) -> None:
    events.publish(event, {"team": team.pk, "name": team.name, "status": team.status, "lead": team.lead.key},
                   [TEAMS_GROUP, team_group(team.pk)])


@transaction.atomic
def team_create(*, actor: Actor, name: str, lead: Any, members: Iterable[tuple[Any, str]] = (),
                description: str = "", **settings: Any) -> Team:
    """Create a team led by `lead` with `members` ((Agent, "member"|"reviewer") pairs) and board settings
    (blocker_escalation, lock_minutes, stale_after_minutes, review_stale_after_minutes)."""
    _require_person(actor, "create teams")
    name = _clean_name(name)
    description = clean_text("description", description, DESCRIPTION_MAX, error=TeamInvalid)
    cleaned = _clean_settings(settings)
    if lead is None or getattr(lead, "pk", None) is None:
        raise TeamInvalid("A team needs a lead agent.")
    pairs = []
    seen = {lead.pk}
    for pair in members:
        try:
            agent, role = pair
        except (TypeError, ValueError):
            raise TeamInvalid("members must be (agent, role) pairs.") from None
        if getattr(agent, "pk", None) is None:
            raise TeamInvalid("Every member must be an existing agent.")
        if role not in WORKER_ROLES:
            raise TeamInvalid(f"{agent.key}'s role must be member or reviewer (the lead is set by lead).")
        if agent.pk in seen:
            raise TeamInvalid(f"{agent.key} is listed twice (or is the lead); each agent has one role.")
        seen.add(agent.pk)
        pairs.append((agent, role))
    team = Team.objects.create(name=name, lead=lead, description=description, created_by=actor_label(actor),
                               **cleaned)
    TeamMember.objects.bulk_create([TeamMember(team=team, agent=lead, role=MemberRole.LEAD)]
                                   + [TeamMember(team=team, agent=a, role=r) for a, r in pairs])
    _publish_team("team.created", team)
    return team


@transaction.atomic
def team_update(*, actor: Actor, team: Team, **fields: Any) -> Team:
    """Change a team's name, description, status (active | archived), lead or board settings. A new lead takes the
    lead's member row; the old lead stays in the team as a member."""
    _require_person(actor, "change teams")
    team = Team.objects.select_for_update().select_related("lead").get(pk=team.pk)
    changes: dict[str, Any] = {}
    for key in ("name", "description", "status", "lead"):
        if key not in fields:
            continue
        value = fields.pop(key)
        if key == "name":
            value = _clean_name(value, exclude_pk=team.pk)
        elif key == "description":
            value = clean_text("description", value, DESCRIPTION_MAX, error=TeamInvalid)
        elif key == "status" and value not in TeamStatus.values:
            raise TeamInvalid(f"status must be one of {', '.join(TeamStatus.values)}.")
        elif key == "lead" and getattr(value, "pk", None) is None:
            raise TeamInvalid("lead must be an existing agent.")
        changes[key] = value
    changes.update(_clean_settings(fields))
    new_lead = changes.get("lead")
    if new_lead is not None and new_lead.pk != team.lead_id:
        TeamMember.objects.filter(team=team, role=MemberRole.LEAD).update(role=MemberRole.MEMBER)
        TeamMember.objects.update_or_create(team=team, agent=new_lead, defaults={"role": MemberRole.LEAD})
        # The lead never works tasks itself: the ones it held go back to the board for a member.
        TeamTask.objects.filter(team=team, owner=new_lead, status=TaskStatus.IN_PROGRESS).update(
            status=TaskStatus.PENDING, owner=None, locked_at=None, lock_expires_at=None, updated_at=timezone.now())
        TeamTask.objects.filter(team=team, owner=new_lead).exclude(status__in=(
            TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED)).update(owner=None)
    for key, value in changes.items():
        setattr(team, key, value)
    if changes:
        team.save()
        shown = {k: (v.key if k == "lead" else v) for k, v in changes.items()}
        event_record(team, None, TeamEventType.UPDATED, actor, {"team": shown})
        _publish_team("team.updated", team)
    return team


@transaction.atomic
def team_member_set(*, actor: Actor, team: Team, agent: Any, role: str) -> TeamMember:
    """Add `agent` to `team` as a member or reviewer, or change its role (the lead changes with team_update)."""
    _require_person(actor, "change team members")
    if role not in WORKER_ROLES:
        raise TeamInvalid("role must be member or reviewer; change the lead with the team's lead setting.")
    if getattr(agent, "pk", None) is None:
        raise TeamInvalid("agent must be an existing agent.")
    if agent.pk == team.lead_id:
        raise TeamInvalid(f"{agent.key} is the lead of team {team.name}; choose another lead first.")
    member, _ = TeamMember.objects.update_or_create(team=team, agent=agent, defaults={"role": role})
    event_record(team, None, TeamEventType.UPDATED, actor, {"member": agent.key, "role": role})
    return member


@transaction.atomic
def team_member_remove(*, actor: Actor, team: Team, agent: Any) -> None:
    """Take `agent` out of `team`; the unfinished tasks it held go back to the board without an owner."""
    _require_person(actor, "change team members")
    if agent.pk == team.lead_id:
        raise TeamInvalid(f"{agent.key} is the lead of team {team.name}; choose another lead first.")
    deleted, _ = TeamMember.objects.filter(team=team, agent=agent).delete()
    if not deleted:
        raise TeamInvalid(f"{agent.key} is not in team {team.name}.")
    now = timezone.now()
    TeamTask.objects.filter(team=team, owner=agent, status=TaskStatus.IN_PROGRESS).update(
        status=TaskStatus.PENDING, owner=None, locked_at=None, lock_expires_at=None, updated_at=now)
    TeamTask.objects.filter(team=team, owner=agent).exclude(status__in=(
        TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED)).update(owner=None, updated_at=now)
    event_record(team, None, TeamEventType.UPDATED, actor, {"removed": agent.key})


@transaction.atomic
def team_delete(*, actor: Actor, team: Team) -> None:
    """Delete a team with no tasks (members, messages and events go with it); one with tasks is a conflict: archive
    it. The team row is locked first so a task created meanwhile waits and then finds no team."""
    locked = Team.objects.select_for_update().filter(pk=team.pk).first()
    if locked is None:
        raise TeamNotFound(f"no team {team.pk}")
    if locked.tasks.exists():
        raise TaskConflict(f"team {locked.name} has tasks: archive it instead (PATCH status archived), so its board "
                           f"and history stay readable", code="team_has_tasks")
    locked.delete()
