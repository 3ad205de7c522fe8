"""The PostgreSQL channel layer's one-statement group sends keep the order events were published in: a board that
receives `commented`, `failed`, `escalated` in another order would show a task in a state it already left."""
import pytest

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


async def test_a_batch_sent_to_several_groups_reaches_a_socket_in_publish_order():
    import channels_postgres.db

    from goclaw.channel_layer import FastGroupSendPostgresChannelLayer
    from tests.servers import DaphneProcess

    config = DaphneProcess.channel_layers()["default"]["CONFIG"]
    layer = FastGroupSendPostgresChannelLayer(**config)
    try:
        channel = await layer.new_channel()
        for group in ("team.7", "teams", "agent.worker"):
            await layer.group_add(group, channel)
        await layer.group_add("teams", channel)  # joined twice: still one copy of each message
        batch = [(group, {"type": "event.message", "seq": n, "group": group})
                 for n in range(60) for group in ("team.7", "teams", "agent.worker", "nobody.listens")]
        await layer.group_send_many(batch)
        received = [await layer.receive(channel) for _ in range(180)]
        expected = [(n, g) for n in range(60) for g in ("team.7", "teams", "agent.worker")]
        assert [(m["seq"], m["group"]) for m in received] == expected
    finally:
        if channels_postgres.db.connection_pool is not None:
            await channels_postgres.db.connection_pool.close()
            channels_postgres.db.connection_pool = None


async def test_the_listener_reconnects_after_losing_its_connection_and_loses_or_repeats_nothing():
    # What a PostgreSQL restart does to daphne's listener and to a publisher's pooled connection: they end. Sockets
    # stay open; they must keep receiving, including what was sent while the listener was away, and nothing twice.
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
        await layer.group_add("watchers", channel)
        await layer.group_send("watchers", {"type": "event.message", "n": 1})
        assert (await asyncio.wait_for(layer.receive(channel), 10))["n"] == 1  # the listener is up
        pool = await layer.django_db.get_db_pool(db_params=layer.django_db.db_params)
        async with pool.connection() as pooled:  # the connection group sends go out on
            sender = pooled.info.backend_pid
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as admin:
            killed = await (await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND (pid = %s "
                "OR query LIKE 'SELECT id, channel, message, extract(epoch FROM expire)%%')",  # the listener's last
                (sender,))).fetchall()
            assert len(killed) == 2 and all(ok for (ok,) in killed)
        await layer.group_send("watchers", {"type": "event.message", "n": 2})  # while it reconnects
        received = [(await asyncio.wait_for(layer.receive(channel), 15))["n"]]
        await layer.group_send("watchers", {"type": "event.message", "n": 3})  # after
        received.append((await asyncio.wait_for(layer.receive(channel), 15))["n"])
        with pytest.raises(asyncio.TimeoutError):  # and nothing a second time
            await asyncio.wait_for(layer.receive(channel), 1.5)
        assert received == [2, 3]
    finally:
        if channels_postgres.db.connection_pool is not None:
            await channels_postgres.db.connection_pool.close()
            channels_postgres.db.connection_pool = None


async def test_sockets_that_start_receiving_together_each_get_every_message_once():
    # Sockets opening at the same moment each call receive() before the process's listener has connected; each such
    # call used to start a listener of its own, and every listener handed out every message (events 2-8 times).
    import asyncio

    import channels_postgres.db

    from goclaw.channel_layer import FastGroupSendPostgresChannelLayer
    from tests.servers import DaphneProcess

    config = DaphneProcess.channel_layers()["default"]["CONFIG"]
    layer = FastGroupSendPostgresChannelLayer(**config)
    try:
        channels = [await layer.new_channel() for _ in range(20)]
        for channel in channels:
            await layer.group_add("crowd", channel)
        first = [asyncio.ensure_future(layer.receive(channel)) for channel in channels]  # all before any listens
        await asyncio.sleep(0)
        await layer.group_send("crowd", {"type": "event.message", "n": 1})
        assert [m["n"] for m in await asyncio.wait_for(asyncio.gather(*first), 15)] == [1] * 20
        await layer.group_send("crowd", {"type": "event.message", "n": 2})
        assert [m["n"] for m in await asyncio.wait_for(
            asyncio.gather(*(layer.receive(channel) for channel in channels)), 15)] == [2] * 20
        with pytest.raises(asyncio.TimeoutError):  # and no socket gets either a second time
            await asyncio.wait_for(asyncio.gather(*(layer.receive(channel) for channel in channels)), 1.5)
    finally:
        if channels_postgres.db.connection_pool is not None:
            await channels_postgres.db.connection_pool.close()
            channels_postgres.db.connection_pool = None
