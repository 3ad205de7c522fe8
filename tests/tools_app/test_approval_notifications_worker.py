"""End to end on a running platform (`manage.py up`: web, WebSocket, django-q2 worker): an agent's call asks, the
worker POSTs the signed webhook to a local server, the live queue shows why and the risk, and the notification's link
opens the request in the queue only for a signed-in staff member."""
import hashlib
import hmac
import json
import shutil
import time

import httpx
import pytest
from playwright.sync_api import sync_playwright, expect

from tests.servers import UpProcess, free_port, manage, manage_many, up_env
from tests.tools_app.test_approval_notifications import WebhookServer

pytestmark = [pytest.mark.slow, pytest.mark.django_db]  # the session fixtures need a test database when run alone

QUEUE = "/admin/tools_app/approvalrequest/queue/"


def test_the_worker_notifies_a_webhook_when_an_agent_s_call_asks(tmp_path):
    hook = WebhookServer()
    env = up_env(tmp_path / "var", GOCLAW_ADMIN_PASSWORD="notify-admin-pw-1")
    up = UpProcess(env, free_port(), free_port(), tmp_path / "up.log")
    try:
        up.wait_healthy()
        token = manage_many(env, ("create_agent", "demo"), ("shell", "-c", (
            "from tools_app.models import Agent, NotificationChannel\n"
            "from tools_app.services.notifications import notification_channel_save\n"
            "a = Agent.objects.get(key='demo'); a.mode = 'cautious'; a.save()\n"
            f"notification_channel_save(actor=None, channel=NotificationChannel(name='ops', url='{hook.url('/goclaw')}',"
            " allow_private_network=True),"
            " secret='worker-path-secret')\n")), ("issue_token", "demo"))[-1].strip()
        agent = {"Authorization": f"Bearer {token}"}
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"),
                                        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            page = browser.new_page()
            page.goto(up.base + "/admin/login/")
            page.fill("#id_username", "admin")
            page.fill("#id_password", "notify-admin-pw-1")
            page.click("input[type=submit]")
            page.goto(up.base + QUEUE)
            expect(page.locator('#ws-status')).to_have_text('live', timeout=15000)

            asked_at = time.monotonic()
            asked = httpx.post(up.base + "/api/v1/tools/execute", headers=agent, timeout=30,
                               json={"tool": "exec", "arguments": {"command": "rm -rf build <!channel>"}}).json()
            assert asked["status"] == "pending_approval"
            approval_id = asked["approval_id"]

            # the live row (rendered by the page's script from the WebSocket event) says why and the risk
            row = page.locator(f"#approval-{approval_id}")
            row.wait_for(timeout=15000)
            assert row.locator("[data-field=risk]").inner_text().startswith("Risk (high): deletes files (rm -rf build")
            assert "risk-high" in row.locator("[data-field=risk]").get_attribute("class")
            why = row.locator("[data-field=why] li").all_inner_texts()
            assert why[0] == "Asked because agent demo is in cautious mode."
            assert not row.locator("[data-field=reason]").is_visible()

            # the worker delivers the webhook (queued right after the request's commit; the 15 s schedule backs it up)
            assert hook.arrived.wait(30), "no webhook arrived"
            [got] = hook.received
            print(f"webhook arrived {got['at'] - asked_at:.2f} s after the call was made")  # a figure, not a check
            assert got["path"] == "/goclaw"
            assert got["headers"]["X-Goclaw-Signature-256"] == \
                "sha256=" + hmac.new(b"worker-path-secret", got["body"], hashlib.sha256).hexdigest()
            message = json.loads(got["body"])["approval"]
            assert (message["id"], message["agent"], message["tool"]) == (approval_id, "demo", "exec")
            assert "$ rm -rf build <!channel>" in message["summary"]
            assert message["why"] == why and message["risk"] == row.locator("[data-field=risk]").inner_text()
            assert message["url"] == f"{up.base}{QUEUE}#approval-{approval_id}"

            # the link opens the request's row for staff; anyone else lands on the sign-in page
            page.goto(message["url"])
            assert page.locator(f"#approval-{approval_id}:target").count() == 1
            stranger = browser.new_context().new_page()
            stranger.goto(message["url"])
            assert stranger.url.startswith(up.base + "/admin/login/")
            assert stranger.locator("button[name=decision]").count() == 0
            browser.close()

        status = manage(env, "shell", "-c", "from tools_app.models import NotificationDelivery as D; "
                                            "print(list(D.objects.values_list('status', 'attempts', 'last_status_code')))")
        assert status.strip().splitlines()[-1] == "[('sent', 1, 200)]"
        decided = httpx.get(up.base + f"/api/v1/approvals/{approval_id}", headers=agent).json()
        assert decided["status"] == "pending"  # being told decides nothing
    finally:
        assert up.stop() == 0
        hook.stop()
