"""The dashboard in a real browser against `manage.py up`: the admin home renders with data, and the header badge,
the tab title and the live feed update over the WebSocket when an agent's call starts waiting for approval."""
import shutil

import httpx
import pytest
from playwright.sync_api import sync_playwright, expect

from tests.servers import UpProcess, free_port, manage_many, up_env

pytestmark = pytest.mark.slow


def test_the_dashboard_renders_with_data_and_its_badge_updates_live(tmp_path):
    env = up_env(tmp_path / "var", GOCLAW_ADMIN_PASSWORD="dash-admin-pw-1")
    up = UpProcess(env, free_port(), free_port(), tmp_path / "up.log")
    try:
        up.wait_healthy()
        token = manage_many(env, ("create_agent", "dash-agent"),
                            ("shell", "-c", "from tools_app.models import Agent; a = Agent.objects.get(key='dash-agent'); "
                                            "a.mode = 'cautious'; a.save()"),
                            ("issue_token", "dash-agent"))[-1].strip()
        agent = {"Authorization": f"Bearer {token}"}
        for _ in range(3):  # data before the page loads: calls that ran, and one the policy refused
            ran = httpx.post(up.base + "/api/v1/tools/execute", headers=agent, timeout=30,
                             json={"tool": "datetime", "arguments": {}}).json()
            assert ran["status"] == "ok"
        refused = httpx.post(up.base + "/api/v1/tools/execute", headers=agent, timeout=30,
                             json={"tool": "no_such_tool", "arguments": {}}).json()
        assert refused["status"] == "denied"

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"),
                                        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            page = browser.new_page()
            page.goto(up.base + "/admin/login/")
            page.fill("#id_username", "admin")
            page.fill("#id_password", "dash-admin-pw-1")
            page.click("input[type=submit]")
            page.wait_for_selector("#goclaw-dashboard")

            calls = page.locator("#goclaw-tile-calls a[data-window=hour]")
            assert calls.inner_text().strip() == "4"
            assert page.locator("#goclaw-tile-denied a[data-window=hour]").inner_text().strip() == "1"
            assert page.locator("#goclaw-chart-calls svg.goclaw-chart").count() >= 1
            assert "datetime" in page.locator("#goclaw-chart-calls").inner_text()
            assert "policy" in page.locator("#goclaw-chart-denials").inner_text()
            assert page.locator("#goclaw-feed-body tr").count() == 4
            assert page.locator("#goclaw-approvals-count").inner_text() == "0"
            assert not page.title().startswith("(")
            page.wait_for_function("document.getElementById('goclaw-approvals-badge').dataset.live === '1'",
                                   timeout=15000)
            expect(page.locator('#goclaw-feed-status')).to_have_text('live', timeout=15000)

            asked = httpx.post(up.base + "/api/v1/tools/execute", headers=agent, timeout=30,
                               json={"tool": "exec", "arguments": {"command": "echo badge-goes-up"}}).json()
            assert asked["status"] == "pending_approval"
            # No reload: the event arrives over the WebSocket, the page re-reads the count.
            expect(page.locator('#goclaw-approvals-count')).to_have_text('1', timeout=15000)
            assert page.title().startswith("(1) ")
            assert page.locator("#goclaw-approvals-waiting").inner_text() == "1"
            page.wait_for_function(
                "Array.from(document.querySelectorAll('#goclaw-feed-body tr.goclaw-feed-new'))"
                ".some(r => r.textContent.includes('pending_approval') && r.textContent.includes('dash-agent'))",
                timeout=15000)

            page.goto(up.base + "/admin/tools_app/agent/")  # the badge is on every admin page
            assert page.locator("#goclaw-approvals-count").inner_text() == "1"
            assert page.title().startswith("(1) ")
            page.wait_for_function("document.getElementById('goclaw-approvals-badge').dataset.live === '1'",
                                   timeout=15000)
            cancelled = httpx.post(up.base + f"/api/v1/approvals/{asked['approval_id']}/cancel", headers=agent,
                                   json={}, timeout=30)
            assert cancelled.status_code == 200, cancelled.text
            expect(page.locator('#goclaw-approvals-count')).to_have_text('0', timeout=15000)
            assert not page.title().startswith("(")
            browser.close()
    finally:
        assert up.stop() == 0
