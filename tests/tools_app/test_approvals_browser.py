"""A person approves a call in a real browser: the live queue (Django admin page + WebSocket on daphne) shows the
request as it arrives, the Allow once button decides it, and the agent then runs exactly the approved command."""
import shutil

import httpx
import pytest
from playwright.sync_api import sync_playwright, expect

from tests.servers import UpProcess, free_port, manage_many, up_env

pytestmark = pytest.mark.slow


def test_a_person_approves_a_call_from_the_live_queue(tmp_path):
    env = up_env(tmp_path / "var", GOCLAW_ADMIN_PASSWORD="browser-admin-pw-1")
    up = UpProcess(env, free_port(), free_port(), tmp_path / "up.log")
    try:
        up.wait_healthy()
        token = manage_many(env, ("create_agent", "demo"),
                            ("shell", "-c", "from tools_app.models import Agent; a = Agent.objects.get(key='demo'); "
                                            "a.mode = 'cautious'; a.save()"),
                            ("issue_token", "demo"))[-1].strip()
        agent = {"Authorization": f"Bearer {token}"}
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"),
                                        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            page = browser.new_page()
            page.goto(up.base + "/admin/login/")
            page.fill("#id_username", "admin")
            page.fill("#id_password", "browser-admin-pw-1")
            page.click("input[type=submit]")
            page.click("text=Pending approvals (live queue)")
            expect(page.locator('#ws-status')).to_have_text('live', timeout=15000)
            assert page.locator("#approval-queue-body tr").count() == 0

            asked = httpx.post(up.base + "/api/v1/tools/execute", headers=agent, timeout=30,
                               json={"tool": "exec", "arguments": {"command": "echo approved-by-a-person"}}).json()
            assert asked["status"] == "pending_approval"
            row = page.locator(f"#approval-queue-body tr[data-id='{asked['approval_id']}']")
            row.wait_for(timeout=15000)  # arrived over the WebSocket, no reload
            assert "echo approved-by-a-person" in row.inner_text()
            row.locator("button:has-text('Allow once')").click()
            page.wait_for_load_state()
            browser.close()

        decided = httpx.get(up.base + f"/api/v1/approvals/{asked['approval_id']}", headers=agent).json()
        assert (decided["status"], decided["decision"]) == ("approved", "allow_once")
        ran = httpx.post(up.base + f"/api/v1/approvals/{asked['approval_id']}/execute", headers=agent, json={}, timeout=30).json()
        assert ran["status"] == "ok" and "approved-by-a-person" in ran["for_llm"]
        replay = httpx.post(up.base + f"/api/v1/approvals/{asked['approval_id']}/execute", headers=agent, json={}, timeout=30)
        assert replay.status_code == 409
    finally:
        assert up.stop() == 0
