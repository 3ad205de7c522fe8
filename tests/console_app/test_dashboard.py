"""The dashboard (the admin home): its numbers agree with the audit table whether they come from the rollups or
straight from the audit rows, refusals are told apart by reason, hostile labels stay text, the header badge
costs one query on every admin page, and the home page's query count does not grow with the data."""
import math
import random
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from console_app.dashboard import histogram
from console_app.dashboard.selectors import dashboard_get
from console_app.dashboard.services import dashboard_rollup_refresh
from console_app.models import InvocationMinute, RollupState, ToolHour
from goclaw.services import SCHEDULES
from tests.factories import make_agent
from tools_app import pipeline
from tools_app.models import ApprovalRequest, ToolInvocation
from tools_app.security.shell_check.rules import RULE_GROUPS
from tools_app.services import approvals as approvals_svc
from tools_app.services.agents import agent_update

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("counters_reread_only_after_a_change")]  # counts queries

STATUSES = ["ok", "ok", "ok", "error", "denied", "rate_limited", "timeout", "invalid_arguments"]


@pytest.fixture
def admin_client(django_user_model):
    django_user_model.objects.create_superuser("dash", password="pw-dash-12345")
    client = Client(enforce_csrf_checks=True)
    client.login(username="dash", password="pw-dash-12345")
    return client


def audit_rows(n, *, now, seed=7, tools=("read_file", "exec", "web_fetch"), agents=("alpha", "beta", "gamma"),
               spread=timedelta(hours=30)):
    """n audit rows spread over `spread` before `now`, with random status, tool, agent and duration."""
    rng = random.Random(seed)
    rows = [ToolInvocation(agent_key=rng.choice(agents), tool_name=rng.choice(tools), status=rng.choice(STATUSES),
                           duration_ms=rng.lognormvariate(3, 1.5),
                           error="" if rng.random() < 0.7 else "command denied by safety policy: fork_bomb: boom",
                           created_at=now - spread * rng.random()) for _ in range(n)]
    ToolInvocation.objects.bulk_create(rows)
    return rows


def expected_counts(rows, now):
    out = {}
    for window, span in (("hour", timedelta(hours=1)), ("day", timedelta(hours=24))):
        since = (now - span).replace(second=0, microsecond=0)
        inside = [r for r in rows if since <= r.created_at <= now]
        counts = {"calls": len(inside)}
        for r in inside:
            counts[r.status] = counts.get(r.status, 0) + 1
        out[window] = counts
    return out


def comparable(dash):
    return (dash.counts, dash.agents, dash.tool_series, dash.durations, dash.denials)


def test_numbers_are_the_same_from_rollups_and_from_the_audit_table():
    now = timezone.now()
    rows = audit_rows(600, now=now)
    raw = dashboard_get(now=now)  # no rollup yet: everything read from the audit rows
    assert raw.rolled_until is None
    assert raw.counts == expected_counts(rows, now)

    dashboard_rollup_refresh(now=now)
    assert RollupState.objects.get().rolled_until == now.replace(second=0, microsecond=0)
    assert InvocationMinute.objects.exists() and ToolHour.objects.exists()
    rolled = dashboard_get(now=now)
    assert comparable(rolled) == comparable(raw)

    first_hour = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=23)
    window = [r for r in rows if r.created_at >= first_hour]
    assert sum(s["total"] for s in rolled.tool_series) == len(window)
    for s in rolled.tool_series:
        assert s["total"] == sum(1 for r in window if r.tool_name == s["tool"])
        assert sum(sum(b.values()) for b in s["bins"]) == s["total"]
    calls = {a: sum(1 for r in window if r.agent_key == a) for a in {r.agent_key for r in window}}
    assert dict(rolled.agents["top_calls"]) == calls
    refused = {a: sum(1 for r in window if r.agent_key == a and r.status in ("denied", "rate_limited")) for a in calls}
    assert dict(rolled.agents["top_denials"]) == {a: n for a, n in refused.items() if n}
    assert rolled.agents["active"] == len(calls)


def test_calls_after_the_last_rollup_are_counted_from_the_audit_table():
    now = timezone.now()
    dashboard_rollup_refresh(now=now - timedelta(minutes=3))
    fresh = audit_rows(40, now=now, seed=3, spread=timedelta(minutes=2))
    dash = dashboard_get(now=now)
    assert dash.counts["hour"]["calls"] == 40
    assert sum(s["total"] for s in dash.tool_series) == 40
    assert dash.counts == expected_counts(fresh, now)


def test_a_refresh_is_idempotent_and_catches_rows_committed_late():
    now = timezone.now()
    audit_rows(300, now=now, seed=11)
    dashboard_rollup_refresh(now=now)
    snapshot = sorted(ToolHour.objects.values_list("hour", "tool_name", "status", "denial", "calls", "durations"))
    dashboard_rollup_refresh(now=now)
    assert sorted(ToolHour.objects.values_list("hour", "tool_name", "status", "denial", "calls", "durations")) == snapshot
    # A row stamped before the last refresh but committed after it (a slow transaction): the next refresh has it.
    ToolInvocation.objects.create(agent_key="late", tool_name="late_tool", status="ok", duration_ms=3,
                                  created_at=now - timedelta(minutes=4))
    dashboard_rollup_refresh(now=now + timedelta(minutes=1))
    dash = dashboard_get(now=now + timedelta(minutes=1))
    assert dict(dash.agents["top_calls"])["late"] == 1
    assert ToolHour.objects.filter(tool_name="late_tool", calls=1).exists()


def test_p50_and_p95_come_within_a_bucket_of_the_exact_values():
    now = timezone.now()
    rng = random.Random(5)
    durations = [rng.lognormvariate(4, 1.2) for _ in range(2000)]
    ToolInvocation.objects.bulk_create([ToolInvocation(agent_key="a", tool_name="timed", status="ok", duration_ms=d,
                                                       created_at=now - timedelta(minutes=rng.randint(1, 600)))
                                        for d in durations])
    dashboard_rollup_refresh(now=now)
    (row,) = [d for d in dashboard_get(now=now).durations if d["tool"] == "timed"]
    ordered = sorted(durations)
    for q, key in ((0.5, "p50"), (0.95, "p95")):
        exact = ordered[math.ceil(q * len(ordered)) - 1]
        assert abs(math.log(row[key] / exact)) <= math.log(histogram.RATIO), (key, row[key], exact)
    low, high = histogram.bucket_bounds(histogram.bucket_of(ordered[1000]))
    assert low <= ordered[1000] < high


def test_denials_are_told_apart_by_policy_shell_rule_group_rate_limit_and_approval(django_user_model):
    agent = make_agent(other_config={"rate_limit_per_hour": 1})
    assert pipeline.execute(pipeline.ToolCall(agent=agent, tool="no_such_tool", arguments={})).status == "denied"
    shell = pipeline.execute(pipeline.ToolCall(agent=agent, tool="exec", arguments={"command": ":(){ :|:& };:"},
                                               session_key="s1"))
    assert shell.status == "denied" and "safety policy" in shell.for_llm
    assert pipeline.execute(pipeline.ToolCall(agent=agent, tool="datetime", arguments={}, session_key="s2")).status == "ok"
    limited = pipeline.execute(pipeline.ToolCall(agent=agent, tool="datetime", arguments={}, session_key="s2"))
    assert limited.status == "rate_limited"
    cautious = agent_update(agent=make_agent(), mode="cautious")
    asked = pipeline.execute(pipeline.ToolCall(agent=cautious, tool="exec", arguments={"command": "echo hi"}))
    person = django_user_model.objects.create_superuser("decider", password="pw-decider-1")
    approvals_svc.approval_decide(approval_id=asked.extra["approval_id"], decision="deny", actor=person)

    dashboard_rollup_refresh(now=timezone.now() - timedelta(minutes=1))  # the shell and policy rows are mixed:
    reasons = {d["reason"]: d["count"] for d in dashboard_get().denials}  # some rolled up, some read raw
    shell_reasons = [r for r in reasons if r.startswith("shell:")]
    assert len(shell_reasons) == 1 and shell_reasons[0].removeprefix("shell:") in RULE_GROUPS
    assert reasons["policy"] == 1 and reasons[shell_reasons[0]] == 1
    assert reasons["rate_limit"] == 1 and reasons["approval_denied"] == 1
    assert ApprovalRequest.objects.get(pk=asked.extra["approval_id"]).status == "denied"


def test_the_admin_home_is_the_dashboard_and_keeps_its_links_and_app_list(admin_client):
    now = timezone.now()
    audit_rows(50, now=now, spread=timedelta(minutes=50))
    html = admin_client.get("/admin/").content.decode()
    assert 'id="goclaw-dashboard"' in html and 'id="goclaw-feed-body"' in html
    for link in ("goclaw-approvals-link", "goclaw-team-boards-link", "goclaw-config-link"):
        assert f'id="{link}"' in html
    assert "Pending approvals (live queue)" in html and 'id="content-main"' in html  # the app list stays below
    assert '<svg class="goclaw-chart"' in html and "Denials by reason" in html
    assert "/admin/tools_app/toolinvocation/?" in html and "status__exact=error" in html
    assert html.count('<tr><td>') >= 20  # the feed's latest calls, server-rendered


def test_hostile_tool_names_and_agent_keys_are_shown_as_text(admin_client):
    now = timezone.now()
    evil_tool, evil_agent = '<script>alert("t")</script>', '"><img src=x onerror=alert(1)>'
    ToolInvocation.objects.bulk_create([
        ToolInvocation(agent_key=evil_agent, tool_name=evil_tool, status=s, duration_ms=5,
                       created_at=now - timedelta(minutes=i)) for i, s in enumerate(["ok", "denied", "error"] * 3)])
    dashboard_rollup_refresh(now=now - timedelta(minutes=4))
    html = admin_client.get("/admin/").content.decode()
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(&quot;t&quot;)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html


def test_the_home_page_query_count_does_not_grow_with_the_data(admin_client):
    def queries():
        with CaptureQueriesContext(connection) as ctx:
            assert admin_client.get("/admin/").status_code == 200
        return len(ctx)

    small = queries()
    now = timezone.now()
    audit_rows(400, now=now, seed=1, tools=[f"tool_{i}" for i in range(30)], agents=[f"agent-{i}" for i in range(40)])
    dashboard_rollup_refresh(now=now - timedelta(minutes=2))
    audit_rows(50, now=now, seed=2, spread=timedelta(minutes=1))
    for _ in range(3):
        agent, _req = pending_request()
    assert queries() == small
    assert small <= 25  # session, user, perms, the dashboard's 12 reads, the badge's count, the admin log


def pending_request():
    agent = agent_update(agent=make_agent(), mode="cautious")
    outcome = pipeline.execute(pipeline.ToolCall(agent=agent, tool="exec", arguments={"command": "echo badge"}))
    return agent, ApprovalRequest.objects.get(pk=outcome.extra["approval_id"])


def test_every_admin_page_shows_the_badge_and_tab_title_count_for_one_query(admin_client):
    page = "/admin/tools_app/agent/"

    def load():
        with CaptureQueriesContext(connection) as ctx:
            html = admin_client.get(page).content.decode()
        return html, [q["sql"] for q in ctx.captured_queries]

    html, before = load()
    assert 'id="goclaw-approvals-badge"' in html and 'id="goclaw-approvals-count">0<' in html
    assert "console_app/dashboard.js" in html and "<title>Select agent" in html
    pending_request()
    pending_request()
    html, after = load()
    assert 'id="goclaw-approvals-count">2<' in html and "<title>(2) Select agent" in html
    assert len([q for q in after if "tools_app_approvalrequest" in q]) == 1
    assert len(after) == len(before)  # the count is the same one query whatever it says


def test_the_badge_count_endpoint_is_for_staff_who_may_see_approvals(admin_client, django_user_model):
    pending_request()
    assert admin_client.get("/admin/console/dashboard/badge.json").json() == {"approvals_waiting": 1}
    assert admin_client.get("/admin/console/")["Location"] == "/admin/"
    anonymous = Client().get("/admin/console/dashboard/badge.json")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/admin/login/")
    django_user_model.objects.create_user("plainstaff", password="pw-plain-12345", is_staff=True)
    staff = Client()
    staff.login(username="plainstaff", password="pw-plain-12345")
    assert staff.get("/admin/console/dashboard/badge.json").status_code == 403
    home = staff.get("/admin/").content.decode()  # no audit permission: no dashboard, no badge
    assert 'id="goclaw-dashboard"' not in home and 'id="goclaw-approvals-badge"' not in home


def test_the_rollup_runs_every_minute_from_a_django_q2_schedule():
    assert SCHEDULES["console dashboard rollup"] == ("console_app.tasks.dashboard_rollup", "* * * * *")
    from django_q.models import Schedule

    from goclaw.services import schedules_ensure

    schedules_ensure()
    assert Schedule.objects.get(name="console dashboard rollup").func == "console_app.tasks.dashboard_rollup"
