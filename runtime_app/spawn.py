"""Subagents: limits, spawning (race-safe across processes), running one synchronously, waiting, cancelling and
steering. A subagent is a session of the same agent one level deeper: its tools are the parent's minus the policy
engine's subagent deny list, and at the maximum depth minus the leaf deny list too (explain shows why)."""
from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone
from django.db.models import Q

from goclaw.errors import Conflict
from runtime_app.choices import ACTIVE_STATUSES, SessionOrigin, SessionStatus
from runtime_app.limits import spawn_limits
from runtime_app.runs import run_inline
from runtime_app.models import Session
from runtime_app.services import sessions as svc

S = SessionStatus
STEER_MAX_CHARS = 4000
SETTLE_SECONDS = 0.5
POLL_SECONDS = 0.1
_SPAWN_LOCK = 0x53504157  # "SPAW": one transaction-level advisory lock serialises every spawn's limit check


def subagent_spawn(*, parent: Session, task: str, label: str = "", run_by: str = "") -> Session:
    """Start a subagent of `parent`'s agent on `task`, if depth, concurrency and children limits allow; the checks and
    the insert run under one advisory lock, so concurrent spawns in any process cannot overshoot. `run_by` (a lease
    owner) makes it a synchronous subagent that run drives: born leased to it, not announced."""
    limits = spawn_limits(parent.agent)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_SPAWN_LOCK])
        if parent.depth + 1 > limits.max_spawn_depth:
            raise Conflict(f"subagents may not spawn subagents here: the maximum spawn depth is "
                           f"{limits.max_spawn_depth}", code="spawn_depth_exceeded")
        running = Session.objects.filter(origin=SessionOrigin.SUBAGENT, status__in=ACTIVE_STATUSES).count()
        if running >= limits.max_concurrent:
            raise Conflict(f"{running} subagents are running (at most {limits.max_concurrent}); wait for one to "
                           "finish or cancel one", code="spawn_concurrency_exceeded")
        children = subagents_of(parent).exclude(status=S.ARCHIVED).count()
        if children >= limits.max_children_per_agent:
            raise Conflict(f"this session already has {children} subagents (at most {limits.max_children_per_agent} "
                           "until they are archived)", code="spawn_children_exceeded")
        return svc.session_create(agent=parent.agent, created_by=f"agent:{parent.agent.key}", user_id=parent.user_id,
                                  channel=parent.channel, chat_id=parent.chat_id, message=task, parent=parent,
                                  label=label, task=task, sync=bool(run_by), lease_owner=run_by,
                                  max_iterations=limits.max_iterations, origin=SessionOrigin.SUBAGENT)


def subagent_run(*, child: Session, owner: str, cancel: threading.Event) -> Session:
    """Drive a synchronous child (spawned with `run_by=owner`) to its end in this thread (spawn `run`)."""
    return run_inline(child, owner=owner, cancel=cancel)


def subagents_of(parent: Session):
    return Session.objects.filter(parent=parent, origin=SessionOrigin.SUBAGENT)


def children_wait(*, parent: Session, ids: list[Any] | None, seconds: float, cancel: threading.Event) -> list[Session]:
    """Wait until the given children (else every active child) have ended or `seconds` pass; their rows."""
    qs = subagents_of(parent)
    qs = qs.filter(pk__in=ids) if ids else qs.filter(Q(status__in=ACTIVE_STATUSES))
    wanted = list(qs.values_list("pk", flat=True))
    deadline = time.monotonic() + seconds
    while wanted and time.monotonic() < deadline and not cancel.is_set():
        if not Session.objects.filter(pk__in=wanted, status__in=ACTIVE_STATUSES).exists():
            break
        cancel.wait(POLL_SECONDS)
    return list(Session.objects.filter(pk__in=wanted).order_by("created_at"))


def children_cancel(*, parent: Session, which: str, actor: str) -> list[Session]:
    """Cancel one child (its id), `all` active children, or the `last` one spawned; not announced to the parent."""
    active = subagents_of(parent).filter(status__in=ACTIVE_STATUSES).select_related("agent").order_by("-created_at")
    if which == "all":
        targets = list(active)
    elif which == "last":
        targets = list(active[:1])
    else:
        targets = list(active.filter(pk=which)) if _is_uuid(which) else []
    return [svc.session_cancel(session=s, actor=actor, reason="cancelled_by_parent", announce=False) for s in targets]


def subagent_steer(*, parent: Session, child_id: str, message: str, actor: str) -> Session:
    """Cancel a child, let it settle, and spawn it again on its task with the parent's new instruction."""
    child = subagents_of(parent).filter(pk=child_id).select_related("agent").first() if _is_uuid(child_id) else None
    if child is None:
        raise Conflict("no such subagent of this session", code="subagent_not_found")
    svc.session_cancel(session=child, actor=actor, reason="steered", announce=False)
    deadline = time.monotonic() + SETTLE_SECONDS
    while time.monotonic() < deadline and Session.objects.filter(pk=child.pk).exclude(lease_owner="").exists():
        time.sleep(POLL_SECONDS / 2)  # the runner that held it lets go as soon as it sees the cancel
    task = f"{child.task}\n\nNew instruction from the agent that started you: {message[:STEER_MAX_CHARS]}"
    return subagent_spawn(parent=parent, task=task, label=child.label)


def _is_uuid(value: Any) -> bool:
    try:
        uuid.UUID(str(value))
        return True
    except ValueError:
        return False


ARCHIVE_BATCH = 1000


def subagents_archive() -> int:
    """Archive the subagent sessions that ended longer ago than their agent's `archive_after_minutes`."""
    now = timezone.now()
    done = 0
    rows = (Session.objects.select_related("agent").filter(parent__isnull=False, ended_at__lt=now - timedelta(minutes=1),
                                                           status__in=[S.COMPLETED, S.FAILED, S.CANCELLED])
            .order_by("ended_at")[:ARCHIVE_BATCH])
    for session in rows:
        if session.ended_at < now - timedelta(minutes=spawn_limits(session.agent).archive_after_minutes):
            svc.session_archive(session)
            done += 1
    return done
