"""Handoff routes (docs/delegation.md, "Handoff"): an agent passes a conversation (channel + chat id) to another
agent it has a link to; channel gateways ask `handoff_route_resolve` which agent receives the next message.
One route per conversation, upserted with INSERT … ON CONFLICT; expired routes are ignored and purged."""
from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from goclaw.events import agent_group, publish
from teams_app.actors import Actor
from teams_app.errors import DelegationNotAllowed, HandoffInvalid
from teams_app.models import HandoffRoute
from teams_app.selectors_delegation import agent_link_for, handoff_route_active, handoff_route_as_dict, link_allows_user
from teams_app.work import work_announce
from tools_app.models import Agent

CHANNEL_MAX = 64
CHAT_ID_MAX = 255
REASON_MAX = 2000
EXPIRES_MAX_MINUTES = 30 * 24 * 60
TEAMS_GROUP = "teams"


def _conversation(channel: Any, chat_id: Any) -> tuple[str, str]:
    if not isinstance(channel, str) or not channel.strip() or not isinstance(chat_id, str) or not chat_id.strip():
        raise HandoffInvalid("A handoff needs the conversation it applies to, and this call has no channel and chat "
                             "id. Hand off from a conversation on a channel.")
    if len(channel) > CHANNEL_MAX or len(chat_id) > CHAT_ID_MAX or "\x00" in channel or "\x00" in chat_id:
        raise HandoffInvalid(f"The channel (at most {CHANNEL_MAX} characters) or chat id (at most {CHAT_ID_MAX}) "
                             "of this call is not usable for a handoff.")
    return channel, chat_id


def _publish(action: str, route: dict[str, Any], actor: Actor, agents: list[str]) -> None:
    """`handoff.changed` after commit to the agents' groups and staff: `route` is the new route (set), `previous`
    the one removed (cleared / expired)."""
    groups = [agent_group(key) for key in dict.fromkeys(agents) if key] + [TEAMS_GROUP]
    publish("handoff.changed", {"action": action, "channel": route["channel"], "chat_id": route["chat_id"],
                                "route": route if action == "set" else None,
                                "previous": None if action == "set" else route, "actor": str(actor)}, groups)


def _may_change(actor: Actor, route: HandoffRoute | None) -> bool:
    """Only the agents of a live handoff (its target, who holds the conversation, or its source) or a person or
    goclaw itself may change it: another agent claiming the same channel + chat id may not take it over."""
    if route is None or not actor.is_agent:
        return True
    return actor.agent_id in (route.target_id, route.source_id)


@transaction.atomic
def handoff_set(*, actor: Actor, source: Agent, target: Agent, channel: str, chat_id: str, reason: str = "",
                user_id: str = "", expires_in_minutes: int | None = None) -> HandoffRoute:
    """Route the conversation (channel, chat_id) to `target`, handed over by `source` through an enabled link
    (either direction when bidirectional) that allows `user_id`. Replaces the conversation's route. A hosted target
    is handed the conversation at once (its first message: who handed it over, why, and what was said)."""
    channel, chat_id = _conversation(channel, chat_id)
    if not isinstance(reason, str) or len(reason) > REASON_MAX or "\x00" in reason:
        raise HandoffInvalid(f"The reason must be text of at most {REASON_MAX} characters.")
    if expires_in_minutes is not None and (isinstance(expires_in_minutes, bool) or not isinstance(expires_in_minutes, int)
                                           or not 1 <= expires_in_minutes <= EXPIRES_MAX_MINUTES):
        raise HandoffInvalid(f"expires_in_minutes must be a whole number from 1 to {EXPIRES_MAX_MINUTES}.")
    if target.pk == source.pk:
        raise HandoffInvalid("You cannot hand a conversation off to yourself.")
    if not target.enabled:
        raise HandoffInvalid(f"Agent {target.key} is disabled and cannot take the conversation.")
    link = agent_link_for(source, target)
    if link is None:
        raise DelegationNotAllowed(f"You have no link to agent {target.key}, so you cannot hand off to it. "
                                   "DELEGATION.md lists the agents you are linked to.")
    if not link_allows_user(link, user_id):
        raise DelegationNotAllowed(f"Your link to agent {target.key} does not allow handing off this user's "
                                   "conversation.")
    now = timezone.now()
    current = (HandoffRoute.objects.select_for_update(of=("self",)).select_related("target", "source")
               .filter(channel=channel, chat_id=chat_id).first())
    live = current if current and (current.expires_at is None or current.expires_at > now) else None
    if not _may_change(actor, live):
        raise DelegationNotAllowed(f"This conversation is handed off to {live.target.key}; only that agent (or the "
                                   "one that handed it off) can hand it on.")
    expires_at = now + timedelta(minutes=expires_in_minutes) if expires_in_minutes else None
    # One statement, so a concurrent first handoff of the same conversation updates instead of failing.
    HandoffRoute.objects.bulk_create(
        [HandoffRoute(channel=channel, chat_id=chat_id, target=target, source=source, reason=reason,
                      created_by=str(actor), created_at=now, expires_at=expires_at)],
        update_conflicts=True, unique_fields=["channel", "chat_id"],
        update_fields=["target", "source", "reason", "created_by", "created_at", "expires_at"])
    route = HandoffRoute.objects.select_related("target", "source").get(channel=channel, chat_id=chat_id)
    previous = live.target.key if live else ""
    _publish("set", handoff_route_as_dict(route), actor, [source.key, target.key, previous])
    work_announce("handoff.set", route_id=route.pk)
    return route


@transaction.atomic
def handoff_clear(*, actor: Actor, channel: str, chat_id: str) -> bool:
    """Remove the conversation's route (the next message goes to the channel's usual agent). False when there
    was none. An agent may clear only a handoff it is part of."""
    channel, chat_id = _conversation(channel, chat_id)
    route = (HandoffRoute.objects.select_for_update(of=("self",)).select_related("target", "source")
             .filter(channel=channel, chat_id=chat_id).first())
    if route is None:
        return False
    expired = route.expires_at is not None and route.expires_at <= timezone.now()
    if not expired and not _may_change(actor, route):
        raise DelegationNotAllowed(f"This conversation is handed off to {route.target.key}; only that agent (or the "
                                   "one that handed it off) can clear the handoff.")
    data = handoff_route_as_dict(route)
    HandoffRoute.objects.filter(pk=route.pk).delete()
    if expired:
        return False
    _publish("cleared", data, actor, [data["agent"], data["from_agent"]])
    return True


@transaction.atomic
def handoff_clear_route(*, actor: Actor, route: HandoffRoute) -> bool:
    """Remove one stored route (the admin's clear action; people and goclaw only)."""
    return handoff_clear(actor=actor, channel=route.channel, chat_id=route.chat_id)


@transaction.atomic
def handoff_routes_purge_expired(*, now: datetime | None = None, channel: str | None = None,
                                 chat_id: str | None = None) -> int:
    """Delete expired routes (all of them, or one conversation's) and tell their agents; returns how many."""
    now = now or timezone.now()
    expired = HandoffRoute.objects.select_related("target", "source").filter(expires_at__lte=now)
    if channel is not None:
        expired = expired.filter(channel=channel, chat_id=chat_id)
    rows = list(expired.select_for_update(of=("self",), skip_locked=True))
    if not rows:
        return 0
    deleted, _ = HandoffRoute.objects.filter(Q(pk__in=[r.pk for r in rows]), expires_at__lte=now).delete()
    for route in rows:
        data = handoff_route_as_dict(route)
        _publish("expired", data, Actor.system("handoff expiry"), [data["agent"], data["from_agent"]])
    return deleted


def handoff_route_resolve(*, channel: str, chat_id: str) -> HandoffRoute | None:
    """Which route decides the conversation's next message (None: the channel's usual agent). Purges the
    conversation's expired route on the way."""
    now = timezone.now()
    route = handoff_route_active(channel, chat_id, now)
    if route is None:
        handoff_routes_purge_expired(now=now, channel=channel, chat_id=chat_id)
    return route
