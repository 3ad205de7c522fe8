"""MCP conformance figures (docs/mcp-conformance.md): the harness of tests/mcp_app/test_conformance.py, run standalone
against a fresh `manage.py up` on the benchmark's own data dir, writing benchmarks/results/mcp_conformance.json:
per protocol revision, the required scenarios passed out of those that apply, the ones set aside as not applicable
(tests/mcp_app/conformance_not_applicable.yaml), what fails and why, and what the suite runs without scoring. Not a
speed benchmark, so `run_all.py` (bench_*.py) does not pick it up; run it as `python benchmarks/mcp_conformance.py`
after `make conformance-deps`. Exits 1 when an applicable required scenario fails (the JSON is written anyway)."""
from __future__ import annotations

import shutil
import sys

from _common import BENCH_DATA, ROOT, write_result

sys.path.insert(0, str(ROOT))
from tests.mcp_app.conformance import conformance_run, figures, render, start_goclaw  # noqa: E402
from tests.servers import manage, up_env  # noqa: E402

AGENT = "conformance"
SEED = ("from tests.mcp_app.conformance import fixture_catalog; from tools_app.models import Agent; "
        f"fixture_catalog(Agent.objects.get(key={AGENT!r}))")


def main() -> int:
    home = BENCH_DATA / "conformance"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    env = up_env(home / "var", one_process_each=False, GOCLAW_LOG_LEVEL="warning", GOCLAW_ADMIN_PASSWORD="bench-admin-pw-1",
                 GOCLAW_WEB_WORKERS="1", GOCLAW_Q_WORKERS="1")
    up, mcp_port = start_goclaw(env, home / "up.log")
    try:
        manage(env, "create_agent", AGENT)
        manage(env, "shell", "-c", SEED)
        token = manage(env, "issue_token", AGENT).strip()
        reports = conformance_run(mcp_port, token, home / "results")
    finally:
        up.stop()
    for report in reports.values():
        print(render(report), end="\n\n")
    write_result("mcp_conformance", figures(reports))
    return 1 if any(report.failing for report in reports.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
