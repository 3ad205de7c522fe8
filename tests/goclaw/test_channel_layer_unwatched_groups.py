"""Most tool calls publish to groups nobody is watching: the PostgreSQL channel layer's batch send serializes and
stores only the messages of groups that have a member, and still delivers every message of those."""
import pytest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


async def new_rows_since(db, last_id: int) -> list[str]:
    """The channels of the message rows stored after `last_id`."""
    from channels_postgres.db import MESSAGE_TABLE
    from psycopg import sql

    cursor = await db.execute(sql.SQL("SELECT channel FROM {} WHERE id > %s ORDER BY id").format(
        sql.Identifier(MESSAGE_TABLE)), (last_id,))
    return [channel for (channel,) in await cursor.fetchall()]


async def last_message_id(db) -> int:
    from channels_postgres.db import MESSAGE_TABLE
    from psycopg import sql

    cursor = await db.execute(sql.SQL("SELECT coalesce(max(id), 0) FROM {}").format(sql.Identifier(MESSAGE_TABLE)))
    return (await cursor.fetchone())[0]


async def test_a_batch_reaches_a_watched_group_and_stores_nothing_for_a_group_nobody_is_in():
    import asyncio

    import channels_postgres.db
    import psycopg

    from goclaw.channel_layer import FastGroupSendPostgresChannelLayer
    from tests.servers import DaphneProcess

    config = DaphneProcess.channel_layers()["default"]["CONFIG"]
    layer = FastGroupSendPostgresChannelLayer(**config)
    conninfo = psycopg.conninfo.make_conninfo(conninfo="", **layer.db_params)
    try:
        channel = await layer.new_channel()
        await layer.group_add("watched", channel)
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as db:
            before = await last_message_id(db)
            await layer.group_send_many([
                ("watched", {"type": "event.message", "n": 1}),
                # A message the layer could not even serialize (msgpack takes no object()): sent to a group nobody
                # is in, it is never serialized, so the batch goes out without error.
                ("nobody.listens", {"type": "event.message", "n": 2, "unsendable": object()}),
                ("watched", {"type": "event.message", "n": 3}),
            ])
            assert await new_rows_since(db, before) == [channel, channel]  # one row per message that has a reader

            before = await last_message_id(db)
            await layer.group_send_many([("nobody.listens", {"type": "event.message", "n": 4}),
                                         ("nor.here", {"type": "event.message", "n": 5})])
            assert await new_rows_since(db, before) == []  # a batch for unwatched groups only stores nothing
        received = [(await asyncio.wait_for(layer.receive(channel), 10))["n"] for _ in range(2)]
        assert received == [1, 3]
    finally:
        if channels_postgres.db.connection_pool is not None:
            await channels_postgres.db.connection_pool.close()
            channels_postgres.db.connection_pool = None
