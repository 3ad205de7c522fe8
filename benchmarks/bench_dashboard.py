"""The admin home (dashboard) with 1,000,000 invocation rows, all within the last 24 h (the hard case): server time
of GET /admin/ in-process (target p50 <= 300 ms), its SQL query count, and the cost of the rollup job (first fill
of 25 h, and the every-minute refresh). For comparison, the same page with no rollup at all (audit table only)."""
from __future__ import annotations

import os
import time

from _common import django_setup, summary_ms, write_result

ROWS = int(os.environ.get("BENCH_DASHBOARD_ROWS", "1000000"))
TOOLS, AGENTS = 40, 60
RUNS = 25


def fill(cursor, rows: int) -> float:
    """`rows` audit rows spread uniformly over the last 24 h: 40 tools, 60 agents, statuses as a busy platform sees
    them, some refusals from the shell check (5 rule groups) and durations from 0.1 ms to minutes."""
    started = time.perf_counter()
    cursor.execute("DELETE FROM tools_app_toolinvocation")
    cursor.execute("""
        INSERT INTO tools_app_toolinvocation (id, agent_key, user_id, session_key, channel, tool_name, arguments, status,
            observed, observe_reasons, duration_ms, result_size, error, output_id, request_id, actor, sandbox_backend,
            sandbox_profile, created_at)
        SELECT gen_random_uuid(), 'agent-' || (g %% %(agents)s), 'u', 's', '', 'tool_' || ((g * 7) %% %(tools)s), '{}',
            s.status, false, '[]', exp(random() * 12 - 2), 100,
            CASE WHEN s.status = 'denied' AND random() < 0.5
                 THEN 'command denied by safety policy: ' || (ARRAY['destructive_ops','fork_bomb','reverse_shell',
                      'data_exfiltration','privilege_escalation'])[1 + (g %% 5)] || ': refused'
                 WHEN s.status = 'denied' THEN 'tool x is not available to this agent' ELSE '' END,
            NULL, '', '', '', '', now() - random() * interval '24 hours'
        FROM generate_series(1, %(rows)s) g,
        LATERAL (SELECT CASE WHEN r < 0.80 THEN 'ok' WHEN r < 0.88 THEN 'error' WHEN r < 0.94 THEN 'denied'
                             WHEN r < 0.97 THEN 'rate_limited' WHEN r < 0.98 THEN 'timeout'
                             WHEN r < 0.99 THEN 'invalid_arguments' ELSE 'pending_approval' END AS status
                 FROM (SELECT random() + g * 0 AS r) x) s
    """, {"rows": rows, "tools": TOOLS, "agents": AGENTS})
    cursor.execute("VACUUM ANALYZE tools_app_toolinvocation")  # as autovacuum would, before the timed part
    return time.perf_counter() - started


def main() -> None:
    django_setup()
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone
    from datetime import timedelta

    from console_app.dashboard.services import dashboard_rollup_refresh
    from console_app.models import AgentHour, InvocationMinute, RollupState, ToolHour

    with connection.cursor() as cur:
        fill_s = fill(cur, ROWS)
    user_model = get_user_model()
    if not user_model.objects.filter(username="bench-dash").exists():
        user_model.objects.create_superuser("bench-dash", password="bench-dash-pw-1")
    client = Client()
    client.login(username="bench-dash", password="bench-dash-pw-1")

    def page(runs: int) -> tuple[list[float], int, str]:
        samples, queries, html = [], 0, ""
        for _ in range(runs):
            with CaptureQueriesContext(connection) as ctx:
                started = time.perf_counter()
                response = client.get("/admin/")
                samples.append(time.perf_counter() - started)
            assert response.status_code == 200
            queries, html = len(ctx), response.content.decode()
        return samples, queries, html

    # Without any rollup: every number from the audit table (what a platform whose worker never ran pays).
    RollupState.objects.all().delete()
    for model in (InvocationMinute, ToolHour, AgentHour):
        model.objects.all().delete()
    raw, raw_queries, _ = page(3)

    started = time.perf_counter()
    dashboard_rollup_refresh()
    first_fill_s = time.perf_counter() - started
    rollup_rows = {"minute": InvocationMinute.objects.count(), "tool_hour": ToolHour.objects.count(),
                   "agent_hour": AgentHour.objects.count()}
    steady = []
    for _ in range(5):
        started = time.perf_counter()
        dashboard_rollup_refresh()
        steady.append(time.perf_counter() - started)

    page(2)  # warm-up: templates, connections
    fresh, fresh_queries, html = page(RUNS)
    assert 'id="goclaw-dashboard"' in html
    # The job 10 minutes late: ~7,000 rows read straight from the audit table on top of the rollups.
    RollupState.objects.filter(name="invocations").update(rolled_until=timezone.now() - timedelta(minutes=10))
    late, _, _ = page(RUNS)
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM tools_app_toolinvocation WHERE created_at >= now() - interval '24 hours'")
        in_window = cur.fetchone()[0]

    write_result("dashboard", {
        "rows": ROWS, "rows_in_last_24h": in_window, "tools": TOOLS, "agents": AGENTS, "fill_s": round(fill_s, 1),
        "admin_home": {**summary_ms(fresh), "queries": fresh_queries, "target_p50_ms": 300},
        "admin_home_rollup_10_min_late": summary_ms(late),
        "admin_home_without_rollups": {**summary_ms(raw), "queries": raw_queries},
        "rollup": {"first_fill_25h_s": round(first_fill_s, 2), "every_minute_refresh": summary_ms(steady),
                   "rows": rollup_rows},
    })


if __name__ == "__main__":
    main()
