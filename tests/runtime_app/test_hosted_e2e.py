"""A hosted agent end to end under `manage.py up` (real web server, worker, runner, embedded PostgreSQL) and a local
OpenAI-compatible server: a message starts a run, a tool call parks on an approval, `up` is restarted while it waits,
a person approves it from the console's session timeline in a real browser, the run resumes in the new runner, the
spawned subagent is refused a leaf-denied tool, and the open pages (timeline and list) follow it all live."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect

from tests.runtime_app.llm_server import LLMServer, call, text
from tests.servers import UpProcess, free_port, manage, up_env

pytestmark = pytest.mark.slow
CONSOLE = "/admin/console/sessions/"
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def _shell(env: dict, code: str) -> str:
    return manage(env, "shell", "-c", code).strip().splitlines()[-1]


def _session(base: str, token: str, sid: str) -> dict:
    return httpx.get(f"{base}/api/v1/sessions/{sid}", headers={"Authorization": f"Bearer {token}"}).json()


def _until(base: str, token: str, sid: str, wanted: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        state = _session(base, token, sid)
        if state["status"] == wanted or time.monotonic() > deadline:
            assert state["status"] == wanted, state
            return state
        time.sleep(0.2)


def test_a_hosted_run_parks_survives_a_restart_of_up_and_resumes_after_the_decision(tmp_path: Path):
    password = "hosted-e2e-admin-pw-1"
    env = up_env(tmp_path / "var", GOCLAW_RUNTIME_THREADS="2",
                 GOCLAW_ADMIN_PASSWORD=password)
    port, ws_port = free_port(), free_port()
    with LLMServer() as llm:
        # the parent asks to run a subagent (spawn is not read-only: a cautious agent asks a person first); the
        # subagent tries a leaf-denied tool, is refused, answers; the parent answers
        llm.script(call("spawn", action="run", task="look around", label="scout"),
                   call("sessions_list"), text("scout: I may not list sessions"), text("all done"))
        up = UpProcess(env, port, ws_port, tmp_path / "up1.log")
        try:
            up.wait_healthy()
            manage(env, "create_agent", "hosted")
            _shell(env, "from runtime_app.models import LLMProvider; from runtime_app.services.providers import "
                        "provider_save; from tools_app.models import Agent; "
                        f"provider_save(actor=None, provider=LLMProvider(name='local', kind='openai', "
                        f"base_url='{llm.url}/v1', model='m', allow_private_network=True)); "
                        "Agent.objects.filter(key='hosted').update(provider='local', model='m', mode='cautious'); print('ok')")
            token = manage(env, "issue_token", "hosted").strip()
            created = httpx.post(f"{up.base}/api/v1/sessions", json={"user_id": "u", "message": f"go {HOSTILE}"},
                                 headers={"Authorization": f"Bearer {token}"})
            assert created.status_code == 201, created.text
            sid = created.json()["id"]
            parked = _until(up.base, token, sid, "waiting_approval")
        finally:
            assert up.stop() == 0

        up = UpProcess(env, port, ws_port, tmp_path / "up2.log")
        try:
            up.wait_healthy()
            assert _session(up.base, token, sid)["status"] == "waiting_approval"  # nothing ran meanwhile
            _approve_in_the_browser(up, sid, password)
            done = _until(up.base, token, sid, "completed")
            assert _shell(env, "from tools_app.models import ApprovalRequest; print(ApprovalRequest.objects.get("
                               f"pk='{parked['waiting_approval']}').decision)") == "allow_once"
            assert len(done["children"]) == 1 and done["children"][0]["status"] == "completed"
            child = done["children"][0]["id"]
            rows = httpx.get(f"{up.base}/api/v1/sessions/{child}/messages",
                             headers={"Authorization": f"Bearer {token}"}).json()["results"]
            refused = [m for m in rows if m["role"] == "tool"][0]
            assert refused["tool_name"] == "sessions_list" and refused["verdict"] == "denied"
            assert "not available" in refused["content"]
            parent_rows = httpx.get(f"{up.base}/api/v1/sessions/{sid}/messages",
                                    headers={"Authorization": f"Bearer {token}"}).json()["results"]
            spawn = [m for m in parent_rows if m["role"] == "tool"][0]
            assert spawn["tool_name"] == "spawn" and spawn["verdict"] == "ok" and spawn["approval_id"]
            assert "I may not list sessions" in spawn["content"]
            assert parent_rows[-1]["content"] == "all done"
        finally:
            assert up.stop() == 0


def _approve_in_the_browser(up: UpProcess, sid: str, password: str) -> None:
    """The admin opens the sessions list and the parked session's timeline (both live), approves the call on the
    timeline, and both pages follow the resumed run without a reload."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"),
                                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        try:
            people = browser.new_context()  # one login for both pages
            listing = people.new_page()
            listing.goto(up.base + "/admin/login/")
            listing.fill("#id_username", "admin")
            listing.fill("#id_password", password)
            listing.click("input[type=submit]")
            listing.wait_for_selector("#goclaw-console-links")
            listing.goto(f"{up.base}{CONSOLE}?user_id=u")
            row = f'tr[data-id="{sid}"] [data-field="status"]'
            assert listing.locator(row).inner_text() == "waiting_approval"
            _live(listing)

            timeline = people.new_page()
            timeline.goto(f"{up.base}{CONSOLE}{sid}/")
            _live(timeline)
            assert HOSTILE in timeline.locator("#message-1 pre.content").inner_text()  # shown as text
            assert timeline.locator("#session-messages script").count() == 0
            assert "spawn" in timeline.locator("#session-approval-summary").inner_text()
            timeline.click("#session-approve")
            timeline.wait_for_selector(".messagelist", timeout=15000)
            # no reload from here: the resumed run's messages, status and sub-session arrive over the WebSocket
            expect(timeline.locator('#session-status')).to_have_text('completed', timeout=60000)
            assert "all done" in timeline.locator("#session-messages").inner_text()
            assert timeline.locator("#session-tree a").count() >= 1  # the subagent, linked
            # (the list re-reads its rows on some events: the row may be absent for a moment)
            listing.wait_for_function(f"(document.querySelector('{row}') || {{}}).textContent === 'completed'",
                                      timeout=30000)
        finally:
            browser.close()


def _live(page) -> None:
    expect(page.locator('#ws-status')).to_have_text('live', timeout=15000)
