"""/ws/events/: realtime events for agents (their own group) and staff (the groups apps open to them).

A socket is bound to its principal: an agent token, or a staff user's session. Each socket also joins that
principal's control groups (`goclaw.events.principal_group`); whatever ends the principal's right, in any
process, sends `principal.ended` (close) or `principal.changed` (re-check) there after commit, and the socket
closes with 4401. The socket also re-checks itself at the token's or session's expiry and every
RECHECK_SECONDS, for changes that send no signal (queryset `update()`, raw SQL, a lost layer message).
Which tokens are valid and which groups staff may join, apps register in `goclaw.realtime` (goclaw imports no app).
A person joins a group only holding its view permissions (goclaw.authz), checked on a fresh read of the account when
subscribing and at every re-check: a person who lost them leaves the group (an `unsubscribed` message says why), no
later than the re-check that notices the principal ended would close the socket.
Groups are joined through this process's hub (`goclaw.fanout`): one layer subscription per group, each event
encoded once, then handed to each socket's outbox in order with the control messages.
"""
from __future__ import annotations

import asyncio
import json
import logging
import random
from datetime import datetime
from importlib import import_module
from urllib.parse import parse_qs, urlparse

from channels.auth import AuthMiddleware
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.middleware import BaseMiddleware
from channels.sessions import CookieMiddleware, SessionMiddleware

from goclaw import realtime
from goclaw.api import bearer_from_header
from goclaw.events import agent_group, principal_group, session_principal_group
from goclaw.fanout import Outbox, hub_for

CLOSE_UNAUTHENTICATED = 4401

logger = logging.getLogger("goclaw.consumers")


_token_for = database_sync_to_async(realtime.websocket_token_authenticate)


def _staff_session_state(session_key: str, user_id) -> tuple[bool, datetime | None]:
    """Whether `session_key` still logs `user_id` in as active staff, and when the session expires.
    Django's own session checks (auth hash, backend, is_active) without their side effects (flush, cycle_key)."""
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY, load_backend
    from django.utils import timezone
    from django.utils.crypto import constant_time_compare

    store_class = import_module(settings.SESSION_ENGINE).SessionStore
    store = store_class(session_key)
    expires = None
    if hasattr(store_class, "get_model_class"):  # database-backed: read the row, its expiry included
        row = (store_class.get_model_class().objects.filter(session_key=session_key, expire_date__gt=timezone.now())
               .values_list("session_data", "expire_date").first())
        if row is None:
            return False, None
        data, expires = store.decode(row[0]), row[1]
    else:
        data = store.load()
    backend_path = data.get(BACKEND_SESSION_KEY)
    if str(data.get(SESSION_KEY)) != str(user_id) or backend_path not in settings.AUTHENTICATION_BACKENDS:
        return False, None
    user = load_backend(backend_path).get_user(user_id)
    session_hash = data.get(HASH_SESSION_KEY) or ""
    if user is None or not (user.is_active and user.is_staff) or not session_hash:
        return False, None
    hashes = [user.get_session_auth_hash(), *user.get_session_auth_fallback_hash()]
    return any(constant_time_compare(session_hash, h) for h in hashes), expires


def _person(user_id):
    """The account as it is now (Django caches permissions on the user object: the socket's scope user is stale)."""
    from django.contrib.auth import get_user_model

    return get_user_model()._default_manager.filter(pk=user_id).first()


@database_sync_to_async
def _person_may_join(user_id, group: str) -> bool:
    if realtime.websocket_staff_group_permissions(group) is None:
        return False  # no rule opens it: no need to read the account
    return realtime.websocket_staff_may_join(group, _person(user_id))


@database_sync_to_async
def _groups_lost(user_id, groups: list[str]) -> list[str]:
    """Of `groups` (staff groups the socket joined), those the person may no longer join."""
    person = _person(user_id)
    return [group for group in groups if not realtime.websocket_staff_may_join(group, person)]


@database_sync_to_async
def _principal_state(principal: tuple) -> tuple[bool, datetime | None]:
    """(still allowed, when to look again at the latest) for ("token", id) or ("session", user_id, session_key)."""
    if principal[0] == "token":
        token = realtime.websocket_token_active(principal[1])
        return token is not None, token.expires_at if token is not None else None
    return _staff_session_state(principal[2], principal[1])


class _TokenMiddleware(BaseMiddleware):
    """Puts `scope["agent"]` and `scope["agent_token"]` from `Authorization: Bearer …` or `?token=…`
    (None when absent or invalid)."""

    async def __call__(self, scope, receive, send):
        raw = None
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                raw = bearer_from_header(value.decode("latin-1"))
        if raw is None:
            raw = (parse_qs(scope.get("query_string", b"").decode()).get("token") or [None])[0]
        token = await _token_for(raw) if raw else None
        scope = dict(scope, agent=token.agent if token else None, agent_token=token)
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
    # The safety net: one indexed query (token) or two (session), ~1 ms measured, per socket per period;
    # 1,000 open sockets cost ~33 checks/s. Checking before every event would multiply that by the event rate.
    RECHECK_SECONDS = 30.0
    RETRY_SECONDS = 1.0  # after a failed re-check (database unreachable): the socket stays open, we look again soon
    ended = True  # live only from a successful authentication until its end

    async def __call__(self, scope, receive, send):
        try:
            await super().__call__(scope, receive, send)
        finally:  # however the consumer stops (disconnect, error, cancellation), its re-check timer stops too,
            self.ended = True  # and the hub forgets it
            self._stop_watching()
            if getattr(self, "outbox", None) is not None:
                self.outbox.close()
                self.hub.forget(self, self.groups_joined)
                self.groups_joined = set()

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
        self.hub = hub_for(self.channel_layer)
        self.outbox = Outbox(self._from_hub)
        self.ended = False
        self.deadline: datetime | None = None
        self._watcher: asyncio.Task | None = None
        if self.agent is not None:
            token = self.scope["agent_token"]
            self.principal: tuple = ("token", token.pk)
            control = [principal_group("token", token.pk), principal_group("agent", self.agent.pk)]
        else:
            session_key = self.scope["session"].session_key
            self.principal = ("session", user.pk, session_key)
            control = [principal_group("user", user.pk), session_principal_group(session_key)]
        for group in control:
            await self._join(group)
        # Checked again only now that the control groups are joined: a revocation committed since the middleware
        # authenticated would otherwise have been sent to nobody.
        if not await self._recheck():  # the check itself failed: do not accept what we could not confirm
            await self._end()
        if self.ended:
            return
        await self.accept()
        self._watch_from(None)
        if self.agent is not None:
            await self._join(agent_group(self.agent.key))
        await self.send_json({"type": "welcome", "groups": sorted(g for g in self.groups_joined if not g.startswith("principal.")),
                              "principal": f"agent:{self.agent.key}" if self.agent else f"staff:{user.username}"})
        self.outbox.open()  # what arrived meanwhile follows the welcome

    async def _join(self, group: str) -> None:
        await self.hub.join(group, self)
        self.groups_joined.add(group)

    async def _leave(self, group: str) -> None:
        self.groups_joined.discard(group)
        await self.hub.leave(group, self)

    def deliver(self, item: str | dict) -> None:
        """From this process's hub (goclaw.fanout): an event's frame, or a control message for the principal."""
        if not self.ended:
            self.outbox.put(item)

    async def _from_hub(self, item: str | dict) -> None:
        if isinstance(item, str):
            if not self.ended:
                await self.send(text_data=item)
        elif item.get("type") == "principal.ended":
            await self.principal_ended(item)
        elif item.get("type") == "principal.changed":
            await self.principal_changed(item)

    async def _may_join(self, group: str) -> bool:
        if self.agent is not None:
            return group == agent_group(self.agent.key)
        return await _person_may_join(self.principal[1], group)

    def _staff_groups(self) -> list[str]:
        """The groups this staff socket subscribed to (not its principal's control groups)."""
        return sorted(g for g in self.groups_joined if not g.startswith("principal."))

    async def receive_json(self, content, **kwargs):
        action = content.get("action") if isinstance(content, dict) else None
        group = content.get("group") if isinstance(content, dict) else None
        if action == "ping":
            await self.send_json({"type": "pong"})
        elif action in ("subscribe", "unsubscribe") and isinstance(group, str):
            if action == "unsubscribe" and group in self.groups_joined and not group.startswith("principal."):
                await self._leave(group)  # leaving needs no permission
                await self.send_json({"type": "unsubscribed", "group": group})
            elif not await self._may_join(group):
                await self.send_json({"type": "error", "code": "permission_denied", "message": f"may not join {group!r}"})
            elif action == "subscribe":
                await self._join(group)
                await self.send_json({"type": "subscribed", "group": group})
            else:
                await self._leave(group)
                await self.send_json({"type": "unsubscribed", "group": group})
        else:
            await self.send_json({"type": "error", "code": "bad_request",
                                  "message": "send {\"action\": \"subscribe\"|\"unsubscribe\", \"group\": …} or {\"action\": \"ping\"}"})

    async def receive(self, text_data=None, bytes_data=None, **kwargs):
        if self.ended:  # frames the client sent before it saw our close
            return
        try:
            await super().receive(text_data=text_data, bytes_data=bytes_data, **kwargs)
        except ValueError:
            await self.send_json({"type": "error", "code": "malformed_json", "message": "messages must be JSON"})

    async def disconnect(self, code):
        self.ended = True
        self._stop_watching()
        await self._leave_all()

    # --- the principal's life ---------------------------------------------------------------------------------

    async def principal_ended(self, message):
        await self._end()

    async def principal_changed(self, message):
        if self.ended:
            return
        deadline = self.deadline
        # Awaited by the socket's outbox writer: events queued behind this message wait for the answer.
        checked = await self._recheck()
        if not self.ended and (not checked or self.deadline != deadline):
            self._watch_from(self.RETRY_SECONDS if not checked else None)

    async def _recheck(self) -> bool:
        """Re-read the principal; end the socket if it lost its right, and leave the staff groups whose permission
        the person lost. False when the check itself failed."""
        try:
            allowed, self.deadline = await _principal_state(self.principal)
            lost = (await _groups_lost(self.principal[1], self._staff_groups())
                    if allowed and self.agent is None and self._staff_groups() else [])
        except Exception:
            logger.exception("re-checking WebSocket principal %s failed", self.principal[:2])
            return False
        if not allowed:
            await self._end()
        elif lost:
            await self._drop_groups(lost)
        return True

    async def _drop_groups(self, groups: list[str]) -> None:
        """Leave groups the person may no longer see, and drop their events still waiting in the outbox (those
        that arrived after the change that triggered this re-check)."""
        for group in groups:
            await self._leave(group)
        dropped = set(groups)
        waiting = list(self.outbox.items)
        self.outbox.items.clear()
        for item in waiting:
            if not (isinstance(item, str) and json.loads(item).get("group") in dropped):
                self.outbox.items.append(item)
        for group in groups:
            await self.send_json({"type": "unsubscribed", "group": group, "code": "permission_denied",
                                  "message": f"this account may no longer see {group!r}"})

    async def _end(self) -> None:
        if self.ended:
            return
        self.ended = True
        self._stop_watching()
        await self.close(code=CLOSE_UNAUTHENTICATED)
        await self._leave_all()

    async def _leave_all(self) -> None:
        outbox = getattr(self, "outbox", None)
        if outbox is not None:
            outbox.close()
        for group in list(getattr(self, "groups_joined", ())):
            await self._leave(group)

    def _watch_from(self, first_delay: float | None) -> None:
        self._stop_watching()
        self._watcher = asyncio.create_task(self._watch(first_delay))

    def _stop_watching(self) -> None:
        watcher = getattr(self, "_watcher", None)
        if watcher is not None and watcher is not asyncio.current_task():
            watcher.cancel()
        self._watcher = None

    async def _watch(self, delay: float | None) -> None:
        """Re-check at the principal's expiry and every RECHECK_SECONDS (jittered so sockets do not move in step).
        (This process's hub renews the group memberships.)"""
        from django.utils import timezone

        while not self.ended:
            if delay is None:
                delay = self.RECHECK_SECONDS * random.uniform(0.9, 1.1)
                if self.deadline is not None:
                    delay = min(delay, max((self.deadline - timezone.now()).total_seconds(), 0.0) + 0.05)
            await asyncio.sleep(delay)
            delay = None if await self._recheck() else self.RETRY_SECONDS
