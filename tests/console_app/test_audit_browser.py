"""A person searches the audit trail in a real browser against the whole platform (`manage.py up`): free text and
a status filter narrow the calls the agent made over the API, the URL carries the search, a bad date is explained,
a row opens its detail page, and the CSV / JSON-lines exports download exactly the filtered calls."""
import csv
import io
import json
import re
import shutil

import httpx
import pytest
from playwright.sync_api import sync_playwright

from tests.servers import UpProcess, free_port, manage_many, up_env

pytestmark = pytest.mark.slow


def test_an_audit_search_filters_and_exports(tmp_path):
    env = up_env(tmp_path / "var", GOCLAW_ADMIN_PASSWORD="browser-admin-pw-1")
    up = UpProcess(env, free_port(), free_port(), tmp_path / "up.log")
    try:
        up.wait_healthy()
        token = manage_many(env, ("create_agent", "demo"), ("issue_token", "demo"))[-1].strip()
        agent = {"Authorization": f"Bearer {token}"}

        def call(tool, arguments):
            return httpx.post(up.base + "/api/v1/tools/execute", headers=agent, timeout=30,
                              json={"tool": tool, "arguments": arguments}).json()

        wrote = call("write_file", {"path": "notes.txt", "content": "release the kraken at dawn"})
        assert wrote["status"] == "ok", wrote
        assert call("read_file", {"path": 5})["status"] == "invalid_arguments"
        assert call("write_file", {"path": "other.txt", "content": "the kraken sleeps", "bogus": 1})["status"] == "invalid_arguments"
        assert call("read_file", {"path": "notes.txt"})["status"] == "ok"

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"),
                                        args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            context = browser.new_context(accept_downloads=True)
            page = context.new_page()
            page.goto(up.base + "/admin/login/?next=/admin/console/audit/")
            page.fill("#id_username", "admin")
            page.fill("#id_password", "browser-admin-pw-1")
            page.click("input[type=submit]")
            page.wait_for_selector("#audit-filters")
            assert page.locator("#audit-rows tr").count() == 4

            page.fill("#audit-q", "kraken")
            page.select_option("#audit-status", "ok")
            page.click("#audit-submit")
            page.wait_for_load_state()
            assert re.search(r"[?&]q=kraken(&|$)", page.url) and "status=ok" in page.url
            rows = page.locator("#audit-rows tr")
            assert rows.count() == 1
            assert rows.first.get_attribute("data-id") == wrote["invocation_id"]
            assert "write_file" in rows.first.inner_text()
            shared = page.url

            with page.expect_download() as info:
                page.click("#audit-export-csv")
            download = info.value
            assert re.fullmatch(r"goclaw-audit-\d{8}T\d{6}Z\.csv", download.suggested_filename)
            exported = list(csv.DictReader(io.StringIO(open(download.path(), encoding="utf-8").read())))
            assert [r["id"] for r in exported] == [wrote["invocation_id"]]
            assert json.loads(exported[0]["arguments"])["content"] == "release the kraken at dawn"

            with page.expect_download() as info:
                page.click("#audit-export-jsonl")
            lines = open(info.value.path(), encoding="utf-8").read().splitlines()
            assert [json.loads(line)["id"] for line in lines] == [wrote["invocation_id"]]

            page.goto(up.base + "/admin/console/audit/?status=invalid_arguments")
            assert page.locator("#audit-rows tr").count() == 2

            page.goto(up.base + "/admin/console/audit/?q=kraken&since=yesterday")
            assert "since" in page.locator("#audit-error-fields").inner_text()
            assert page.locator("#audit-rows tr").count() == 0

            page.goto(shared)
            page.locator("#audit-rows tr a").first.click()
            page.wait_for_selector("#audit-call")
            assert "release the kraken at dawn" in page.locator("#audit-arguments").inner_text()
            assert "tool.executed" in page.locator("#audit-events").inner_text()
            browser.close()
    finally:
        assert up.stop() == 0
