"""The board sweep (docs/teams.md, "Locks and sweeps"), run every minute by django-q2: expired claims go back to
pending (owner kept), tasks waiting too long in pending or in review are marked stale, and blocked tasks whose blockers
have all completed are released (a safety net behind the unblocking done when a blocker completes). Active teams
only; each batch is one short transaction of conditional UPDATEs, skipping rows another transaction holds."""
from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import DateTimeField, Exists, ExpressionWrapper, F, OuterRef, Q, QuerySet, Value
from django.utils import timezone

from teams_app.actors import Actor
from teams_app.choices import TaskStatus, TeamEventType, TeamStatus
from teams_app.models import TaskDependency, TeamTask
from teams_app.services.common import event_record
from teams_app.services.handoff import handoff_routes_purge_expired

BATCH = 500
SWEEP_ACTOR = Actor.system("sweep")


def _deadline(now: datetime, minutes_field: str) -> ExpressionWrapper:
    """now − the team's setting (minutes), computed by PostgreSQL per row."""
    return ExpressionWrapper(Value(now) - F(minutes_field) * Value(timedelta(minutes=1)),
                             output_field=DateTimeField())


def _sweep(candidates: QuerySet, condition: Q, event_type: str, data: dict, **values) -> int:
    """Move every task matching `condition` in batches: lock a batch (SKIP LOCKED), change it with a conditional
    UPDATE, and record one event per task moved. Returns how many moved."""
    moved = 0
    while True:
        with transaction.atomic():
            ids = list(candidates.filter(condition).select_for_update(of=("self",), skip_locked=True)
                       .order_by("pk").values_list("pk", flat=True)[:BATCH])
            if not ids:
                return moved
            values["updated_at"] = timezone.now()
            TeamTask.objects.filter(pk__in=ids).filter(condition).update(**values)  # re-checked under the lock
            done = list(TeamTask.objects.filter(pk__in=ids, status=values["status"], updated_at=values["updated_at"])
                        .select_related("owner", "team", "team__lead"))
            for task in done:
                event_record(task.team, task, event_type, SWEEP_ACTOR, data)
            moved += len(done)
        if len(ids) < BATCH:
            return moved


def board_sweep(now: datetime | None = None) -> dict:
    """One pass over every active team's board, and expired handoff routes removed; returns {"released": n,
    "stale": n, "unblocked": n, "handoffs_expired": n}."""
    now = now or timezone.now()
    active = TeamTask.objects.filter(team__status=TeamStatus.ACTIVE)
    released = _sweep(active, Q(status=TaskStatus.IN_PROGRESS, lock_expires_at__lt=now), TeamEventType.RELEASED,
                      {"reason": "lock expired"}, status=TaskStatus.PENDING, locked_at=None, lock_expires_at=None)
    stale = _sweep(active, Q(status=TaskStatus.PENDING, updated_at__lt=_deadline(now, "team__stale_after_minutes")),
                   TeamEventType.STALE, {"from": TaskStatus.PENDING}, status=TaskStatus.STALE)
    stale += _sweep(active, Q(status=TaskStatus.IN_REVIEW,
                              updated_at__lt=_deadline(now, "team__review_stale_after_minutes")),
                    TeamEventType.STALE, {"from": TaskStatus.IN_REVIEW}, status=TaskStatus.STALE)
    unfinished = TaskDependency.objects.filter(task=OuterRef("pk")).exclude(blocker__status=TaskStatus.COMPLETED)
    unblocked = _sweep(active, Q(~Exists(unfinished), status=TaskStatus.BLOCKED), TeamEventType.UNBLOCKED,
                       {"by": "sweep"}, status=TaskStatus.PENDING)
    return {"released": released, "stale": stale, "unblocked": unblocked,
            "handoffs_expired": handoff_routes_purge_expired(now=now)}
