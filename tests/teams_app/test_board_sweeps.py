"""The board sweep: expired claims return to pending (owner kept), long-waiting pending and in-review tasks become
stale, blocked tasks whose blockers all completed are released; people then recover stale work (retry, reassign)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from teams_app.errors import TaskConflict
from teams_app.models import TaskDependency, TeamEvent, TeamTask
from teams_app.services import tasks as svc
from teams_app.services.sweeps import board_sweep
from teams_app.services.teams import team_create, team_update
from teams_app.tasks import board_sweep as scheduled_board_sweep
from tests.factories import make_agent

pytestmark = pytest.mark.django_db


def fresh(task: TeamTask) -> TeamTask:
    return TeamTask.objects.select_related("owner").get(pk=task.pk)


def ago(**delta) -> timezone.datetime:
    return timezone.now() - timedelta(**delta)


def test_an_expired_claim_returns_to_pending_with_its_owner_kept(crew, make_task):
    task = svc.task_claim(actor=crew.as_worker, team=crew.team, task=make_task())
    live = svc.task_claim(actor=crew.as_worker2, team=crew.team, task=make_task("still held"))
    TeamTask.objects.filter(pk=task.pk).update(lock_expires_at=ago(seconds=1))
    assert board_sweep() == {"released": 1, "stale": 0, "unblocked": 0, "handoffs_expired": 0}
    row = fresh(task)
    assert (row.status, row.owner, row.lock_expires_at) == ("pending", crew.worker, None)
    assert fresh(live).status == "in_progress"
    event = TeamEvent.objects.get(task=task, event_type="released")
    assert event.actor == "system:sweep"
    with pytest.raises(TaskConflict):
        svc.task_claim(actor=crew.as_worker2, team=crew.team, task=task)
    assert svc.task_claim(actor=crew.as_worker, team=crew.team).pk == task.pk


def test_progress_keeps_a_claim_alive_past_its_first_deadline(crew, make_task):
    task = svc.task_claim(actor=crew.as_worker, team=crew.team, task=make_task())
    TeamTask.objects.filter(pk=task.pk).update(lock_expires_at=ago(seconds=-30))
    later = timezone.now() + timedelta(minutes=5)
    svc.task_progress(actor=crew.as_worker, task=task, percent=10)
    assert board_sweep(now=later)["released"] == 0
    assert fresh(task).status == "in_progress"
    assert board_sweep(now=later + timedelta(minutes=crew.team.lock_minutes))["released"] == 1


def test_a_pending_task_untouched_past_the_team_setting_goes_stale(crew, make_task):
    team_update(actor=crew.system, team=crew.team, stale_after_minutes=30)
    old, recent = make_task("old"), make_task("recent")
    TeamTask.objects.filter(pk=old.pk).update(updated_at=ago(minutes=31))
    TeamTask.objects.filter(pk=recent.pk).update(updated_at=ago(minutes=29))
    assert board_sweep()["stale"] == 1
    assert (fresh(old).status, fresh(recent).status) == ("stale", "pending")
    assert TeamEvent.objects.get(task=old, event_type="stale").data == {"from": "pending"}
    assert board_sweep()["stale"] == 0


def test_a_task_waiting_too_long_in_review_goes_stale(crew, make_task):
    task = svc.task_claim(actor=crew.as_worker, team=crew.team, task=make_task())
    svc.task_review(actor=crew.as_worker, task=task)
    TeamTask.objects.filter(pk=task.pk).update(updated_at=ago(minutes=crew.team.review_stale_after_minutes - 1))
    assert board_sweep()["stale"] == 0
    TeamTask.objects.filter(pk=task.pk).update(updated_at=ago(minutes=crew.team.review_stale_after_minutes + 1))
    assert board_sweep()["stale"] == 1
    assert fresh(task).status == "stale"
    assert TeamEvent.objects.get(task=task, event_type="stale").data == {"from": "in_review"}


def test_blocked_and_in_progress_tasks_never_go_stale(crew, make_task):
    first = make_task("first")
    waiting = make_task("waiting", blocked_by=["T-001"])
    working = svc.task_claim(actor=crew.as_worker, team=crew.team, task=first)
    TeamTask.objects.filter(team=crew.team).update(updated_at=ago(days=10))
    assert board_sweep() == {"released": 0, "stale": 0, "unblocked": 0, "handoffs_expired": 0}
    assert (fresh(waiting).status, fresh(working).status) == ("blocked", "in_progress")


def test_the_sweep_releases_a_blocked_task_whose_blockers_all_completed(crew, make_task):
    first = make_task("first")
    waiting = make_task("waiting", blocked_by=["T-001"])
    TeamTask.objects.filter(pk=first.pk).update(status="completed")  # as if the unblock step had been missed
    assert board_sweep()["unblocked"] == 1
    assert fresh(waiting).status == "pending"
    assert TeamEvent.objects.get(task=waiting, event_type="unblocked").data == {"by": "sweep"}


def test_the_sweep_keeps_a_task_blocked_while_any_blocker_is_unfinished(crew, make_task):
    make_task("first"), make_task("second")
    waiting = make_task("waiting", blocked_by=["T-001", "T-002"])
    TeamTask.objects.filter(number=1, team=crew.team).update(status="completed")
    TeamTask.objects.filter(number=2, team=crew.team).update(status="failed")
    assert board_sweep()["unblocked"] == 0
    assert fresh(waiting).status == "blocked"
    assert TaskDependency.objects.filter(task=waiting).count() == 2


def test_archived_teams_are_left_alone(crew, make_task):
    task = svc.task_claim(actor=crew.as_worker, team=crew.team, task=make_task())
    TeamTask.objects.filter(pk=task.pk).update(lock_expires_at=ago(hours=5), updated_at=ago(days=5))
    team_update(actor=crew.system, team=crew.team, status="archived")
    assert board_sweep() == {"released": 0, "stale": 0, "unblocked": 0, "handoffs_expired": 0}
    assert fresh(task).status == "in_progress"


def test_the_sweep_moves_more_tasks_than_one_batch(crew, make_task, monkeypatch):
    from teams_app.services import sweeps

    monkeypatch.setattr(sweeps, "BATCH", 3)
    tasks = [make_task(f"t{n}") for n in range(7)]
    TeamTask.objects.filter(team=crew.team).update(updated_at=ago(days=1))
    assert board_sweep()["stale"] == 7
    assert set(TeamTask.objects.filter(pk__in=[t.pk for t in tasks]).values_list("status", flat=True)) == {"stale"}
    assert TeamEvent.objects.filter(event_type="stale").count() == 7


def test_each_teams_own_settings_decide_when_its_tasks_go_stale(crew, make_task):
    patient = team_create(actor=crew.system, name="patient", lead=make_agent(), stale_after_minutes=600)
    theirs = svc.task_create(actor=crew.system, team=patient, subject="slow")
    ours = make_task()
    TeamTask.objects.filter(pk__in=[theirs.pk, ours.pk]).update(updated_at=ago(minutes=300))
    assert board_sweep()["stale"] == 1
    assert (fresh(ours).status, fresh(theirs).status) == ("stale", "pending")


def test_a_stale_task_can_be_retried_for_its_owner(crew, make_task):
    task = make_task(assignee=crew.worker)
    TeamTask.objects.filter(pk=task.pk).update(updated_at=ago(days=1))
    board_sweep()
    svc.task_retry(actor=crew.person, task=task)
    assert (fresh(task).status, fresh(task).owner) == ("pending", crew.worker)
    assert svc.task_claim(actor=crew.as_worker, team=crew.team).pk == task.pk


def test_a_stale_task_can_be_reassigned_to_another_member(crew, make_task):
    task = make_task(assignee=crew.worker)
    TeamTask.objects.filter(pk=task.pk).update(updated_at=ago(days=1))
    board_sweep()
    svc.task_assign(actor=crew.person, task=task, assignee=crew.worker2)
    assert (fresh(task).status, fresh(task).owner) == ("pending", crew.worker2)
    with pytest.raises(TaskConflict):
        svc.task_claim(actor=crew.as_worker, team=crew.team, task=task)
    assert svc.task_claim(actor=crew.as_worker2, team=crew.team).pk == task.pk


def test_the_scheduled_job_runs_the_sweep(crew, make_task):
    task = svc.task_claim(actor=crew.as_worker, team=crew.team, task=make_task())
    TeamTask.objects.filter(pk=task.pk).update(lock_expires_at=ago(minutes=1))
    assert scheduled_board_sweep() == {"released": 1, "stale": 0, "unblocked": 0, "handoffs_expired": 0}


def test_the_sweep_removes_expired_handoff_routes_and_keeps_live_ones(crew):
    from teams_app.models import HandoffRoute

    now = timezone.now()
    HandoffRoute.objects.create(channel="slack", chat_id="c-old", target=crew.worker, expires_at=now - timedelta(minutes=1))
    HandoffRoute.objects.create(channel="slack", chat_id="c-live", target=crew.worker, expires_at=now + timedelta(hours=1))
    HandoffRoute.objects.create(channel="slack", chat_id="c-forever", target=crew.worker)
    assert board_sweep()["handoffs_expired"] == 1
    assert sorted(HandoffRoute.objects.values_list("chat_id", flat=True)) == ["c-forever", "c-live"]
