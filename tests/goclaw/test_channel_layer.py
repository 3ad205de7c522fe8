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
