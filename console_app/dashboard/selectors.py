"""Reads of the dashboard (the admin home). Audit aggregates come from the rollups (console_app.models) up to
`RollupState.rolled_until` and straight from the audit table after it, so every number includes the calls of
the last seconds; docs/console-dashboard.md says how fresh each one is."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Count, Q
from django.utils import timezone

from console_app.dashboard.histogram import BUCKET_SQL, BUCKETS, percentile
from console_app.dashboard.services import (
    DENIAL_SQL, REFUSED_SQL, STATE_NAME, floor_hour, floor_minute,
)
from console_app.models import AgentHour, InvocationMinute, RollupState, ToolHour
from goclaw.models import WorkerHeartbeat
from mcp_app.choices import HealthState
from mcp_app.models import MCPServer
from sandbox_app.models import SandboxProfile
from tools_app.choices import ApprovalStatus, InvocationStatus
from tools_app.models import Agent, AgentToken, ApprovalRequest, ToolInvocation
from tools_app.models.oauth import OAUTH_TOKEN_NAME_PREFIX

HOUR, DAY = timedelta(hours=1), timedelta(hours=24)
TOKEN_HORIZON = timedelta(days=7)
RAN = (InvocationStatus.OK, InvocationStatus.ERROR, InvocationStatus.TIMEOUT)  # statuses with a meaningful duration
TOP_TOOLS = 8
TOP_AGENTS = 10
FEED_SIZE = 20
_INV = ToolInvocation._meta.db_table
# Bucket i of a tool's histogram: the rollups' arrays summed element-wise, plus the raw rows (b) in that bucket.
_SUM_HISTOGRAM = ", ".join(f"coalesce(sum(d[{i + 1}]), 0) + count(*) FILTER (WHERE b = {i})" for i in range(BUCKETS))


def approvals_waiting_count() -> int:
    """Calls waiting for a person now (the header badge): one indexed count."""
    return ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING, expires_at__gt=timezone.now()).count()


@dataclass
class Dashboard:
    """Everything the admin home shows, read at `now`."""

    now: datetime
    rolled_until: datetime | None
    approvals: dict[str, int]
    counts: dict[str, dict[str, int]]
    agents: dict[str, Any]
    tokens_expiring: int
    mcp_health: list[dict[str, Any]]
    sandbox: dict[str, Any]
    heartbeat: dict[str, Any]
    tool_series: list[dict[str, Any]] = field(default_factory=list)
    hours: list[datetime] = field(default_factory=list)
    durations: list[dict[str, Any]] = field(default_factory=list)
    denials: list[dict[str, Any]] = field(default_factory=list)
    feed: list[ToolInvocation] = field(default_factory=list)


def dashboard_get(*, now: datetime | None = None) -> Dashboard:
    """The admin home's numbers and chart data: a fixed number of queries, whatever the audit volume."""
    now = now or timezone.now()
    state = RollupState.objects.filter(name=STATE_NAME).values_list("rolled_until", flat=True).first()
    # Rollups cover [.., cutoff); the audit table the rest. No rollup yet: everything comes from the audit table.
    cutoff = min(state, now) if state is not None else floor_hour(now) - DAY
    first_hour = floor_hour(now) - timedelta(hours=23)
    tool_series, denials_rows = _tool_hours(first_hour, cutoff)
    agents_rows = _agent_totals(first_hour, cutoff)
    approvals = _approvals(now)
    return Dashboard(
        now=now, rolled_until=state, approvals=approvals, counts=_counts(now, cutoff),
        agents=_agents(agents_rows), tokens_expiring=_tokens_expiring(now), mcp_health=_mcp_health(),
        sandbox=_sandbox(), heartbeat=_heartbeat(now), tool_series=tool_series,
        hours=[first_hour + timedelta(hours=i) for i in range(24)], durations=_durations(first_hour, cutoff),
        denials=_denials(denials_rows, approvals), feed=_feed(),
    )


def _fetch(sql: str, params: list) -> list[tuple]:
    with connection.cursor() as cur:
        cur.execute(sql, params)
        return cur.fetchall()


def _counts(now: datetime, cutoff: datetime) -> dict[str, dict[str, int]]:
    """Calls by status in the last 60 and 1,440 whole minutes (plus the current one)."""
    since_day, since_hour = floor_minute(now - DAY), floor_minute(now - HOUR)
    rows = _fetch(
        f"SELECT status, sum(calls) FILTER (WHERE t >= %s), sum(calls) FROM ("
        f" SELECT minute AS t, status, calls FROM {InvocationMinute._meta.db_table} WHERE minute >= %s AND minute < %s"
        f" UNION ALL SELECT created_at, status, 1 FROM {_INV} WHERE created_at >= GREATEST(%s, %s)"
        f") s GROUP BY status", [since_hour, since_day, cutoff, cutoff, since_day])
    hour: dict[str, int] = defaultdict(int)
    day: dict[str, int] = defaultdict(int)
    for status, in_hour, in_day in rows:
        hour[status] += int(in_hour or 0)
        day[status] += int(in_day or 0)
    return {"hour": {"calls": sum(hour.values()), **hour}, "day": {"calls": sum(day.values()), **day}}


def _tool_hours(first_hour: datetime, cutoff: datetime) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Per tool (the TOP_TOOLS busiest of the chart window): calls per hour slot and status; and refusals per
    reason. Hour rollups, then the audit rows after cutoff; grouped and ranked in SQL, so Python sees ~1,300 rows."""
    rows = _fetch(
        f"WITH src AS ("
        f" SELECT hour, tool_name, status, denial, calls FROM {ToolHour._meta.db_table} WHERE hour >= %s AND hour < %s"
        f" UNION ALL SELECT date_trunc('hour', created_at), tool_name, status, {DENIAL_SQL}, 1 FROM {_INV}"
        f"  WHERE created_at >= GREATEST(%s, %s)"
        f"), g AS (SELECT (extract(epoch FROM hour - %s) / 3600)::int AS slot, tool_name, status, denial,"
        f"  sum(calls) AS n FROM src GROUP BY 1, 2, 3, 4),"
        f" top AS (SELECT tool_name FROM g GROUP BY 1 ORDER BY sum(n) DESC, tool_name LIMIT {TOP_TOOLS})"
        f" SELECT 's', slot, tool_name, status, sum(n) FROM g JOIN top USING (tool_name) GROUP BY 2, 3, 4"
        f" UNION ALL SELECT 'd', NULL, NULL, denial, sum(n) FROM g WHERE denial <> '' GROUP BY 4",
        [first_hour, cutoff, cutoff, first_hour, first_hour])
    per_tool: dict[str, list[dict[str, int]]] = {}
    totals: dict[str, int] = defaultdict(int)
    denials: dict[str, int] = {}
    for kind, slot, tool, key, calls in rows:
        if kind == "d":
            denials[key] = int(calls)
        elif 0 <= slot < 24:
            per_tool.setdefault(tool, [{} for _ in range(24)])[slot][key] = int(calls)
            totals[tool] += int(calls)
    busiest = sorted(per_tool, key=lambda t: (-totals[t], t))
    return [{"tool": t, "total": totals[t], "bins": per_tool[t]} for t in busiest], denials


def _durations(first_hour: datetime, cutoff: datetime) -> list[dict[str, Any]]:
    """p50 / p95 per tool over the window, from the summed histograms (calls that ran: ok, error, timeout). The
    arrays are summed element by element in one aggregate pass (an unnest of every row was 5x slower)."""
    ran = [str(s) for s in RAN]
    rows = _fetch(
        f"SELECT tool_name, {_SUM_HISTOGRAM} FROM ("
        f" SELECT tool_name, durations AS d, NULL::int AS b FROM {ToolHour._meta.db_table}"
        f"  WHERE hour >= %s AND hour < %s AND status = ANY(%s)"
        f" UNION ALL SELECT tool_name, NULL, {BUCKET_SQL} FROM {_INV}"
        f"  WHERE created_at >= GREATEST(%s, %s) AND status = ANY(%s)"
        f") s GROUP BY 1", [first_hour, cutoff, ran, cutoff, first_hour, ran])
    out = []
    for tool, *counts in rows:
        hist = [int(n or 0) for n in counts]
        if sum(hist):
            out.append({"tool": tool, "calls": sum(hist), "p50": percentile(hist, 0.5), "p95": percentile(hist, 0.95)})
    return sorted(out, key=lambda d: (-d["calls"], d["tool"]))[:TOP_TOOLS * 2]


def _agent_totals(first_hour: datetime, cutoff: datetime) -> list[tuple]:
    return _fetch(
        f"SELECT agent_key, sum(calls), sum(denials) FROM ("
        f" SELECT agent_key, calls, denials FROM {AgentHour._meta.db_table} WHERE hour >= %s AND hour < %s"
        f" UNION ALL SELECT agent_key, 1, CASE WHEN {REFUSED_SQL} THEN 1 ELSE 0 END FROM {_INV}"
        f"  WHERE created_at >= GREATEST(%s, %s)"
        f") s GROUP BY 1", [first_hour, cutoff, cutoff, first_hour])


def _agents(rows: list[tuple]) -> dict[str, Any]:
    by_calls = sorted(((k, int(c)) for k, c, _ in rows if c), key=lambda r: (-r[1], r[0]))[:TOP_AGENTS]
    by_denials = sorted(((k, int(d)) for k, _, d in rows if d), key=lambda r: (-r[1], r[0]))[:TOP_AGENTS]
    enabled = Agent.objects.filter(enabled=True).count()
    return {"active": sum(1 for _, c, _ in rows if c), "enabled": enabled, "top_calls": by_calls,
            "top_denials": by_denials}


def _approvals(now: datetime) -> dict[str, int]:
    """Waiting now; denied by a person and expired unanswered in the last 24 h."""
    since = now - DAY
    return ApprovalRequest.objects.aggregate(
        waiting=Count("id", filter=Q(status=ApprovalStatus.PENDING, expires_at__gt=now)),
        denied=Count("id", filter=Q(status=ApprovalStatus.DENIED, decided_at__gte=since)),
        expired=Count("id", filter=Q(status=ApprovalStatus.EXPIRED, expires_at__gte=since)),
    )


def _denials(rows: dict[str, int], approvals: dict[str, int]) -> list[dict[str, Any]]:
    """Refusals by reason over the window: policy, each shell-check rule group, rate limit, and approvals a
    person denied or nobody answered."""
    out = [{"reason": reason, "count": n} for reason, n in rows.items()]
    out += [{"reason": "approval_denied", "count": approvals["denied"]},
            {"reason": "approval_expired", "count": approvals["expired"]}]
    return sorted((d for d in out if d["count"]), key=lambda d: (-d["count"], d["reason"]))


def _tokens_expiring(now: datetime) -> int:
    """Tokens a person must renew soon: OAuth access tokens (hourly, renewed by their clients) are not among them."""
    return (AgentToken.objects.filter(revoked=False, expires_at__gt=now, expires_at__lte=now + TOKEN_HORIZON)
            .exclude(name__startswith=OAUTH_TOKEN_NAME_PREFIX).count())


def _mcp_health() -> list[dict[str, Any]]:
    counts = dict(MCPServer.objects.filter(enabled=True).values_list("state").annotate(n=Count("id")))
    return [{"state": state, "label": label, "count": counts.get(state, 0)} for state, label in HealthState.choices]


def _sandbox() -> dict[str, Any]:
    profiles = list(SandboxProfile.objects.values("name", "is_default", "selftest_ok", "selftest_at"))
    default = next((p for p in profiles if p["is_default"]), None)
    return {"default": default, "profiles": len(profiles),
            "failing": sum(1 for p in profiles if p["selftest_ok"] is False),
            "untested": sum(1 for p in profiles if p["selftest_ok"] is None)}


def _heartbeat(now: datetime) -> dict[str, Any]:
    beat = WorkerHeartbeat.objects.order_by("-beat_at").values("name", "beat_at").first()
    if beat is None:
        return {"name": None, "age_seconds": None}
    return {"name": beat["name"], "beat_at": beat["beat_at"], "age_seconds": max(0, int((now - beat["beat_at"]).total_seconds()))}


def _feed() -> list[ToolInvocation]:
    return list(ToolInvocation.objects.only("id", "created_at", "agent_key", "tool_name", "status", "duration_ms")
                .order_by("-created_at")[:FEED_SIZE])
