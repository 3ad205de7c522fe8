"""A WebSocket lives no longer than its principal's right: whatever ends it closes the socket with 4401, and
nothing is delivered after the close. The receive timeouts below are hang guards kept under the consumer's periodic
re-check, so a close that arrives came from the change's own notice; how fast it comes (the 1 s contract) is
measured by benchmarks/bench_revocation.py."""
import asyncio
import json
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from goclaw import events
from goclaw.asgi import application
from goclaw.consumers import EventsConsumer

pytestmark = [pytest.mark.django_db(transaction=True)]
GUARD = 10.0  # seconds a receive may wait before the test fails (hang guard, not a speed target)
assert GUARD < EventsConsumer.RECHECK_SECONDS * 0.9, "the guard must end before the (jittered) periodic re-check"
ORIGIN = (b"origin", b"http://127.0.0.1:8000")


def _make_agent_and_token(key="rev-agent", agent=None):
    from tests.factories import make_agent
    from tools_app.services.agents import token_issue

    agent = agent or make_agent(key=key)
    token, plain = token_issue(agent=agent)
    return agent, token, plain


_agent_and_token = database_sync_to_async(_make_agent_and_token)


async def _open(path="/ws/events/", headers=()):
    communicator = WebsocketCommunicator(application, path, headers=list(headers))
    connected, code = await communicator.connect()
    assert connected, code
    await communicator.receive_json_from()  # welcome
    return communicator


async def _agent_socket(plain):
    return await _open(f"/ws/events/?token={plain}")


@database_sync_to_async
def _staff_login(username, **flags):
    from tests.factories import make_person

    # may watch approvals (docs/permissions.md): the group these tests subscribe to
    user = make_person("tools_app.view_approvalrequest", username=username, password="pw-staff-12345", **flags)
    browser = Client()
    assert browser.login(username=username, password="pw-staff-12345")
    return user, browser


async def _staff_socket(browser):
    return await _open(headers=[(b"cookie", f"sessionid={browser.cookies['sessionid'].value}".encode()), ORIGIN])


async def _closed_with_4401(communicator, group):
    """The close frame comes (4401); an event published afterwards is not delivered."""
    assert await communicator.receive_output(timeout=GUARD) == {"type": "websocket.close", "code": 4401}
    await database_sync_to_async(events.publish)("test.after_close", {}, [group])
    assert await communicator.receive_nothing(timeout=0.2)
    await communicator.disconnect()
    return True


async def _still_open(communicator, group):
    await database_sync_to_async(events.publish)("test.still_open", {}, [group])
    while (message := await communicator.receive_json_from(timeout=GUARD))["type"] != "test.still_open":
        assert message["type"].startswith("test.")  # earlier test events to the same group, nothing else
    return True


# --- agent tokens ---------------------------------------------------------------------------------------------

@pytest.mark.asyncio
async def test_revoking_a_token_closes_its_sockets_but_not_those_of_the_agents_other_tokens():
    from tools_app.services.agents import token_revoke

    agent, token, plain = await _agent_and_token()
    _, _, other_plain = await _agent_and_token(agent=agent)
    revoked, kept = await _agent_socket(plain), await _agent_socket(other_plain)
    await database_sync_to_async(token_revoke)(token=token)
    assert await _closed_with_4401(revoked, f"agent.{agent.key}")
    assert await _still_open(kept, f"agent.{agent.key}")
    await kept.disconnect()


@pytest.mark.asyncio
async def test_revoke_admin_action_closes_the_socket():
    agent, token, plain = await _agent_and_token()
    socket = await _agent_socket(plain)

    @database_sync_to_async
    def revoke_in_admin():
        admin = Client()
        admin.force_login(get_user_model().objects.create_superuser("boss", password="pw-boss-12345"))
        response = admin.post("/admin/tools_app/agenttoken/", {"action": "revoke", "_selected_action": [token.pk]})
        assert response.status_code == 302

    await revoke_in_admin()
    assert await _closed_with_4401(socket, f"agent.{agent.key}")


@pytest.mark.asyncio
async def test_ticking_revoked_in_the_admin_change_form_closes_the_socket():
    agent, token, plain = await _agent_and_token()
    socket = await _agent_socket(plain)

    @database_sync_to_async
    def save_change_form():
        admin = Client()
        admin.force_login(get_user_model().objects.create_superuser("boss", password="pw-boss-12345"))
        response = admin.post(f"/admin/tools_app/agenttoken/{token.pk}/change/",
                              {"name": token.name, "expires_at_0": "", "expires_at_1": "", "revoked": "on"})
        assert response.status_code == 302, response.content[:2000]

    await save_change_form()
    assert await _closed_with_4401(socket, f"agent.{agent.key}")


@pytest.mark.asyncio
async def test_deleting_a_token_closes_the_socket():
    agent, token, plain = await _agent_and_token()
    socket = await _agent_socket(plain)
    await database_sync_to_async(token.delete)()
    assert await _closed_with_4401(socket, f"agent.{agent.key}")


@pytest.mark.asyncio
async def test_disabling_the_agent_closes_the_sockets_of_all_its_tokens():
    from tools_app.services.agents import agent_update

    agent, _, plain = await _agent_and_token()
    _, _, other_plain = await _agent_and_token(agent=agent)
    sockets = [await _agent_socket(plain), await _agent_socket(other_plain)]
    await database_sync_to_async(agent_update)(agent=agent, enabled=False)
    for socket in sockets:
        assert await _closed_with_4401(socket, f"agent.{agent.key}")


@pytest.mark.asyncio
async def test_deleting_the_agent_closes_the_socket():
    agent, _, plain = await _agent_and_token()
    socket = await _agent_socket(plain)
    await database_sync_to_async(agent.delete)()
    assert await _closed_with_4401(socket, f"agent.{agent.key}")


@pytest.mark.asyncio
async def test_a_token_expiring_closes_the_socket_at_expires_at():
    from tools_app.models import AgentToken

    agent, token, plain = await _agent_and_token()
    await database_sync_to_async(AgentToken.objects.filter(pk=token.pk).update)(expires_at=timezone.now() + timedelta(seconds=1))
    socket = await _agent_socket(plain)
    assert await socket.receive_nothing(timeout=0.5)  # not before its time
    assert await _closed_with_4401(socket, f"agent.{agent.key}")


@pytest.mark.asyncio
async def test_moving_expiry_closer_in_the_admin_reschedules_the_close():
    agent, token, plain = await _agent_and_token()
    socket = await _agent_socket(plain)
    token.expires_at = timezone.now() + timedelta(seconds=0.5)
    await database_sync_to_async(token.save)()
    assert await _closed_with_4401(socket, f"agent.{agent.key}")


@pytest.mark.asyncio
async def test_changes_that_keep_the_right_keep_the_socket_open():
    from tools_app.services.agents import agent_update

    agent, token, plain = await _agent_and_token()
    socket = await _agent_socket(plain)
    await database_sync_to_async(agent_update)(agent=agent, display_name="renamed")
    token.name = "renamed"
    await database_sync_to_async(token.save)()
    assert await _still_open(socket, f"agent.{agent.key}")
    await socket.disconnect()


@pytest.mark.asyncio
async def test_a_change_that_sends_no_signal_is_caught_by_the_periodic_recheck(monkeypatch):
    from tools_app.models import Agent

    monkeypatch.setattr(EventsConsumer, "RECHECK_SECONDS", 0.3)
    agent, _, plain = await _agent_and_token()
    socket = await _agent_socket(plain)
    await database_sync_to_async(Agent.objects.filter(pk=agent.pk).update)(enabled=False)  # no post_save
    assert await _closed_with_4401(socket, f"agent.{agent.key}")


@pytest.mark.asyncio
async def test_an_event_already_queued_behind_the_close_is_dropped():
    agent, token, plain = await _agent_and_token()
    socket = await _agent_socket(plain)
    layer = get_channel_layer()
    # Both land in the socket's channel before the consumer handles either.
    control = events.principal_group("token", token.pk)
    await layer.group_send(control, {"type": "principal.ended", "group": control})
    await layer.group_send(f"agent.{agent.key}", events._message("test.queued", {}, f"agent.{agent.key}"))
    assert await _closed_with_4401(socket, f"agent.{agent.key}")


@pytest.mark.asyncio
async def test_a_revocation_between_authentication_and_joining_is_not_missed(monkeypatch):
    import goclaw.consumers

    agent, token, plain = await _agent_and_token()

    async def revoked_meanwhile(principal):  # as if revoked after the middleware looked, before the groups were joined
        return False, None

    monkeypatch.setattr(goclaw.consumers, "_principal_state", revoked_meanwhile)
    communicator = WebsocketCommunicator(application, f"/ws/events/?token={plain}")
    assert await communicator.connect(timeout=GUARD) == (False, 4401)


# --- staff sessions -------------------------------------------------------------------------------------------

@pytest.mark.asyncio
async def test_deactivating_a_staff_user_closes_the_socket():
    user, browser = await _staff_login("ops")
    socket = await _staff_socket(browser)
    await socket.send_json_to({"action": "subscribe", "group": "approvals"})
    assert (await socket.receive_json_from())["type"] == "subscribed"
    user.is_active = False
    await database_sync_to_async(user.save)()
    assert await _closed_with_4401(socket, "approvals")


@pytest.mark.asyncio
async def test_removing_staff_status_closes_the_socket():
    user, browser = await _staff_login("ops")
    socket = await _staff_socket(browser)
    await socket.send_json_to({"action": "subscribe", "group": "approvals"})
    await socket.receive_json_from()
    user.is_staff = False
    await database_sync_to_async(user.save)()
    assert await _closed_with_4401(socket, "approvals")


@pytest.mark.asyncio
async def test_deleting_a_staff_user_closes_the_socket():
    user, browser = await _staff_login("ops")
    socket = await _staff_socket(browser)
    await database_sync_to_async(user.delete)()
    assert await _closed_with_4401(socket, "approvals")


@pytest.mark.asyncio
async def test_logging_out_closes_that_sessions_socket_only():
    user, browser = await _staff_login("ops")
    other_browser = Client()
    await database_sync_to_async(other_browser.login)(username="ops", password="pw-staff-12345")
    logged_out, kept = await _staff_socket(browser), await _staff_socket(other_browser)
    for socket in (logged_out, kept):
        await socket.send_json_to({"action": "subscribe", "group": "approvals"})
        await socket.receive_json_from()
    await database_sync_to_async(browser.logout)()
    assert await _closed_with_4401(logged_out, "approvals")
    assert await _still_open(kept, "approvals")
    await kept.disconnect()


@pytest.mark.asyncio
async def test_deleting_the_session_closes_the_socket():
    from django.contrib.sessions.models import Session

    user, browser = await _staff_login("ops")
    socket = await _staff_socket(browser)
    await database_sync_to_async(Session.objects.filter(session_key=browser.cookies["sessionid"].value).delete)()
    assert await _closed_with_4401(socket, "approvals")


@pytest.mark.asyncio
async def test_changing_the_password_closes_the_socket():
    user, browser = await _staff_login("ops")
    socket = await _staff_socket(browser)
    user.set_password("a-new-password-678")
    await database_sync_to_async(user.save)()
    assert await _closed_with_4401(socket, "approvals")


@pytest.mark.asyncio
async def test_logging_in_again_elsewhere_keeps_the_socket_open():
    user, browser = await _staff_login("ops")
    socket = await _staff_socket(browser)
    await socket.send_json_to({"action": "subscribe", "group": "approvals"})
    await socket.receive_json_from()
    await database_sync_to_async(Client().login)(username="ops", password="pw-staff-12345")  # saves last_login
    assert await _still_open(socket, "approvals")
    await socket.disconnect()


# --- across processes -----------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.asyncio
async def test_revoking_in_this_process_closes_a_socket_served_by_a_real_daphne(tmp_path, settings):
    """daphne (its own process, PostgreSQL channel layer on the test database) serves the socket; this process
    revokes the token through the service and its own layer; the real client sees the 4401 close."""
    import channels_postgres.db
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    from tests.servers import DaphneProcess, free_port, up_env
    from tools_app.services.agents import token_revoke

    settings.CHANNEL_LAYERS = DaphneProcess.channel_layers()  # this process now talks to daphne's layer
    agent, token, plain = await _agent_and_token()
    daphne = DaphneProcess(up_env(tmp_path / "var", DATABASE_URL=DaphneProcess.database_url()), free_port(), tmp_path / "daphne.log")
    try:
        await asyncio.to_thread(daphne.wait_listening)
        async with connect(f"ws://127.0.0.1:{daphne.port}/ws/events/", open_timeout=10,
                           additional_headers={"Authorization": f"Bearer {plain}"}) as ws:
            assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "welcome"
            await database_sync_to_async(events.publish)("test.before", {}, [f"agent.{agent.key}"])
            assert json.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "test.before"  # the layers really meet
            await database_sync_to_async(token_revoke)(token=token)
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(ws.recv(), GUARD)  # the revocation's own notice, not the periodic re-check
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401
    finally:
        assert daphne.stop() == 0
        # The layer's process-wide pool lives on this test's loop: close it here, or it outlives the test database.
        if channels_postgres.db.connection_pool is not None:
            await channels_postgres.db.connection_pool.close()
            channels_postgres.db.connection_pool = None
