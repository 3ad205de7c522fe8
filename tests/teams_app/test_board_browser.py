"""A person watches a team board in a real browser (Playwright + Debian chromium against `manage.py up`: daphne, the
WebSocket and the worker): agents create and claim a task through the team_tasks tool and the card appears and moves
without a reload; the person retries the failed task from its page and the board, open in another tab, sees the card
return to pending. Agent-written HTML in a live card stays text."""
import json
import shutil

import httpx
import pytest
from playwright.sync_api import sync_playwright, expect

from tests.servers import UpProcess, free_port, manage_many, up_env

pytestmark = pytest.mark.slow

HOSTILE_SUBJECT = 'Ship it <img src=x onerror="window.__pwned = 1"><script>window.__pwned = 2</script>'
CREATE_TEAM = """
from teams_app.actors import Actor
from teams_app.services.teams import team_create
from tools_app.models import Agent
team = team_create(actor=Actor.system("browser test"), name="crew", lead=Agent.objects.get(key="boss"),
                   members=[(Agent.objects.get(key="worker"), "member")])
print(team.pk)
"""


def tool(up: UpProcess, token: str, **arguments) -> dict:
    """One team_tasks call as an agent, through the same endpoint every agent uses; the tool's JSON answer."""
    response = httpx.post(up.base + "/api/v1/tools/execute", headers={"Authorization": f"Bearer {token}"}, timeout=30,
                          json={"tool": "team_tasks", "arguments": arguments})
    body = response.json()
    assert response.status_code == 200 and body["status"] == "ok", body
    return json.loads(body["for_llm"])


def card_in(page, status: str, identifier: str):
    card = page.locator(f"#cards-{status} .task-card[data-id='{identifier}']")
    card.wait_for(state="attached", timeout=15000)
    return card


def test_the_board_follows_agents_live_and_a_persons_retry_reaches_it(tmp_path):
    env = up_env(tmp_path / "var", GOCLAW_ADMIN_PASSWORD="board-admin-pw-1")
    up = UpProcess(env, free_port(), free_port(), tmp_path / "up.log")
    try:
        up.wait_healthy()
        _, _, team, boss, worker = manage_many(env, ("create_agent", "boss"), ("create_agent", "worker"),
                                               ("shell", "-c", CREATE_TEAM), ("issue_token", "boss"),
                                               ("issue_token", "worker"))
        team_id, boss, worker = int(team.strip().splitlines()[-1]), boss.strip(), worker.strip()
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"),
                                        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            context = browser.new_context()
            page = context.new_page()
            page.goto(up.base + "/admin/login/")
            page.fill("#id_username", "admin")
            page.fill("#id_password", "board-admin-pw-1")
            page.click("input[type=submit]")
            page.click("text=Team boards (live)")
            page.click("#team-index a:has-text('crew')")
            assert page.url.endswith(f"/teams/{team_id}/board/")
            expect(page.locator('#ws-status')).to_have_text('live', timeout=15000)
            assert page.locator(".task-card").count() == 0
            page.evaluate("window.__sameDocument = 'yes'")  # gone if anything reloads the page

            created = tool(up, boss, action="create", subject=HOSTILE_SUBJECT, description="from the browser test")
            identifier = created["task"]["id"]
            card = card_in(page, "pending", identifier)  # arrived over the WebSocket
            assert card.locator("[data-field='subject']").inner_text() == HOSTILE_SUBJECT  # shown as text
            assert page.evaluate("window.__pwned") is None

            tool(up, worker, action="claim", task_id=identifier)
            card = card_in(page, "in_progress", identifier)
            assert card.locator("[data-field='owner']").inner_text() == "worker"
            assert page.locator(f"#cards-pending .task-card[data-id='{identifier}']").count() == 0

            tool(up, worker, action="comment", task_id=identifier, kind="blocker", text="the API key is missing")
            card_in(page, "failed", identifier)  # the blocker's older "commented" event must not move it back
            assert page.locator("#col-failed [data-count]").inner_text() == "1"

            detail = context.new_page()  # the person opens the task in another tab and retries it there
            detail.goto(up.base + f"/teams/{team_id}/board/{identifier}/")
            assert "the API key is missing" in detail.locator("#task-comments").inner_text()
            detail.click("#action-retry")
            detail.wait_for_load_state()
            assert "pending again" in detail.locator("ul.messagelist").inner_text()
            assert detail.locator("#task-status").inner_text() == "Pending"
            assert "user:admin" in detail.locator("#task-events").inner_text()

            card = card_in(page, "pending", identifier)  # the board tab saw the person's retry live
            assert page.locator(f"#cards-failed .task-card[data-id='{identifier}']").count() == 0
            assert page.locator("#col-pending [data-count]").inner_text() == "1"
            assert page.evaluate("window.__sameDocument") == "yes"
            assert page.evaluate("window.__pwned") is None
            browser.close()

        again = tool(up, worker, action="claim", task_id=identifier)  # the retried task is workable again
        assert again["task"]["status"] == "in_progress"
    finally:
        assert up.stop() == 0
