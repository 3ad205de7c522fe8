"""The console's own tables: dashboard rollups of the invocation audit, kept by a django-q2 schedule
(console_app.tasks.dashboard_rollup) so the admin home never scans a day of audit rows."""
from django.contrib.postgres.fields import ArrayField
from django.db import models


class InvocationMinute(models.Model):
    """Calls per minute and status: the live counts (last hour, last 24 h) read these, exact to the minute."""

    minute = models.DateTimeField()
    status = models.CharField(max_length=20)
    calls = models.IntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["minute", "status"], name="console_minute_status")]

    def __str__(self) -> str:
        return f"{self.minute:%Y-%m-%d %H:%M} {self.status}: {self.calls}"


class ToolHour(models.Model):
    """Calls per hour, tool, status and denial reason, with a duration histogram (fixed log buckets,
    console_app.dashboard.histogram) for p50 / p95: the charts read these."""

    hour = models.DateTimeField()
    tool_name = models.CharField(max_length=128)
    status = models.CharField(max_length=20)
    # "" unless refused: "policy", "shell:<rule group>" or "rate_limit" (console_app.dashboard.rollup.DENIAL_SQL).
    denial = models.CharField(max_length=80, blank=True)
    calls = models.IntegerField()
    durations = ArrayField(models.IntegerField(), default=list)

    class Meta:
        indexes = [models.Index(fields=["hour"], name="console_toolhour_hour")]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h {self.tool_name} {self.status}: {self.calls}"


class AgentHour(models.Model):
    """Calls and refusals (denied or rate-limited) per hour and agent: top agents and active agents read these."""

    hour = models.DateTimeField()
    agent_key = models.CharField(max_length=64)
    calls = models.IntegerField()
    denials = models.IntegerField()

    class Meta:
        indexes = [models.Index(fields=["hour"], name="console_agenthour_hour")]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h {self.agent_key}: {self.calls}"


class RollupState(models.Model):
    """How far the rollups reach: every audit row created before `rolled_until` is in them (one row, name
    "invocations"); the dashboard reads rows from then on straight from the audit table."""

    name = models.CharField(max_length=32, primary_key=True)
    rolled_until = models.DateTimeField()
    refreshed_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} rolled up until {self.rolled_until:%Y-%m-%d %H:%M:%S}"
