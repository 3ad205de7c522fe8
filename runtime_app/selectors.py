"""Reads of hosted sessions, scoped to who asks: an agent sees its own sessions, a person with the view permission
sees every one (goclaw.authz decides that at the door)."""
from __future__ import annotations

import time
from typing import Any

from django.db.models import QuerySet

from goclaw.errors import NotFound
from runtime_app.choices import MessageRole, SessionStatus
from runtime_app.models import LLMProvider, Session, SessionMessage
from tools_app.models import Agent

WAIT_POLL_SECONDS = 0.1


def llm_provider_of(agent: Agent) -> LLMProvider | None:
    """The enabled LLM provider an agent runs on (its `provider` field names it), or None: an external agent."""
    return LLMProvider.objects.filter(name=agent.provider, enabled=True).first() if agent.provider else None


def session_list_for(agent: Agent | None, *, filters: dict[str, Any] | None = None) -> QuerySet[Session]:
    """Sessions an agent (its own) or staff (agent=None: all) may see, newest activity first, filtered by agent key,
    user, status, channel or parent."""
    qs = Session.objects.select_related("agent")
    if agent is not None:
        qs = qs.filter(agent=agent)
    filters = filters or {}
    if filters.get("agent"):
        qs = qs.filter(agent__key=filters["agent"])
    for name in ("user_id", "status", "channel"):
        if filters.get(name):
            qs = qs.filter(**{name: filters[name]})
    if filters.get("parent"):
        qs = qs.filter(parent_id=filters["parent"])
    return qs.order_by("-updated_at")


def session_get_for(agent: Agent | None, session_id: Any) -> Session:
    session = session_list_for(agent).filter(pk=session_id).first()
    if session is None:
        raise NotFound("no such session", code="session_not_found")
    return session


def session_messages(session: Session, *, after: int = 0, limit: int = 200) -> list[SessionMessage]:
    return list(SessionMessage.objects.filter(session=session, seq__gt=after).order_by("seq")[:limit])


def session_reply_after(session: Session, seq: int) -> SessionMessage | None:
    """The model's last reply after message `seq` (the answer to it), if any."""
    return (SessionMessage.objects.filter(session=session, seq__gt=seq, role=MessageRole.ASSISTANT)
            .order_by("-seq").first())


def session_wait_settled(session: Session, *, seconds: float, past_approval=None) -> Session:
    """Wait (polling one indexed row) until the session stops running: completed, failed, cancelled, or parked on an
    approval (other than `past_approval`, one already decided); or `seconds` pass. Returns the row as it is then."""
    deadline = time.monotonic() + seconds
    while True:
        current = Session.objects.select_related("agent").get(pk=session.pk)
        busy = current.status == SessionStatus.RUNNING or (
            current.status == SessionStatus.WAITING_APPROVAL and past_approval is not None
            and current.waiting_approval_id == past_approval)
        if not busy or time.monotonic() >= deadline:
            return current
        time.sleep(WAIT_POLL_SECONDS)
