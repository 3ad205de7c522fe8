"""One channel-layer subscription per event group per process, shared by every socket of that process in the group.

Channels alone gives each socket its own channel: an event for a group of 1,000 sockets became 1,000 layer messages,
each decoded, dispatched through the consumer's receive loop and JSON-encoded on its own (~0.24 ms of CPU a delivery
here, so the last of 1,000 sockets saw it 100-200 ms late). Here the process's hub is the group's only member from
this process: it receives each event once, encodes its frame once and appends it to each local socket's outbox; a
socket's writer handles its outbox in order, so a slow client delays only itself. The control groups (principal.*)
go through the hub too, into the same outboxes: a socket handles `principal.ended` before any event that came after
it (dropped with the close), as it did when everything came through its own channel.
"""
from __future__ import annotations

import asyncio
import json
import logging
import weakref
from collections import deque
from typing import Protocol

logger = logging.getLogger("goclaw.events")


class Member(Protocol):
    """A socket the hub delivers to (goclaw.consumers.EventsConsumer): an event's text frame, or a control message."""

    def deliver(self, item: str | dict) -> None: ...


def frame(message: dict) -> str:
    """The text frame a socket receives for an `event.message` layer message."""
    return json.dumps({"type": message["event"], "group": message["group"], "payload": message["payload"],
                       "ts": message["ts"]})


class Hub:
    def __init__(self, layer) -> None:
        self.layer = layer
        self.channel: str | None = None
        self.members: dict[str, dict[Member, None]] = {}  # group -> its local sockets, in join order
        self.lock = asyncio.Lock()
        self.reader: asyncio.Task | None = None
        self.renewer: asyncio.Task | None = None

    async def join(self, group: str, member: Member) -> None:
        async with self.lock:
            if self.channel is None:
                self.channel = await self.layer.new_channel()
                self.reader = asyncio.ensure_future(self._read())
                self.renewer = asyncio.ensure_future(self._renew())
            members = self.members.setdefault(group, {})
            if not members:
                await self.layer.group_add(group, self.channel)
            members[member] = None

    def _remove(self, group: str, member: Member) -> bool:
        """Take `member` out of `group`; True when that left the group without local sockets."""
        members = self.members.get(group)
        return members is not None and members.pop(member, 0) is None and not members

    async def leave(self, group: str, member: Member) -> None:
        if self._remove(group, member):
            await self._discard_if_empty(group)

    def forget(self, member: Member, groups) -> None:
        """Drop `member` from `groups` without waiting (a socket that stopped however it stopped); the layer
        memberships of groups left empty are dropped in the background."""
        for group in list(groups):
            if self._remove(group, member):
                asyncio.ensure_future(self._discard_if_empty(group))

    async def _discard_if_empty(self, group: str) -> None:
        """Leave `group` in the layer unless a socket joined it again meanwhile."""
        async with self.lock:
            if self.members.get(group) == {}:
                del self.members[group]
                try:
                    await self.layer.group_discard(group, self.channel)
                except Exception:
                    logger.exception("the event hub could not leave group %s", group)

    async def _read(self) -> None:
        delay = 0.1
        while True:
            try:
                message = await self.layer.receive(self.channel)
                delay = 0.1
            except asyncio.CancelledError:
                raise
            except Exception:  # the layer's connection: keep the subscription, try again
                logger.exception("the event hub could not read from the channel layer")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            members = self.members.get(message.get("group"))
            if members:
                item = frame(message) if message.get("type") == "event.message" else message
                for member in list(members):
                    member.deliver(item)

    async def _renew(self) -> None:
        """Join the hub's groups again at half the layer's group expiry, so a long-lived group is never dropped."""
        renew_every = (getattr(self.layer, "group_expiry", 0) or 0) / 2
        while renew_every:
            await asyncio.sleep(renew_every)
            try:
                async with self.lock:
                    for group in list(self.members):
                        await self.layer.group_add(group, self.channel)
            except Exception:
                logger.exception("renewing the event hub's group memberships failed")


# One hub per event loop and channel layer (a test's loop, a server's loop).
_hubs: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, Hub]]" = weakref.WeakKeyDictionary()


def hub_for(layer) -> Hub:
    per_loop = _hubs.setdefault(asyncio.get_running_loop(), {})
    hub = per_loop.get(id(layer))
    if hub is None or hub.layer is not layer:
        hub = per_loop[id(layer)] = Hub(layer)
    return hub


class Outbox:
    """A socket's items from the hub, handled in order by one writer task at a time; held until `open()` (after the
    socket's welcome) and dropped at `close()`."""

    def __init__(self, handle) -> None:
        self.handle = handle
        self.items: deque[str | dict] = deque()
        self.writer: asyncio.Task | None = None
        self.opened = False
        self.closed = False

    def put(self, item: str | dict) -> None:
        if self.closed:
            return
        self.items.append(item)
        self._start()

    def open(self) -> None:
        self.opened = True
        self._start()

    def close(self) -> None:
        self.closed = True
        self.items.clear()

    def _start(self) -> None:
        if self.opened and self.items and (self.writer is None or self.writer.done()):
            self.writer = asyncio.ensure_future(self._write())

    async def _write(self) -> None:
        while self.items and not self.closed:
            try:
                await self.handle(self.items.popleft())
            except Exception:  # the socket went away meanwhile: its disconnect cleans up
                logger.debug("a WebSocket's outbox stopped", exc_info=True)
                self.close()
                return
