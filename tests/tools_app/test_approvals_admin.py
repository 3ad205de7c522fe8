"""People decide in the admin: the live queue page, its CSRF-protected buttons, rules and held changes,
and the WebSocket feed the page listens to."""
import re

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from goclaw.asgi import application
from tests.factories import make_agent
from tools_app import pipeline
from tools_app.models import ApprovalRequest, ApprovalRule, PendingChange
from tools_app.services import approvals as svc
from tools_app.services.agents import agent_update

QUEUE = "/admin/tools_app/approvalrequest/queue/"


def pending_exec(command="echo from-admin", mode="cautious", **kw):
    agent = agent_update(agent=make_agent(), mode=mode)
    outcome = pipeline.execute(pipeline.ToolCall(agent=agent, tool="exec", arguments={"command": command}, **kw))
    return agent, ApprovalRequest.objects.get(pk=outcome.extra["approval_id"])


@pytest.fixture
def admin_client(db, django_user_model):
    django_user_model.objects.create_superuser("boss", password="pw-boss-12345")
    client = Client(enforce_csrf_checks=True)
    client.login(username="boss", password="pw-boss-12345")
    return client


def csrf_of(page) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()).group(1)


@pytest.mark.django_db
def test_the_queue_shows_summary_arguments_countdown_and_three_buttons(admin_client):
    agent, req = pending_exec("git status && echo done", user_id="u7")
    page = admin_client.get(QUEUE)
    html = page.content.decode()
    assert page.status_code == 200
    assert f'data-id="{req.pk}"' in html and 'data-expires="' in html
    assert "$ git status &amp;&amp; echo done" in html and "runs: git status; echo done" in html
    assert "&quot;command&quot;: &quot;git status &amp;&amp; echo done&quot;" in html
    for value in ("allow_once", "allow_always", "deny"):
        assert f'name="decision" value="{value}"' in html
    assert 'id="goclaw-ws-url"' in html and '{action: "subscribe", group: "approvals"}' in html
    assert 'id="approval-row-template"' in html and "csrfmiddlewaretoken" in html


@pytest.mark.django_db
def test_the_queue_is_linked_from_the_index_and_the_changelist(admin_client):
    assert QUEUE in admin_client.get("/admin/").content.decode()
    assert QUEUE in admin_client.get("/admin/tools_app/approvalrequest/").content.decode()


@pytest.mark.django_db
def test_allow_once_button_approves_and_the_row_leaves_the_queue(admin_client):
    agent, req = pending_exec()
    page = admin_client.get(QUEUE)
    url = f"/admin/tools_app/approvalrequest/{req.pk}/decide/"
    assert admin_client.post(url, {"decision": "allow_once"}).status_code == 403  # CSRF enforced
    response = admin_client.post(url, {"decision": "allow_once", "csrfmiddlewaretoken": csrf_of(page)}, follow=True)
    req.refresh_from_db()
    assert (req.status, req.decision, req.decided_by.username) == ("approved", "allow_once", "boss")
    assert f'data-id="{req.pk}"' not in response.content.decode()
    again = admin_client.post(url, {"decision": "deny", "csrfmiddlewaretoken": csrf_of(page)}, follow=True)
    assert "already decided" in again.content.decode()


@pytest.mark.django_db
def test_deny_and_allow_always_buttons(admin_client):
    _, denied = pending_exec()
    agent, always = pending_exec("echo ship it now")
    token = csrf_of(admin_client.get(QUEUE))
    admin_client.post(f"/admin/tools_app/approvalrequest/{denied.pk}/decide/", {"decision": "deny", "csrfmiddlewaretoken": token})
    rule_fields = {"decision": "allow_always", "rule_match": "prefix", "rule_pattern": "echo ship it ",
                   "rule_user_only": "on", "rule_expires_hours": "24", "csrfmiddlewaretoken": token}
    # Allow always first shows what the rule covers; only the confirmation creates it.
    confirm = admin_client.post(f"/admin/tools_app/approvalrequest/{always.pk}/decide/", rule_fields)
    html = confirm.content.decode()
    assert confirm.status_code == 200 and "What this rule covers" in html and 'name="confirm" value="1"' in html
    assert "one call of `echo ship it`, followed by any further arguments" in html
    assert not ApprovalRule.objects.filter(agent=agent).exists()
    assert ApprovalRequest.objects.get(pk=always.pk).status == "pending"
    admin_client.post(f"/admin/tools_app/approvalrequest/{always.pk}/decide/", {**rule_fields, "confirm": "1",
                                                                                 "csrfmiddlewaretoken": csrf_of(confirm)})
    assert ApprovalRequest.objects.get(pk=denied.pk).status == "denied"
    rule = ApprovalRule.objects.get(agent=agent)
    assert (rule.match, rule.pattern, rule.expires_at is not None) == ("prefix", "echo ship it ", True)
    assert rule.description.startswith("Covers `exec` commands that are one call of `echo ship it`")


@pytest.mark.django_db
def test_a_too_wide_allow_always_is_refused_with_a_message(admin_client):
    _, req = pending_exec("echo ship it")
    token = csrf_of(admin_client.get(QUEUE))
    response = admin_client.post(f"/admin/tools_app/approvalrequest/{req.pk}/decide/", {
        "decision": "allow_always", "rule_match": "glob", "rule_pattern": "echo *", "csrfmiddlewaretoken": token}, follow=True)
    assert "more than the program name" in response.content.decode()
    assert ApprovalRequest.objects.get(pk=req.pk).status == "pending" and not ApprovalRule.objects.exists()


@pytest.mark.django_db
def test_rules_are_listed_with_use_count_and_can_be_revoked(admin_client, django_user_model):
    agent, req = pending_exec("echo once more")
    svc.approval_decide(approval_id=req.pk, decision="allow_always", actor=None)
    pipeline.execute(pipeline.ToolCall(agent=agent, tool="exec", arguments={"command": "echo once more"}))
    rule = ApprovalRule.objects.get()
    page = admin_client.get("/admin/tools_app/approvalrule/")
    assert "echo once more" in page.content.decode() and rule.use_count == 1
    admin_client.post("/admin/tools_app/approvalrule/", {"action": "revoke", "_selected_action": [rule.pk],
                                                         "csrfmiddlewaretoken": csrf_of(page)})
    rule.refresh_from_db()
    assert rule.revoked_at is not None and rule.revoked_by.username == "boss"


@pytest.mark.django_db
def test_held_changes_are_accepted_from_the_admin(admin_client):
    agent = agent_update(agent=make_agent(), mode="review")
    outcome = pipeline.execute(pipeline.ToolCall(agent=agent, tool="write_file", arguments={"path": "adm.txt", "content": "ok"}))
    change = PendingChange.objects.get(pk=outcome.extra["pending_change_id"])
    page = admin_client.get("/admin/tools_app/pendingchange/")
    assert "adm.txt" in page.content.decode()
    admin_client.post("/admin/tools_app/pendingchange/", {"action": "accept", "_selected_action": [str(change.pk)],
                                                          "csrfmiddlewaretoken": csrf_of(page)})
    change.refresh_from_db()
    assert change.status == "accepted" and (agent.workspace_path / "adm.txt").read_text() == "ok"


@pytest.mark.django_db
def test_permissions_are_edited_in_the_admin(admin_client):
    page = admin_client.get("/admin/tools_app/toolpermission/add/")
    response = admin_client.post("/admin/tools_app/toolpermission/add/", {
        "scope": "mode", "mode": "cautious", "tool": "group:fs", "permission": "deny", "note": "",
        "csrfmiddlewaretoken": csrf_of(page)})
    assert response.status_code == 302
    from tools_app.models import ToolPermission

    assert ToolPermission.objects.get().mode == "cautious"


# --- the live feed ------------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_staff_subscribed_to_approvals_receive_requested_and_resolved():
    @database_sync_to_async
    def staff_cookie():
        from tests.factories import make_person

        make_person("tools_app.view_approvalrequest", username="watcher", password="pw-watch-12345")
        c = Client()
        c.login(username="watcher", password="pw-watch-12345")
        return c.cookies["sessionid"].value

    cookie = await staff_cookie()
    communicator = WebsocketCommunicator(application, "/ws/events/", headers=[
        (b"cookie", f"sessionid={cookie}".encode()), (b"origin", b"http://127.0.0.1:8000")])
    connected, _ = await communicator.connect()
    assert connected
    await communicator.receive_json_from()
    await communicator.send_json_to({"action": "subscribe", "group": "approvals"})
    assert (await communicator.receive_json_from())["type"] == "subscribed"

    agent, req = await database_sync_to_async(pending_exec)("echo live")
    message = await communicator.receive_json_from(timeout=5)
    assert message["type"] == "approval.requested" and message["group"] == "approvals"
    payload = message["payload"]
    assert (payload["id"], payload["agent"], payload["tool"]) == (str(req.pk), agent.key, "exec")
    assert "$ echo live" in payload["summary"] and payload["arguments"] == {"command": "echo live"} and payload["expires_at"]

    await database_sync_to_async(svc.approval_decide)(approval_id=req.pk, decision="deny", actor=None)
    message = await communicator.receive_json_from(timeout=5)
    assert message["type"] == "approval.resolved" and message["payload"]["status"] == "denied"
    await communicator.disconnect()
