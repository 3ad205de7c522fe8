"""Staff WebSocket groups follow the person's permissions (docs/permissions.md): a staff socket joins a group only
holding the permissions its app registered for it, and a person who loses them leaves the group, told why, with
nothing of that group delivered afterwards. The receive timeouts are hang guards kept under the periodic re-check."""
import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from goclaw import events
from goclaw.asgi import application
from goclaw.consumers import EventsConsumer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]
GUARD = 10.0
assert GUARD < EventsConsumer.RECHECK_SECONDS * 0.9
ORIGIN = (b"origin", b"http://127.0.0.1:8000")


@database_sync_to_async
def _login(*permissions, groups=()):
    from tests.factories import make_person

    user = make_person(*permissions, groups=groups)
    browser = Client()
    browser.force_login(user)
    return user, browser.cookies["sessionid"].value


async def _socket(cookie):
    communicator = WebsocketCommunicator(application, "/ws/events/",
                                         headers=[(b"cookie", f"sessionid={cookie}".encode()), ORIGIN])
    connected, code = await communicator.connect()
    assert connected, code
    assert (await communicator.receive_json_from())["type"] == "welcome"
    return communicator


async def _subscribe(socket, group):
    await socket.send_json_to({"action": "subscribe", "group": group})
    return await socket.receive_json_from(timeout=GUARD)


@pytest.mark.parametrize("group", ["approvals", "invocations", "agent.some-agent", "mcp", "config", "team.1", "teams"])
async def test_a_staff_socket_without_the_view_permission_cannot_join_the_group(group):
    _, cookie = await _login()
    socket = await _socket(cookie)
    answer = await _subscribe(socket, group)
    assert answer["type"] == "error" and answer["code"] == "permission_denied"
    await database_sync_to_async(events.publish)("test.secret", {"n": 1}, [group])
    assert await socket.receive_nothing(timeout=0.3)
    await socket.disconnect()


@pytest.mark.parametrize("group, permissions", [
    ("approvals", ("tools_app.view_approvalrequest",)),
    ("invocations", ("tools_app.view_toolinvocation",)),
    ("team.7", ("teams_app.view_teamtask", "teams_app.view_teammessage")),
])
async def test_the_view_permission_lets_a_person_join_and_receive(group, permissions):
    _, cookie = await _login(*permissions)
    socket = await _socket(cookie)
    assert (await _subscribe(socket, group))["type"] == "subscribed"
    await database_sync_to_async(events.publish)("test.seen", {"n": 1}, [group])
    assert (await socket.receive_json_from(timeout=GUARD))["type"] == "test.seen"
    await socket.disconnect()


async def test_operators_may_watch_approvals_and_boards_but_not_configuration_imports():
    _, cookie = await _login(groups=["Operators"])
    socket = await _socket(cookie)
    for group in ("approvals", "invocations", "agent.a1", "mcp", "team.3", "teams"):
        assert (await _subscribe(socket, group))["type"] == "subscribed", group
    assert (await _subscribe(socket, "config"))["code"] == "permission_denied"
    await socket.disconnect()


async def test_a_person_who_loses_the_permission_leaves_the_group_and_gets_nothing_more():
    user, cookie = await _login("tools_app.view_approvalrequest", "tools_app.view_toolinvocation")
    socket = await _socket(cookie)
    assert (await _subscribe(socket, "approvals"))["type"] == "subscribed"
    assert (await _subscribe(socket, "invocations"))["type"] == "subscribed"

    @database_sync_to_async
    def revoke():
        from tests.factories import permission_objects

        user.user_permissions.remove(*permission_objects(["tools_app.view_approvalrequest"]))  # m2m: no post_save

    await revoke()
    left = await socket.receive_json_from(timeout=GUARD)
    assert left == {"type": "unsubscribed", "group": "approvals", "code": "permission_denied",
                    "message": "this account may no longer see 'approvals'"}
    await database_sync_to_async(events.publish)("test.after", {}, ["approvals"])
    await database_sync_to_async(events.publish)("test.kept", {}, ["invocations"])
    assert (await socket.receive_json_from(timeout=GUARD))["type"] == "test.kept"  # the other group stays, the socket too
    assert await socket.receive_nothing(timeout=0.3)
    await socket.disconnect()


async def test_leaving_a_group_removed_from_the_persons_group_is_caught_too():
    user, cookie = await _login(groups=["Operators"])
    socket = await _socket(cookie)
    assert (await _subscribe(socket, "approvals"))["type"] == "subscribed"

    @database_sync_to_async
    def drop_from_group():
        from tests.factories import people_group

        user.groups.remove(people_group("Operators"))

    await drop_from_group()
    assert (await socket.receive_json_from(timeout=GUARD))["type"] == "unsubscribed"
    await socket.disconnect()


async def test_a_change_that_sends_no_signal_is_caught_by_the_periodic_recheck(monkeypatch):
    monkeypatch.setattr(EventsConsumer, "RECHECK_SECONDS", 0.3)
    user, cookie = await _login("tools_app.view_approvalrequest")
    socket = await _socket(cookie)
    assert (await _subscribe(socket, "approvals"))["type"] == "subscribed"

    @database_sync_to_async
    def revoke_with_raw_sql():
        from django.db import connection

        with connection.cursor() as cursor:  # no signal at all
            cursor.execute("DELETE FROM auth_user_user_permissions WHERE user_id = %s", [user.pk])

    await revoke_with_raw_sql()
    assert (await socket.receive_json_from(timeout=GUARD))["type"] == "unsubscribed"
    await socket.disconnect()
