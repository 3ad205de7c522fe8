"""Writes of the dashboard: the rollups of the invocation audit (console_app.models), refreshed every minute by
django-q2. Each refresh re-aggregates a window of recent minutes whole, so it is idempotent and rows committed
up to LATE_WINDOW after their `created_at` are still counted."""
from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from console_app.dashboard.histogram import HISTOGRAM_SQL
from console_app.models import AgentHour, InvocationMinute, RollupState, ToolHour
from tools_app.models import ToolInvocation

STATE_NAME = "invocations"
LATE_WINDOW = timedelta(minutes=10)  # re-aggregated on every refresh
HISTORY = timedelta(hours=25)  # what a first (or long-delayed) refresh fills in: the dashboard's 24 h and the hour before
KEEP = timedelta(hours=48)
SHELL_PREFIX = "command denied by safety policy: "  # tools_app.hooks.SecurityFilterHook's refusal

# Why a call was refused, from the audit row alone: the shell check's refusal names its rule groups first
# ("<group>: <reason>; ..."), every other `denied` row is a policy decision (catalog, tool permission, agent
# mode, exec allowlist, blocked names, other security hooks); a rate limit has its own status.
DENIAL_SQL = (
    "(CASE WHEN status = 'rate_limited' THEN 'rate_limit' WHEN status <> 'denied' THEN '' "
    f"WHEN left(error, {len(SHELL_PREFIX)}) = '{SHELL_PREFIX}' "
    f"THEN left('shell:' || split_part(substr(error, {len(SHELL_PREFIX) + 1}), ':', 1), 80) ELSE 'policy' END)"
)
REFUSED_SQL = "status IN ('denied', 'rate_limited')"
_LOCK_KEY = 7_314_001  # pg_advisory_xact_lock: one refresh at a time across processes

_INVOCATIONS = ToolInvocation._meta.db_table


def floor_minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


def floor_hour(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


@transaction.atomic
def dashboard_rollup_refresh(*, now: datetime | None = None) -> RollupState:
    """Roll the audit rows created before the current minute into the minute and hour tables: the last
    LATE_WINDOW again (or everything since the previous refresh, up to HISTORY), and drop rollups past KEEP."""
    cutoff = floor_minute(now or timezone.now())
    minutes, hours = InvocationMinute._meta.db_table, ToolHour._meta.db_table
    agents = AgentHour._meta.db_table
    with connection.cursor() as cur:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK_KEY])
        state = RollupState.objects.filter(name=STATE_NAME).first()
        start = cutoff - LATE_WINDOW
        if state is None or state.rolled_until < start:
            start = floor_minute(state.rolled_until) if state is not None else cutoff - HISTORY
        start = max(start, cutoff - HISTORY)
        hour_start = floor_hour(start)
        window = [start, cutoff]
        cur.execute(f"DELETE FROM {minutes} WHERE minute >= %s", [start])
        cur.execute(
            f"INSERT INTO {minutes} (minute, status, calls) SELECT date_trunc('minute', created_at), status, count(*) "
            f"FROM {_INVOCATIONS} WHERE created_at >= %s AND created_at < %s GROUP BY 1, 2", window)
        cur.execute(f"DELETE FROM {hours} WHERE hour >= %s", [hour_start])
        cur.execute(
            f"INSERT INTO {hours} (hour, tool_name, status, denial, calls, durations) "
            f"SELECT date_trunc('hour', created_at), tool_name, status, {DENIAL_SQL}, count(*), {HISTOGRAM_SQL} "
            f"FROM {_INVOCATIONS} WHERE created_at >= %s AND created_at < %s GROUP BY 1, 2, 3, 4", [hour_start, cutoff])
        cur.execute(f"DELETE FROM {agents} WHERE hour >= %s", [hour_start])
        cur.execute(
            f"INSERT INTO {agents} (hour, agent_key, calls, denials) "
            f"SELECT date_trunc('hour', created_at), agent_key, count(*), count(*) FILTER (WHERE {REFUSED_SQL}) "
            f"FROM {_INVOCATIONS} WHERE created_at >= %s AND created_at < %s GROUP BY 1, 2", [hour_start, cutoff])
        old = cutoff - KEEP
        cur.execute(f"DELETE FROM {minutes} WHERE minute < %s", [old])
        cur.execute(f"DELETE FROM {hours} WHERE hour < %s", [old])
        cur.execute(f"DELETE FROM {agents} WHERE hour < %s", [old])
    state, _ = RollupState.objects.update_or_create(
        name=STATE_NAME, defaults={"rolled_until": cutoff, "refreshed_at": timezone.now()})
    return state
