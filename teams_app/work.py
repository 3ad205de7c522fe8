"""Work announced to whatever runs agents. teams_app never imports the runtime (runtime_app sits above it): when a
delegation is requested, a task assigned, a mailbox message sent or a conversation handed off, the service announces
it here, after its transaction commits, and the runtime (subscribed from its AppConfig.ready()) wakes the hosted
agent concerned. External agents see the same rows through their tools and API, as before."""
from __future__ import annotations

import logging
import threading
from typing import Any, Callable

from django.db import transaction

logger = logging.getLogger("goclaw.teams")

# event -> what its subscribers receive (keyword arguments, ids only: a subscriber reads the rows it needs)
EVENTS = {
    "delegation.requested": ("delegation_id",),
    "delegation.finished": ("delegation_id",),   # completed, failed or cancelled
    "task.assigned": ("task_id",),
    "message.sent": ("message_id",),
    "handoff.set": ("route_id",),
    "member.stop_requested": ("team_id", "agent_id", "actor"),  # a person pressed Stop on the board (actor: label)
}
_subscribers: dict[str, list[Callable[..., None]]] = {}
_lock = threading.Lock()


def work_subscribe(event: str, handler: Callable[..., None]) -> None:
    """Call `handler(**ids)` after each commit that announces `event` (apps subscribe from AppConfig.ready())."""
    if event not in EVENTS:
        raise ValueError(f"unknown work event {event!r}; one of {', '.join(EVENTS)}")
    with _lock:
        handlers = _subscribers.setdefault(event, [])
        if handler not in handlers:
            handlers.append(handler)


def work_announce(event: str, **ids: Any) -> None:
    """Tell the subscribers of `event` once the current transaction commits (never if it rolls back). A subscriber's
    failure is logged and never undoes or fails the announcing write."""
    if set(ids) != set(EVENTS[event]):
        raise TypeError(f"{event} announces {', '.join(EVENTS[event])}")
    with _lock:
        handlers = list(_subscribers.get(event, ()))
    for handler in handlers:
        transaction.on_commit(lambda handler=handler: _call(event, handler, ids))


def _call(event: str, handler: Callable[..., None], ids: dict[str, Any]) -> None:
    try:
        handler(**ids)
    except Exception:
        logger.exception("work event %s: subscriber %s failed", event, getattr(handler, "__qualname__", handler))


# --- what runs each member's work now (the board's member panel) ---------------------------------------------------
_activity: list[Callable[[int], dict[int, dict[str, Any]]]] = []


def member_activity_register(provider: Callable[[int], dict[int, dict[str, Any]]]) -> None:
    """`provider(team_id)` answers, by agent id, the run working for that member now: {"session", "status",
    "idle_minutes", "stuck"} (the runtime registers one from its AppConfig.ready())."""
    with _lock:
        if provider not in _activity:
            _activity.append(provider)


def member_activity(team_id: int) -> dict[int, dict[str, Any]]:
    """The members of `team_id` that something runs right now, by agent id ({} when nothing runs agents)."""
    with _lock:
        providers = list(_activity)
    found: dict[int, dict[str, Any]] = {}
    for provider in providers:
        try:
            found.update(provider(team_id))
        except Exception:
            logger.exception("member activity provider %s failed", getattr(provider, "__qualname__", provider))
    return found
