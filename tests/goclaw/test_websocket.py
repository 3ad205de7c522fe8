import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import transaction

from goclaw import events
from goclaw.asgi import application

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


@database_sync_to_async
def _agent_and_token(key="ws-agent"):
    from tests.factories import make_agent
    from tools_app.services.agents import token_issue

    agent = make_agent(key=key)
    return agent, token_issue(agent=agent)[1]


async def _connect(path, headers=None):
    communicator = WebsocketCommunicator(application, path, headers=headers or [])
    connected, code = await communicator.connect()
    return communicator, connected, code


async def test_connection_without_credentials_is_closed_with_4401():
    communicator, connected, code = await _connect("/ws/events/")
    assert not connected and code == 4401


async def test_connection_with_bad_token_is_closed_with_4401():
    await _agent_and_token()
    communicator, connected, code = await _connect("/ws/events/", [(b"authorization", b"Bearer gclw_bad_token")])
    assert not connected and code == 4401


async def test_agent_connects_with_header_and_joins_its_own_group():
    agent, token = await _agent_and_token()
    communicator, connected, _ = await _connect("/ws/events/", [(b"authorization", f"Bearer {token}".encode())])
    assert connected
    welcome = await communicator.receive_json_from()
    assert welcome["groups"] == [f"agent.{agent.key}"]
    await communicator.send_json_to({"action": "subscribe", "group": "approvals"})
    assert (await communicator.receive_json_from())["code"] == "permission_denied"
    await communicator.disconnect()


async def test_agent_connects_with_query_token_and_receives_committed_events_only():
    agent, token = await _agent_and_token()
    communicator, connected, _ = await _connect(f"/ws/events/?token={token}")
    assert connected
    await communicator.receive_json_from()

    @database_sync_to_async
    def publish_rolled_back_then_committed():
        try:
            with transaction.atomic():
                events.publish("test.rolled_back", {"n": 1}, [f"agent.{agent.key}"])
                raise RuntimeError("roll back")
        except RuntimeError:
            pass
        with transaction.atomic():
            events.publish("test.committed", {"n": 2}, [f"agent.{agent.key}"])

    await publish_rolled_back_then_committed()
    message = await communicator.receive_json_from(timeout=3)
    assert message["type"] == "test.committed" and message["payload"] == {"n": 2}
    assert await communicator.receive_nothing(timeout=0.3)
    await communicator.disconnect()


async def test_events_of_other_agents_are_not_delivered():
    agent, token = await _agent_and_token("mine")
    other, _ = await _agent_and_token("other")
    communicator, connected, _ = await _connect(f"/ws/events/?token={token}")
    await communicator.receive_json_from()
    await database_sync_to_async(events.publish)("test.private", {}, [f"agent.{other.key}"])
    assert await communicator.receive_nothing(timeout=0.3)
    await communicator.disconnect()


async def test_staff_session_from_allowed_origin_may_join_a_group_it_holds_the_permission_of(client=None):
    from django.test import Client

    from tests.factories import make_person

    @database_sync_to_async
    def session_cookie():
        make_person("tools_app.view_approvalrequest", username="ops", password="pw-ops-12345")
        c = Client()
        c.login(username="ops", password="pw-ops-12345")
        return c.cookies["sessionid"].value

    cookie = await session_cookie()
    headers = [(b"cookie", f"sessionid={cookie}".encode()), (b"origin", b"http://127.0.0.1:8000")]
    communicator, connected, _ = await _connect("/ws/events/", headers)
    assert connected
    assert (await communicator.receive_json_from())["principal"] == "staff:ops"
    await communicator.send_json_to({"action": "subscribe", "group": "approvals"})
    assert (await communicator.receive_json_from())["type"] == "subscribed"
    await database_sync_to_async(events.publish)("approval.requested", {"id": 1}, ["approvals"])
    assert (await communicator.receive_json_from(timeout=3))["type"] == "approval.requested"
    await communicator.disconnect()

    # The same cookie from a foreign origin is not a staff login (cross-site WebSocket hijacking).
    foreign = [(b"cookie", f"sessionid={cookie}".encode()), (b"origin", b"https://evil.example")]
    _, connected, code = await _connect("/ws/events/", foreign)
    assert not connected and code == 4401


async def test_garbage_messages_get_error_events_and_the_socket_stays_open():
    agent, token = await _agent_and_token("garbage")
    communicator, connected, _ = await _connect(f"/ws/events/?token={token}")
    assert connected
    await communicator.receive_json_from()
    await communicator.send_to(text_data="{not json")
    assert (await communicator.receive_json_from())["code"] == "malformed_json"
    for payload in ([1, 2], "text", {"action": "subscribe"}, {"action": "subscribe", "group": 5}, {"action": "explode"}):
        await communicator.send_json_to(payload)
        assert (await communicator.receive_json_from())["type"] == "error"
    await communicator.send_json_to({"action": "ping"})
    assert (await communicator.receive_json_from())["type"] == "pong"
    await communicator.disconnect()


async def test_the_sockets_of_one_process_share_one_layer_subscription_per_group():
    # One event to a group of many sockets is one layer message for the process, encoded once (goclaw.fanout).
    from channels.layers import get_channel_layer

    agent, token = await _agent_and_token()
    sockets = []
    for _ in range(3):
        communicator, connected, _ = await _connect("/ws/events/", [(b"authorization", f"Bearer {token}".encode())])
        assert connected and (await communicator.receive_json_from())["type"] == "welcome"
        sockets.append(communicator)
    layer = get_channel_layer()
    group = f"agent.{agent.key}"
    assert len(layer.groups[group]) == 1  # the process's hub, not three channels

    await database_sync_to_async(events.publish)("test.shared", {"n": 1}, [group])
    for communicator in sockets:
        event = await communicator.receive_json_from(timeout=5)
        assert (event["type"], event["payload"], event["group"]) == ("test.shared", {"n": 1}, group)

    await sockets[0].disconnect()
    await database_sync_to_async(events.publish)("test.shared", {"n": 2}, [group])
    for communicator in sockets[1:]:
        assert (await communicator.receive_json_from(timeout=5))["payload"] == {"n": 2}
    assert await sockets[0].receive_nothing(timeout=0.2)
    for communicator in sockets[1:]:
        await communicator.disconnect()
    assert not layer.groups.get(group)  # the last socket gone, the process leaves the group


async def test_the_hub_keeps_its_groups_past_the_layers_group_expiry():
    # A group quiet for longer than the layer's group expiry (a day by default) still hears its next event.
    import asyncio

    from channels.layers import InMemoryChannelLayer

    from goclaw.fanout import Hub

    layer, received = InMemoryChannelLayer(group_expiry=1), []

    class Socket:
        def deliver(self, item):
            received.append(item)

    hub = Hub(layer)
    await hub.join("agent.quiet", Socket())
    await asyncio.sleep(2.5)
    await layer.group_send("agent.quiet", events._message("test.late", {"n": 1}, "agent.quiet"))
    for _ in range(50):
        if received:
            break
        await asyncio.sleep(0.05)
    assert [json.loads(item)["type"] for item in received] == ["test.late"]
    hub.reader.cancel()
    hub.renewer.cancel()
