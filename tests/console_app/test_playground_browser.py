"""A person runs a tool from the playground in a real browser against a running platform (`manage.py up`): the
form generated from exec's schema, the run through the pipeline and sandbox, and a result whose credential-shaped
output is scrubbed (the typed command builds the token, so it never appears anywhere on the page)."""
import shutil

import pytest
from playwright.sync_api import sync_playwright

from tests.servers import UpProcess, free_port, manage, up_env

# django_db only so that this file run alone still sets up the test database the conftest's session fixtures read
# (pytest-django creates it only for collected tests that ask for it); the platform itself uses its own data dir.
pytestmark = [pytest.mark.slow, pytest.mark.django_db]

TOKEN_HEAD, TOKEN_TAIL = "ghp_", "Zq7Xw2Lr9Tb4Nc6Vm1Ks8Hd3Fg5Jp0Ya2Ue4B"  # a fake GitHub token, in two halves


def test_the_playground_runs_exec_and_shows_the_scrubbed_result(tmp_path):
    env = up_env(tmp_path / "var", GOCLAW_ADMIN_PASSWORD="browser-admin-pw-2")
    up = UpProcess(env, free_port(), free_port(), tmp_path / "up.log")
    try:
        up.wait_healthy()
        manage(env, "create_agent", "demo")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"),
                                        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            page = browser.new_page()
            page.goto(up.base + "/admin/login/?next=/admin/console/playground/")
            page.fill("#id_username", "admin")
            page.fill("#id_password", "browser-admin-pw-2")
            page.click("input[type=submit]")
            page.wait_for_url("**/admin/console/playground/")
            page.select_option("#id_agent", "demo")
            page.fill("#id_user_id", "alice")
            page.click("#pg-open")
            page.select_option("#pg-tool", "exec")
            page.click("#pg-open")
            page.locator("[data-property=command] .pg-help").wait_for()
            assert "shell command to run" in page.inner_text("[data-property=command] .pg-help")
            page.fill("textarea[name=arg-command]", f"printf 'deploy key: %s%s\\n' {TOKEN_HEAD} {TOKEN_TAIL}")
            page.click("#pg-run")
            page.locator("#playground-result").wait_for(timeout=30000)
            assert page.inner_text("#pg-status") == "ok", page.inner_text("#playground-result")
            shown = page.inner_text("#pg-for-llm")
            assert "deploy key: [REDACTED]" in shown
            assert TOKEN_HEAD + TOKEN_TAIL not in page.content()
            page.click("#pg-audit-link")  # the audit row of this run names the person
            page.wait_for_load_state()
            assert "staff:admin" in page.content() and TOKEN_HEAD + TOKEN_TAIL not in page.content()
            browser.close()
    finally:
        assert up.stop() == 0
