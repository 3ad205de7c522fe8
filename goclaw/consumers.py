"""/ws/events/: realtime events for agents (their own group) and staff (any group they subscribe to)."""
from __future__ import annotations

import re
from urllib.parse import parse_qs, urlparse

from channels.auth import AuthMiddleware
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.middleware import BaseMiddleware
from channels.sessions import CookieMiddleware, SessionMiddleware

from goclaw.events import agent_group

STAFF_GROUP_RE = re.compile(r"^(approvals|invocations|agent\.[a-z0-9_-]{1,64}|team\.[0-9a-zA-Z_-]{1,64})$")
CLOSE_UNAUTHENTICATED = 4401


@database_sync_to_async
def _agent_for_token(raw: str):
    from tools_app.services.agents import token_authenticate

    token = token_authenticate(raw)
    return token.agent if token else None


class _TokenMiddleware(BaseMiddleware):
    """Puts `scope["agent"]` from `Authorization: Bearer …` or `?token=…` (None when absent or invalid)."""

    async def __call__(self, scope, receive, send):
        from tools_app.authentication import bearer_from_header

        raw = None
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                raw = bearer_from_header(value.decode("latin-1"))
        if raw is None:
            raw = (parse_qs(scope.get("query_string", b"").decode()).get("token") or [None])[0]
        scope = dict(scope, agent=await _agent_for_token(raw) if raw else None)
        return await super().__call__(scope, receive, send)


def TokenOrSessionAuthMiddleware(inner):
    return CookieMiddleware(SessionMiddleware(AuthMiddleware(_TokenMiddleware(inner))))


def _origin_allowed(scope) -> bool:
    from django.conf import settings
    from django.http.request import validate_host

    for name, value in scope.get("headers", []):
        if name == b"origin":
            host = urlparse(value.decode("latin-1")).hostname or ""
            return validate_host(host, settings.ALLOWED_HOSTS)
    return False


class EventsConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        self.agent = self.scope.get("agent")
        user = self.scope.get("user")
        # A session cookie counts only from an allowed Origin (cross-site WebSocket hijacking); tokens need none.
        self.is_staff = bool(user is not None and user.is_authenticated and user.is_staff and user.is_active
                             and _origin_allowed(self.scope))
        if self.agent is None and not self.is_staff:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.groups_joined: set[str] = set()
        await self.accept()
        if self.agent is not None:
            await self._join(agent_group(self.agent.key))
        await self.send_json({"type": "welcome", "groups": sorted(self.groups_joined),
                              "principal": f"agent:{self.agent.key}" if self.agent else f"staff:{user.username}"})

    async def _join(self, group: str) -> None:
        await self.channel_layer.group_add(group, self.channel_name)
        self.groups_joined.add(group)

    def _may_join(self, group: str) -> bool:
        if self.agent is not None:
            return group == agent_group(self.agent.key)
        return bool(STAFF_GROUP_RE.match(group))

    async def receive_json(self, content, **kwargs):
        action = content.get("action") if isinstance(content, dict) else None
        group = content.get("group") if isinstance(content, dict) else None
        if action == "ping":
            await self.send_json({"type": "pong"})
        elif action in ("subscribe", "unsubscribe") and isinstance(group, str):
            if not self._may_join(group):
                await self.send_json({"type": "error", "code": "permission_denied", "message": f"may not join {group!r}"})
            elif action == "subscribe":
                await self._join(group)
                await self.send_json({"type": "subscribed", "group": group})
            else:
                await self.channel_layer.group_discard(group, self.channel_name)
                self.groups_joined.discard(group)
                await self.send_json({"type": "unsubscribed", "group": group})
        else:
            await self.send_json({"type": "error", "code": "bad_request",
                                  "message": "send {\"action\": \"subscribe\"|\"unsubscribe\", \"group\": …} or {\"action\": \"ping\"}"})

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        try:
            await super().receive(text_data=text_data, bytes_data=bytes_data, **kwargs)
        except ValueError:
            await self.send_json({"type": "error", "code": "malformed_json", "message": "messages must be JSON"})

    async def disconnect(self, code):
        for group in getattr(self, "groups_joined", set()):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def event_message(self, message):
        await self.send_json({"type": message["event"], "group": message["group"], "payload": message["payload"], "ts": message["ts"]})
