"""The team mailbox (docs/teams.md, "Mailbox"): direct messages between teammates, the lead's broadcasts (one row per
recipient, so each has its own read receipt), notices from goclaw itself, and reading the unread ones, which marks
them read."""
from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from goclaw import events
from teams_app.actors import Actor
from teams_app.choices import MemberRole, MessageKind
from teams_app.errors import TaskInvalid, TaskNotFound
from teams_app.models import Team, TeamMember, TeamMessage, TeamTask
from teams_app.services.common import (ANY_ROLE, actor_label, clean_int, clean_session_key, clean_text, member_role,
                                       require_role, require_writable, team_group)
from teams_app.work import work_announce

MESSAGE_MAX = 10_000
READ_MAX = 200


def message_as_dict(message: TeamMessage) -> dict[str, Any]:
    """The JSON shape of one mailbox message (tool answers, events)."""
    return {"id": message.pk, "team": message.team_id, "sender": message.sender, "recipient": message.recipient.key,
            "kind": message.kind, "text": message.text,
            "task": message.task.identifier if message.task_id else None,
            "created_at": message.created_at, "read_at": message.read_at}


def _publish(message: TeamMessage) -> None:
    """The realtime event, and the work announcement that wakes a hosted recipient (both after commit)."""
    events.publish("team_message.sent", message_as_dict(message),
                   [events.agent_group(message.recipient.key), team_group(message.team_id)])
    work_announce("message.sent", message_id=message.pk)


def _check_task(team: Team, task: TeamTask | None) -> None:
    if task is not None and task.team_id != team.pk:
        raise TaskNotFound(f"That task is not on team {team.name}'s board.")


@transaction.atomic
def message_send(*, actor: Actor, team: Team, to: Any, text: str, task: TeamTask | None = None,
                 session_key: str = "") -> TeamMessage:
    """Send `text` to one teammate `to` (an Agent of the same team; never yourself). `session_key`: the sender's
    session (a hosted recipient's reply is told there)."""
    text = clean_text("text", text, MESSAGE_MAX, required=True)
    require_writable(team)
    require_role(team, actor, ANY_ROLE, "send messages")
    if to is None or getattr(to, "pk", None) is None:
        raise TaskInvalid("Say which teammate the message is for (to).")
    if actor.is_agent and to.pk == actor.agent_id:
        raise TaskInvalid("You cannot send a message to yourself; write a note on the task instead.")
    if member_role(team, to) is None:
        raise TaskInvalid(f"{to.key} is not in team {team.name}; messages go to teammates only.")
    _check_task(team, task)
    kind = MessageKind.DIRECT if actor.is_agent or actor.is_person else MessageKind.SYSTEM
    message = TeamMessage.objects.create(team=team, sender=actor_label(actor), recipient=to, kind=kind, text=text,
                                         task=task, session_key=clean_session_key(session_key))
    _publish(message)
    return message


@transaction.atomic
def message_broadcast(*, actor: Actor, team: Team, text: str, session_key: str = "") -> list[TeamMessage]:
    """The lead (or a person) tells every teammate at once: one message per member except the sender."""
    text = clean_text("text", text, MESSAGE_MAX, required=True)
    require_writable(team)
    require_role(team, actor, (MemberRole.LEAD,), "broadcast messages")
    members = TeamMember.objects.filter(team=team).select_related("agent").order_by("agent__key")
    if actor.is_agent:
        members = members.exclude(agent_id=actor.agent_id)
    sender = actor_label(actor)
    messages = TeamMessage.objects.bulk_create(
        [TeamMessage(team=team, sender=sender, recipient=m.agent, kind=MessageKind.BROADCAST, text=text,
                     session_key=clean_session_key(session_key)) for m in members])
    for message in messages:
        _publish(message)
    return messages


def message_system_send(*, team: Team, to: Any, text: str, task: TeamTask | None = None,
                        sender: str = "system:escalation", session_key: str = "") -> TeamMessage | None:
    """A notice from goclaw itself (escalations, answers to ask_user) to one teammate; callers hold the
    transaction and have done the checks. Over-long text is cut here: it is goclaw's own text quoting others'.
    Nothing is sent (None) to an agent no longer in the team, e.g. the former owner of a finished task.
    `session_key`: the lead's session the notice concerns (goclaw's own choice, never an agent's)."""
    if member_role(team, to) is None:
        return None
    text = text if len(text) <= MESSAGE_MAX else text[:MESSAGE_MAX - 1] + "…"
    message = TeamMessage.objects.create(team=team, sender=sender, recipient=to, kind=MessageKind.SYSTEM,
                                         text=text.replace("\x00", ""), task=task,
                                         session_key=clean_session_key(session_key))
    _publish(message)
    return message


@transaction.atomic
def messages_read(*, agent: Any, team: Team | None = None, limit: int = 50) -> list[TeamMessage]:
    """`agent`'s unread messages (of one team, or of all its teams), oldest first, marked read as they are handed
    over: `read_at` is the receipt, and a second read returns only what arrived since. Concurrent reads by the same
    agent never hand out one message twice."""
    limit = clean_int("limit", limit, 1, READ_MAX)
    unread = TeamMessage.objects.filter(recipient=agent, read_at__isnull=True,
                                        team__members__agent=agent)
    if team is not None:
        unread = unread.filter(team=team)
    ids = list(unread.select_for_update(of=("self",), skip_locked=True).order_by("created_at", "id")
               .values_list("id", flat=True)[:limit])
    if not ids:
        return []
    now = timezone.now()
    TeamMessage.objects.filter(pk__in=ids, read_at__isnull=True).update(read_at=now)
    return list(TeamMessage.objects.filter(pk__in=ids, read_at=now).select_related("recipient", "task")
                .order_by("created_at", "id"))


def message_delivered(*, message_id: int) -> bool:
    """A hosted recipient was handed the message in its session: that is its receipt (a later `read` does not hand
    it out again). False when it had been read already."""
    return bool(TeamMessage.objects.filter(pk=message_id, read_at__isnull=True).update(read_at=timezone.now()))
