"""Hosted teammates (docs/teams.md, "Hosted members"). teams_app announces work after its commits (teams_app.work);
this module wakes the hosted agents concerned, and the runners run them like any session:

- a task assigned to a hosted member, or a mailbox message to one, is posted into the member's team session for that
  team (origin `team`, ref `team:<id>`; one per member, team and conversation, continued while it is active or
  ended less than an hour ago), created under the lead's session that started the work when it can be identified
  (the session key the lead's tool call carried, stored on the task or message and honoured only when it is that
  agent's own session), so the member's final reply is announced there as `teammate: <key> (<status>)`;
- a message to a lead whose session working with the team is known goes into that session;
- a conversation handed off to a hosted agent starts (or continues) its session for that channel and chat;
- a person's Stop on the board cancels the member's team session; a sweep escalates members' runs that make no
  progress for `GOCLAW_TEAM_STUCK_MINUTES` to the lead, once per stall.

Nothing runs here: sessions are created or messaged, and the runners pick them up."""
from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Max, Q
from django.utils import timezone

from runtime_app.choices import ACTIVE_STATUSES, ENDED_STATUSES, MessageRole, SessionOrigin, SessionStatus
from runtime_app.models import Session, SessionMessage
from runtime_app.runs import is_hosted
from runtime_app.services import sessions as svc
from teams_app.choices import TaskStatus, TeamEventType, TeamStatus
from teams_app.models import HandoffRoute, TeamEvent, TeamMember, TeamMessage, TeamTask
from teams_app.services.common import member_role
from teams_app.services.mailbox import message_delivered
from teams_app.services.members import member_stuck_escalate
from teams_app.work import member_activity_register, work_subscribe
from tools_app.models import Agent

S = SessionStatus
REUSE_AFTER_END = timedelta(minutes=60)  # an ended team session this recent is continued, not replaced
HANDOFF_CONTEXT_MESSAGES = 6
HANDOFF_MESSAGE_CHARS = 500
STUCK_BATCH = 500
# One transaction-level advisory lock per agent (in a namespace of its own) serialises waking its team sessions, so
# two tasks assigned at once continue one session instead of starting two.
_WAKE_NAMESPACE = 0x5445414D << 32  # "TEAM"
_TEAM_REF = re.compile(r"^team:([0-9]{1,18})$")
TEAM_NOTE = ("You are {agent}, a member of team {team} (lead: {lead}). Tasks assigned to you and your teammates' "
             "messages arrive in this conversation. Work the board with team_tasks (claim, progress, complete with "
             "your result) and talk to teammates with team_message{several}. Your final reply is reported to the "
             "lead.")


def team_ref(team_id: int) -> str:
    return f"team:{team_id}"


# --- which session a piece of work came from ---------------------------------------------------------------------------
def _session_of(key: str, agent_id: int | None) -> Session | None:
    """The session `key` names if it is `agent_id`'s own and still usable (not cancelled nor archived): the key comes
    from a call context, which an external agent writes itself, so another agent's session never matches."""
    if not key or agent_id is None:
        return None
    return (Session.objects.select_related("agent").filter(key=key, agent_id=agent_id)
            .exclude(status__in=[S.CANCELLED, S.ARCHIVED]).first())


def _working_session(session: Session | None) -> Session | None:
    """A teammate's team session answers to the session above it (the lead's): climb to the session that started
    the work; None when the chain ends in a team session nobody started."""
    for _ in range(4):
        if session is None or session.origin != SessionOrigin.TEAM:
            return session
        parent = session.parent
        session = parent if parent is not None and parent.status not in (S.CANCELLED, S.ARCHIVED) else None
    return None


def _who(label: str) -> str:
    """An actor label as a teammate reads it: an agent by its key, people and goclaw as labelled."""
    return label[len("agent:"):] if label.startswith("agent:") else label


def _context(session: Session | None, *fallback: Any) -> dict[str, str]:
    """The user, channel and chat a woken session works for: those of the session that started the work, else the
    task's or message's."""
    source = session or next((f for f in fallback if f is not None), None)
    return {name: getattr(source, name, "") or "" for name in ("user_id", "channel", "chat_id")}


# --- waking a member ------------------------------------------------------------------------------------------------
def team_session_wake(*, agent: Agent, team: Any, content: str, parent: Session | None = None, user_id: str = "",
                      channel: str = "", chat_id: str = "", created_by: str = "") -> Session:
    """Post `content` into `agent`'s team session for `team` and this conversation (active, or ended within the
    last hour: it runs again), else start one under `parent`. A continued session that had ended reports its next
    end again (to `parent` when given, else to the session it reported to before)."""
    ref = team_ref(team.pk)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_WAKE_NAMESPACE | (agent.pk & 0xFFFFFFFF)])
        recent = Q(status__in=ACTIVE_STATUSES) | Q(status__in=ENDED_STATUSES,
                                                   ended_at__gte=timezone.now() - REUSE_AFTER_END)
        session = (Session.objects.select_for_update(of=("self",))
                   .filter(recent, agent=agent, origin=SessionOrigin.TEAM, ref=ref, user_id=user_id, channel=channel,
                           chat_id=chat_id).order_by("-updated_at").first())
        if session is None:
            several = f', passing team "{team.name}"' if TeamMember.objects.filter(agent=agent).count() > 1 else ""
            note = TEAM_NOTE.format(agent=agent.key, team=team.name, lead=team.lead.key, several=several)
            return svc.session_create(agent=agent, created_by=created_by or f"team:{team.pk}", user_id=user_id,
                                      channel=channel, chat_id=chat_id, message=content, parent=parent, task=note,
                                      origin=SessionOrigin.TEAM, ref=ref)
        changes: dict[str, Any] = {}
        if session.status not in ACTIVE_STATUSES:
            changes["announced"] = False
            if parent is not None:
                changes["parent"] = parent
        elif session.parent_id is None and parent is not None:
            changes["parent"] = parent  # an active run keeps the lead it reports to; one with none gets this one
        if changes:
            Session.objects.filter(pk=session.pk).update(**changes)
        svc.session_message_post(session=session, content=content)
        return session


def _assigned_by(task: TeamTask) -> str:
    label = (TeamEvent.objects.filter(task=task, event_type__in=[TeamEventType.CREATED, TeamEventType.ASSIGNED])
             .order_by("-created_at", "-id").values_list("actor", flat=True).first())
    return _who(label or task.created_by or "the lead")


def task_content(task: TeamTask, by: str) -> str:
    """What a member is told of a task assigned to it: the task carries its own context (lead-centric teams)."""
    description = f"\n\n{task.description}" if task.description.strip() else ""
    return (f"[Team task {task.identifier} assigned to you by {by}]: {task.subject}{description}\n"
            f"Claim it with team_tasks and complete it with your result.")


def message_content(message: TeamMessage) -> str:
    about = f"\n(about {message.task.identifier}: {message.task.subject[:200]})" if message.task_id else ""
    return f"[Team message from {_who(message.sender)}]: {message.text}{about}"


def _wakeable(agent: Agent | None) -> bool:
    return agent is not None and agent.enabled and is_hosted(agent)


def on_task_assigned(task_id: int) -> None:
    """task.assigned: a hosted owner is told of its task (if it is still pending and its own)."""
    task = TeamTask.objects.select_related("team", "team__lead", "owner").filter(pk=task_id).first()
    if task is None or task.status != TaskStatus.PENDING or task.team.status != TeamStatus.ACTIVE:
        return
    if not _wakeable(task.owner):
        return
    lead_session = _session_of(task.session_key, task.team.lead_id)
    team_session_wake(agent=task.owner, team=task.team, content=task_content(task, _assigned_by(task)),
                      parent=lead_session, created_by=task.created_by[:200], **_context(lead_session, task))


def on_message_sent(message_id: int) -> None:
    """message.sent: a hosted recipient reads it in its session: a lead in its session working with the team (when
    known), anyone else in its team session, under the session the sender works for. Delivered counts as read."""
    message = (TeamMessage.objects.select_related("team", "team__lead", "recipient", "task")
               .filter(pk=message_id, read_at__isnull=True).first())
    if message is None or message.team.status != TeamStatus.ACTIVE or not _wakeable(message.recipient):
        return
    team, agent = message.team, message.recipient
    if member_role(team, agent) is None:
        return
    if message.sender.startswith("agent:"):
        sender_id = Agent.objects.filter(key=message.sender[len("agent:"):]).values_list("pk", flat=True).first()
        origin = _working_session(_session_of(message.session_key, sender_id))
    else:  # goclaw's own notices name the lead's session (the stuck sweep), or concern a task the lead created
        key = message.session_key or (message.task.session_key if message.task_id else "")
        origin = _session_of(key, team.lead_id)
    if origin is not None and origin.agent_id == agent.pk:
        svc.session_message_post(session=origin, content=message_content(message))
    else:
        team_session_wake(agent=agent, team=team, content=message_content(message), parent=origin,
                          created_by=message.sender[:200], **_context(origin, message.task))
    message_delivered(message_id=message.pk)


# --- handoff ----------------------------------------------------------------------------------------------------------
def _said(session: Session | None) -> str:
    """The last few things said in the source's conversation (people's messages and the agent's answers), cut."""
    if session is None:
        return "(goclaw holds no record of this conversation: the agent that handed it over runs elsewhere)"
    rows = list(SessionMessage.objects.filter(session=session, role__in=[MessageRole.USER, MessageRole.ASSISTANT])
                .exclude(content="").order_by("-seq").values_list("role", "content")[:HANDOFF_CONTEXT_MESSAGES])
    lines = []
    for role, content in reversed(rows):
        content = " ".join(content.split())
        if len(content) > HANDOFF_MESSAGE_CHARS:
            content = content[:HANDOFF_MESSAGE_CHARS - 1] + "…"
        lines.append(f"{role}: {content}")
    return "\n".join(lines) or "(nothing was said yet)"


def handoff_content(route: HandoffRoute, source_session: Session | None) -> str:
    source = route.source.key if route.source_id else "another agent"
    return (f"[Handoff from {source}]\nReason: {route.reason or '(none given)'}\n\nConversation context:\n"
            f"{_said(source_session)}\n\nPlease greet the user and continue.")


def _conversation_session(agent_id: int, channel: str, chat_id: str) -> Session | None:
    return (Session.objects.select_related("agent")
            .filter(agent_id=agent_id, channel=channel, chat_id=chat_id, parent__isnull=True,
                    origin__in=[SessionOrigin.DIRECT, SessionOrigin.HANDOFF])
            .exclude(status=S.ARCHIVED).order_by("-updated_at").first())


def on_handoff_set(route_id: int) -> None:
    """handoff.set: a hosted target continues its session for the conversation (else starts one, origin handoff)
    with who handed it over, why, and the last things said there."""
    route = HandoffRoute.objects.select_related("target", "source").filter(pk=route_id).first()
    if route is None or not _wakeable(route.target):
        return
    source_session = _conversation_session(route.source_id, route.channel, route.chat_id) if route.source_id \
        else None
    content = handoff_content(route, source_session)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_WAKE_NAMESPACE | (route.target_id & 0xFFFFFFFF)])
        session = _conversation_session(route.target_id, route.channel, route.chat_id)
        if session is not None:
            svc.session_message_post(session=session, content=content)
            return
        svc.session_create(agent=route.target, created_by=route.created_by[:200] or "handoff",
                           user_id=source_session.user_id if source_session else "", channel=route.channel,
                           chat_id=route.chat_id, message=content, origin=SessionOrigin.HANDOFF,
                           ref=f"handoff:{route.pk}")


# --- people stop members, stalls are escalated ------------------------------------------------------------------------
def _active_team_sessions(team_id: int):
    return Session.objects.filter(origin=SessionOrigin.TEAM, ref=team_ref(team_id), status__in=ACTIVE_STATUSES)


def on_member_stop(team_id: int, agent_id: int, actor: str) -> None:
    """member.stop_requested: cancel the member's team session (its lead's session is told it was cancelled)."""
    for session in _active_team_sessions(team_id).filter(agent_id=agent_id).select_related("agent"):
        svc.session_cancel(session=session, actor=actor, reason="stopped_from_board")


def _stuck_after() -> timedelta:
    return timedelta(minutes=settings.TEAM_STUCK_MINUTES)


def member_activity(team_id: int) -> dict[int, dict[str, Any]]:
    """The board's member panel: each member's active team session, how long since its last message, and whether
    that is a stall (longer than the stuck threshold)."""
    now = timezone.now()
    found: dict[int, dict[str, Any]] = {}
    rows = (_active_team_sessions(team_id).annotate(last_at=Max("messages__created_at"))
            .order_by("-updated_at").values("pk", "agent_id", "status", "last_at"))
    for row in rows:
        idle = now - (row["last_at"] or now)
        found.setdefault(row["agent_id"], {"session": str(row["pk"]), "status": row["status"],
                                           "idle_minutes": int(idle.total_seconds() // 60),
                                           "stuck": idle >= _stuck_after()})
    return found


def members_stuck_sweep(now: datetime | None = None) -> int:
    """Escalate to their leads the hosted members' team sessions (running or waiting for an approval) with no new
    message for `GOCLAW_TEAM_STUCK_MINUTES`: an `escalated` board event and a system message to the lead, once per
    stall (a new message starts a new one). Returns how many were escalated."""
    now = now or timezone.now()
    rows = (Session.objects.filter(origin=SessionOrigin.TEAM, status__in=ACTIVE_STATUSES, ref__startswith="team:")
            .annotate(last_at=Max("messages__created_at"), last_seq=Max("messages__seq"))
            .filter(last_at__lt=now - _stuck_after()).select_related("agent", "parent")
            .order_by("last_at")[:STUCK_BATCH])
    escalated = 0
    for session in rows:
        match = _TEAM_REF.match(session.ref)
        if match is None:
            continue
        lead_key = session.parent.key if session.parent_id else ""
        if member_stuck_escalate(team_id=int(match.group(1)), agent=session.agent, run=f"{session.pk}:{session.last_seq}",
                                 idle_minutes=int((now - session.last_at).total_seconds() // 60),
                                 session_key=lead_key):
            escalated += 1
    return escalated


# --- messages that arrive as a run completes ---------------------------------------------------------------------------
def register() -> None:
    """Called from RuntimeAppConfig.ready(): subscribe to teams_app's work announcements."""
    work_subscribe("task.assigned", on_task_assigned)
    work_subscribe("message.sent", on_message_sent)
    work_subscribe("handoff.set", on_handoff_set)
    work_subscribe("member.stop_requested", on_member_stop)
    member_activity_register(member_activity)
