"""The audit retention purge: rows older than GOCLAW_AUDIT_RETENTION_DAYS go from every audit table (invocations,
their stored outputs, audit events) in short batches; what it removed is reported; 0 keeps everything; the command's
--dry-run removes nothing."""
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from tools_app import tasks
from tools_app.models import StoredToolOutput, ToolInvocation
from tools_app.services.audit import audit_purge_expired

pytestmark = pytest.mark.django_db


def audit_row(days_ago: float, *, with_output: bool = False, **fields) -> ToolInvocation:
    """A call made `days_ago`, with the output it stored then (outputs age like the calls that stored them)."""
    created_at = timezone.now() - timedelta(days=days_ago)
    output = (StoredToolOutput.objects.create(agent_key="a", tool_name="t", content="x" * 100, created_at=created_at)
              if with_output else None)
    return ToolInvocation.objects.create(agent_key="a", tool_name="t", status="ok", created_at=created_at,
                                         output_id=output.pk if output else None, **fields)


def test_rows_past_the_retention_go_with_their_stored_outputs_and_the_rest_stay(settings):
    settings.AUDIT_RETENTION_DAYS = 30
    old = [audit_row(40 + i, with_output=i % 2 == 0) for i in range(7)]
    kept = [audit_row(29), audit_row(1, with_output=True)]
    kept_output = StoredToolOutput.objects.get(pk=kept[1].output_id)
    report = audit_purge_expired(batch_size=3)
    assert report["removed"] == 7 and report["outputs_removed"] == 4
    assert report["batches"] == 5  # calls 3 + 3 + 1, outputs 3 + 1: one short transaction each
    assert not ToolInvocation.objects.filter(pk__in=[r.pk for r in old]).exists()
    assert not StoredToolOutput.objects.filter(pk__in=[r.output_id for r in old if r.output_id]).exists()
    assert set(ToolInvocation.objects.values_list("pk", flat=True)) == {r.pk for r in kept}
    assert StoredToolOutput.objects.filter(pk=kept_output.pk).exists()
    assert report["oldest_kept"] == kept[0].created_at
    assert abs((timezone.now() - report["cutoff"]) - timedelta(days=30)) < timedelta(minutes=1)


def test_a_retention_of_zero_keeps_everything(settings):
    settings.AUDIT_RETENTION_DAYS = 0
    row = audit_row(5000)
    report = audit_purge_expired()
    assert (report["removed"], report["cutoff"]) == (0, None)
    assert ToolInvocation.objects.filter(pk=row.pk).exists() and report["oldest_kept"] == row.created_at


def test_the_scheduled_task_purges_with_the_configured_retention_and_logs_a_report(settings, caplog):
    settings.AUDIT_RETENTION_DAYS = 7
    audit_row(8), audit_row(9, with_output=True)
    young = audit_row(6)
    with caplog.at_level("INFO", logger="goclaw.audit"):
        report = tasks.purge_expired_audit()
    assert (report["removed"], report["outputs_removed"]) == (2, 1)
    assert list(ToolInvocation.objects.values_list("pk", flat=True)) == [young.pk]
    assert "removed 2 audit rows and 1 stored outputs" in caplog.text and "oldest kept" in caplog.text


def test_the_purge_is_scheduled_hourly():
    from django_q.models import Schedule

    schedule = Schedule.objects.get(func="tools_app.tasks.purge_expired_audit")
    assert (schedule.schedule_type, schedule.cron) == (Schedule.CRON, "17 * * * *")


def test_the_command_dry_run_says_what_would_go_and_removes_nothing(settings):
    settings.AUDIT_RETENTION_DAYS = 10
    audit_row(11, with_output=True), audit_row(13)
    out = StringIO()
    call_command("audit_purge", "--dry-run", stdout=out)
    assert "would remove 2 audit rows and 1 stored outputs" in out.getvalue()
    assert ToolInvocation.objects.count() == 2 and StoredToolOutput.objects.count() == 1
    out = StringIO()
    call_command("audit_purge", "--days", "12", stdout=out)  # a one-off retention overrides the setting
    assert "removed 1 audit rows and 0 stored outputs" in out.getvalue()
    assert ToolInvocation.objects.count() == 1
    out = StringIO()
    call_command("audit_purge", "--days", "0", stdout=out)
    assert "keep forever" in out.getvalue() and ToolInvocation.objects.count() == 1
