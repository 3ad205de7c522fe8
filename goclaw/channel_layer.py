"""The PostgreSQL channel layer with one-statement group sends and a listener that survives a lost connection.

channels_postgres' group_send runs two SELECTs for the group's channels and then one INSERT per channel
(each message row fires the NOTIFY trigger). Every tool call publishes an event, usually to groups nobody is
watching, so that cost sat on the hot path. Here one `INSERT … SELECT` sends a whole batch of
(group, message) pairs in a single round trip and writes nothing for empty groups.

Its LISTEN connection ended for good when PostgreSQL restarted (or the connection dropped): the sockets stayed
open and silent. Here the listener reconnects (backing off to 5 s), LISTENs again, and then hands out the stored
messages of this process's channels newer than the last it handed out, so nothing sent meanwhile is lost and
nothing arrives twice.
"""
from __future__ import annotations

import asyncio
import base64
import logging
from datetime import timedelta

import psycopg
from channels_postgres.core import PostgresChannelLayer
from channels_postgres.db import GROUP_CHANNEL_TABLE, MESSAGE_TABLE, utc_now
from psycopg import sql

# Rows are inserted in the batch's order (message ids are the delivery order, so events published one after the other
# in a transaction reach a socket in that order); a channel in the group twice still gets each message once.
_GROUP_SEND_MANY_SQL = sql.SQL(
    "INSERT INTO {messages} (channel, message, expire) "
    "SELECT channel, message, %s FROM (SELECT DISTINCT ON (m.n, g.channel) g.channel, m.message, m.n "
    "FROM unnest(%s::text[], %s::bytea[]) WITH ORDINALITY AS m(group_key, message, n) "
    "JOIN {groups} g ON g.group_key = m.group_key ORDER BY m.n, g.channel) AS ordered ORDER BY n"
).format(messages=sql.Identifier(MESSAGE_TABLE), groups=sql.Identifier(GROUP_CHANNEL_TABLE))


# Which of a batch's groups have a member now (a socket joining after this check did so after the event was sent).
_WATCHED_SQL = sql.SQL("SELECT DISTINCT group_key FROM {groups} WHERE group_key = ANY(%s)").format(
    groups=sql.Identifier(GROUP_CHANNEL_TABLE))


# The stored, unexpired messages of this process's channels newer than the last one handed out (rows stay: other
# processes' messages are theirs, and expired rows are deleted by channels_postgres' own clean-up).
_STORED_SQL = sql.SQL(
    "SELECT id, channel, message, extract(epoch FROM expire)::text FROM {messages} "
    "WHERE id > %s AND channel = ANY(%s) AND expire > now() ORDER BY id"
).format(messages=sql.Identifier(MESSAGE_TABLE))

logger = logging.getLogger("goclaw.events")
RECONNECT_MAX_DELAY = 5.0


class FastGroupSendPostgresChannelLayer(PostgresChannelLayer):
    last_message_id = 0  # the newest stored message this process's listener handed to a channel queue
    _listening_loop = None  # the event loop this process's one listener runs on

    async def listen_to_all_channels(self) -> None:
        """Listen for this process's channels' messages until shut down, reconnecting whenever the connection is
        lost. One listener per loop: channels_postgres starts one for every receive() that comes before the first
        has connected (sockets opening together), and each handed out every message again (events 2-8 times)."""
        loop = asyncio.get_running_loop()
        if self._listening_loop is loop:
            return
        self._listening_loop = loop
        try:
            delay = 0.1
            while True:
                try:
                    await self._listen()
                    return
                except (psycopg.Error, OSError) as exc:
                    logger.warning("channel layer listener lost its connection (%s); reconnecting in %.1f s", exc,
                                   delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECONNECT_MAX_DELAY)
        finally:
            if self._listening_loop is loop:
                self._listening_loop = None

    async def _listen(self) -> None:
        conninfo = psycopg.conninfo.make_conninfo(conninfo="", **self.db_params)
        async with await psycopg.AsyncConnection.connect(conninfo=conninfo, autocommit=True) as connection:
            await connection.execute("LISTEN channels_postgres_messages")
            # LISTEN first, then read what is stored: a message sent in between is in both, handed out once.
            mine = [channel for channel, held in self._channel_advisory_locks.items() if held]
            stored = await connection.execute(_STORED_SQL, (self.last_message_id, mine))
            seen = set()
            for message_id, channel, message, expire in await stored.fetchall():
                seen.add(str(message_id))
                self._hand_out(message_id, channel, f"{message_id}:{channel}:{base64.b64encode(message).decode()}:{expire}")
            self.listener_task_is_running.set()
            async for event in connection.notifies():
                if event.payload == "1:shutdown":
                    self.listener_task_is_running.clear()
                    return
                message_id, channel = event.payload.split(":", 2)[:2]
                if message_id in seen or self._channel_advisory_locks.get(channel, False) is False:
                    continue  # handed out from the table already, or another process's channel
                self._hand_out(int(message_id), channel, event.payload)

    def _hand_out(self, message_id: int, channel: str, payload: str) -> None:
        self.last_message_id = max(self.last_message_id, message_id)
        self._get_or_create_queue(channel).put_nowait(payload)

    async def group_send(self, group: str, message: dict) -> None:
        await self.group_send_many([(group, message)])

    async def group_send_many(self, items: list[tuple[str, dict]]) -> None:
        """Send each (group, message); only the messages of groups that have a member are serialized and sent (most
        tool calls publish to groups nobody watches)."""
        for group, _ in items:
            assert self.require_valid_group_name(group), "Group name not valid"
        keys = [self._group_key(group) for group, _ in items]
        pool = await self.django_db.get_db_pool(db_params=self.django_db.db_params)
        for attempt in (1, 2):
            try:
                async with pool.connection() as conn:
                    cursor = await conn.execute(_WATCHED_SQL, (list(set(keys)),))
                    watched = {row[0] for row in await cursor.fetchall()}
                    if not watched:
                        return
                    sent = [(key, message) for key, (_, message) in zip(keys, items) if key in watched]
                    await conn.execute(_GROUP_SEND_MANY_SQL, (utc_now() + timedelta(seconds=self.expiry),
                                                              [key for key, _ in sent],
                                                              [self.serialize(message) for _, message in sent]))
                return
            except psycopg.OperationalError:
                # A pooled connection PostgreSQL closed (a restart): the pool drops it; the batch goes out once more
                # on a fresh connection rather than being lost.
                if attempt == 2:
                    raise
