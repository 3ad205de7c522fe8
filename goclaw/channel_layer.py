"""The PostgreSQL channel layer with one-statement group sends.

channels_postgres' group_send runs two SELECTs for the group's channels and then one INSERT per channel
(each message row fires the NOTIFY trigger). Every tool call publishes an event, usually to groups nobody is
watching, so that cost sat on the hot path. Here one `INSERT … SELECT` sends a whole batch of
(group, message) pairs in a single round trip and writes nothing for empty groups.
"""
from __future__ import annotations

from datetime import timedelta

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


class FastGroupSendPostgresChannelLayer(PostgresChannelLayer):
    async def group_send(self, group: str, message: dict) -> None:
        await self.group_send_many([(group, message)])

    async def group_send_many(self, items: list[tuple[str, dict]]) -> None:
        for group, _ in items:
            assert self.require_valid_group_name(group), "Group name not valid"
        keys = [self._group_key(group) for group, _ in items]
        payloads = [self.serialize(message) for _, message in items]
        pool = await self.django_db.get_db_pool(db_params=self.django_db.db_params)
        async with pool.connection() as conn:
            await conn.execute(_GROUP_SEND_MANY_SQL, (utc_now() + timedelta(seconds=self.expiry), keys, payloads))
