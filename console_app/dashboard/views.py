"""The dashboard is the admin home (templates/admin/index.html reads `console.dashboard`, built here); this module
also serves the header badge's count (JSON, re-read when an approval event arrives) and /admin/console/."""
from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.http import HttpResponseRedirect, JsonResponse
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from console_app.dashboard import charts
from goclaw.authz import person_required
from console_app.dashboard.selectors import DAY, HOUR, approvals_waiting_count, dashboard_get

DASHBOARD_PERMISSION = "tools_app.view_toolinvocation"  # the dashboard is read from the audit rows
COUNT_TILES = [("calls", "Calls", None), ("error", "Errors", "error"), ("denied", "Denials", "denied"),
               ("rate_limited", "Rate-limited", "rate_limited"), ("timeout", "Timeouts", "timeout")]


def _invocations_url(**filters: str) -> str:
    return reverse("admin:tools_app_toolinvocation_changelist") + ("?" + urlencode(filters) if filters else "")


def _denial_row(reason: str, count: int) -> dict[str, Any]:
    if reason == "approval_denied":
        return {"label": "approval denied by a person", "count": count,
                "url": reverse("admin:tools_app_approvalrequest_changelist") + "?status__exact=denied"}
    if reason == "approval_expired":
        return {"label": "approval expired unanswered", "count": count,
                "url": reverse("admin:tools_app_approvalrequest_changelist") + "?status__exact=expired"}
    if reason == "rate_limit":
        return {"label": "rate limit", "count": count, "url": _invocations_url(status__exact="rate_limited")}
    if reason.startswith("shell:"):
        group = reason.removeprefix("shell:")
        return {"label": f"shell check: {group}", "count": count,
                "url": _invocations_url(status__exact="denied", q=f"safety policy: {group}")}
    return {"label": "policy", "count": count, "url": _invocations_url(status__exact="denied")}


def dashboard_context(request) -> dict[str, Any]:
    """The dashboard's data, with links and inline SVG charts, for templates/admin/index.html."""
    dash = dashboard_get()
    since = {"hour": dash.now - HOUR, "day": dash.now - DAY}
    tiles = []
    for key, title, status in COUNT_TILES:
        cells = []
        for window in ("hour", "day"):
            filters = {"created_at__gte": since[window].isoformat(timespec="seconds")}
            if status:
                filters["status__exact"] = status
            cells.append({"count": dash.counts[window].get(key, 0), "url": _invocations_url(**filters)})
        tiles.append({"key": key, "title": title, "hour": cells[0], "day": cells[1]})
    series = [{"tool": s["tool"], "total": s["total"], "url": _invocations_url(tool_name=s["tool"]),
               "svg": charts.stacked_bars(s["bins"], dash.hours, f"calls of {s['tool']} per hour, by status")}
              for s in dash.tool_series]
    durations = dash.durations
    duration_svg = charts.hbars(
        [(d["tool"], d["p50"] or 0, f"{charts.duration_label(d['p50'])} / {charts.duration_label(d['p95'])}")
         for d in durations], "p50 (dark) and p95 (light) duration per tool",
        second=[d["p95"] for d in durations]) if durations else None
    denials = [_denial_row(d["reason"], d["count"]) for d in dash.denials]
    denial_svg = charts.hbars([(d["label"], d["count"], str(d["count"])) for d in denials], "denials by reason",
                              colour=charts.STATUS_COLOURS["denied"]) if denials else None
    agents = dash.agents
    top_calls_svg = charts.hbars([(k, n, str(n)) for k, n in agents["top_calls"]], "top agents by calls") \
        if agents["top_calls"] else None
    top_denials_svg = charts.hbars([(k, n, str(n)) for k, n in agents["top_denials"]], "top agents by denials",
                                   colour=charts.STATUS_COLOURS["denied"]) if agents["top_denials"] else None
    return {
        "data": dash, "tiles": tiles, "series": series, "legend": charts.legend(), "duration_svg": duration_svg,
        "denials": denials, "denial_svg": denial_svg, "top_calls_svg": top_calls_svg,
        "top_denials_svg": top_denials_svg,
        "top_calls": [{"agent": k, "calls": n, "url": _invocations_url(agent_key=k)} for k, n in agents["top_calls"]],
        "top_denials": [{"agent": k, "denials": n, "url": _invocations_url(agent_key=k, status__exact="denied")}
                        for k, n in agents["top_denials"]],
        "feed": [{"created_at": i.created_at, "agent": i.agent_key, "tool": i.tool_name, "status": i.status,
                  "duration": charts.duration_label(i.duration_ms)} for i in dash.feed],
        "mcp_total": sum(h["count"] for h in dash.mcp_health),
        "heartbeat_stale": dash.heartbeat["age_seconds"] is None or dash.heartbeat["age_seconds"] > 120,
    }


@person_required("tools_app.view_approvalrequest")
@never_cache
@require_GET
def badge(request):
    """The waiting-approvals count for the header badge and the tab title (JSON)."""
    return JsonResponse({"approvals_waiting": approvals_waiting_count()})


@person_required(DASHBOARD_PERMISSION)
def home(request):
    """/admin/console/ is the dashboard, which is the admin home."""
    return HttpResponseRedirect(reverse("admin:index"))
