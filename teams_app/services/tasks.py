"""The task board's transitions (docs/teams.md, "Statuses and transitions"). Each service checks the actor's role,
locks the task row, changes it with a conditional UPDATE (`WHERE status IN expected`) checked by its row count, and
records a TeamEvent (published after commit). Finishing a task updates the tasks waiting for it in the same
transaction. Lock order, to stay free of deadlocks: the team row (task numbers, dependency changes) before task rows.
Errors are sentences for the model: what is wrong and what to do instead.

Claiming and completing are the board's hot path (many workers looping claim → complete): for an agent each first
tries one statement that does the whole common case (pick / check / change the row, write the event, return what the
event payload needs). When it changes nothing, the full checks run to find out why and say so, so every error
sentence comes from one place (the slow path), and the fast statement only ever does what the slow path would."""
from __future__ import annotations

import json
import posixpath
from datetime import datetime, timedelta
from typing import Any, Iterable

from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone
from django.utils.module_loading import import_string

from goclaw import events
from goclaw.db import PreparedStatement
from goclaw.errors import ApplicationError

from teams_app.actors import Actor
from teams_app.choices import (ACTIVE_STATUSES, TERMINAL_STATUSES, CommentKind, DelegationStatus, MemberRole,
                               TaskStatus, TeamEventType, TeamStatus)
from teams_app.errors import (DependencyCycle, TaskConflict, TaskInvalid, TaskNotFound, TeamInvalid,
                              TeamPermissionDenied)
from teams_app.models import (Delegation, Team, TaskAttachment, TaskComment, TaskDependency, TeamEvent, TeamMember,
                              TeamTask, task_identifier)
from teams_app.selectors import task_as_dict, task_number
from teams_app.services.common import (ANY_ROLE, clean_int, clean_session_key, clean_text, event_data, event_item,
                                       event_record, member_role, require_role, require_writable)
from teams_app.services.mailbox import message_system_send
from teams_app.work import work_announce
from tools_app.models import Agent

SUBJECT_MAX = 500
DESCRIPTION_MAX = 20_000
RESULT_MAX = 50_000
COMMENT_MAX = 10_000
STEP_MAX = 500
NOTE_MAX = 500
BLOCKED_BY_MAX = 50
ATTACHMENTS_MAX = 200
PRIORITY_MAX = 1_000_000
BLOCKER_RESULT_QUOTE = 500
CLAIM_BATCH_MAX = 50
COMPLETE_BATCH_MAX = 50
LEAD = (MemberRole.LEAD,)
APPROVERS = (MemberRole.LEAD, MemberRole.REVIEWER)
S = TaskStatus
DELEGATION_FINISHED = "teams_app.services.delegation.delegation_task_finished"


# ---------------------------------------------------------------- helpers

def _label(status: str) -> str:
    return status.replace("_", " ")


def _labels(statuses: Iterable[str]) -> str:
    names = [_label(s) for s in statuses]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def _now() -> datetime:
    return timezone.now()


def _locked(task: TeamTask) -> TeamTask:
    """The task's current row, locked for this transaction (with its team, lead and owner)."""
    fresh = (TeamTask.objects.select_for_update(of=("self",)).select_related("team", "team__lead", "owner")
             .filter(pk=task.pk).first())
    if fresh is None:
        raise TaskNotFound(f"Task {task.identifier} no longer exists.")
    return fresh


def _open(task: TeamTask, actor: Actor, roles: Any, what: str) -> tuple[TeamTask, str]:
    """Every action's preamble: the task's current row locked, its team writable, and the actor's role in it
    (refused with a sentence naming `what` when the role may not)."""
    task = _locked(task)
    require_writable(task.team)
    return task, require_role(task.team, actor, roles, what)


def _conflict(task: TeamTask, allowed: Iterable[str], action: str) -> TaskConflict:
    return TaskConflict(f"{task.identifier} is {_label(task.status)}; only {_labels(allowed)} tasks can be {action}.")


def _move(task: TeamTask, allowed: Iterable[str], action: str, *, extra: Q | None = None,
          **values: Any) -> TeamTask:
    """The conditional UPDATE of one transition: applies `values` only while the task is in `allowed` (and matches
    `extra`); a lost race raises TaskConflict with the task's current state."""
    allowed = tuple(allowed)
    values.setdefault("updated_at", _now())
    rows = TeamTask.objects.filter(pk=task.pk, status__in=allowed).filter(extra or Q()).update(**values)
    if rows != 1:
        current = TeamTask.objects.select_related("owner").filter(pk=task.pk).first() or task
        raise _conflict(current, allowed, action)
    for key, value in values.items():
        setattr(task, key, value)
    return task


def _require_owner(task: TeamTask, actor: Actor, action: str) -> None:
    """Agents act only on tasks they own (people and goclaw itself may step in)."""
    if not actor.is_agent or task.owner_id == actor.agent_id:
        return
    if task.owner_id is None:
        raise TeamPermissionDenied(f"{task.identifier} has no owner; claim it before you {action} it.")
    raise TeamPermissionDenied(f"{task.identifier} is owned by agent {task.owner.key}; only its owner can "
                               f"{action} it.")


def _check_assignee(team: Team, assignee: Any) -> None:
    if getattr(assignee, "pk", None) is None:
        raise TaskInvalid("assignee must be an agent of the team.")
    role = TeamMember.objects.filter(team=team, agent=assignee).values_list("role", flat=True).first()
    if role is None:
        raise TaskInvalid(f"{assignee.key} is not in team {team.name}; assign the task to one of its members.")
    if role == MemberRole.LEAD:
        raise TaskInvalid(f"{assignee.key} is the lead of team {team.name}, and the lead never works tasks itself; "
                          f"assign the task to a member.")
    if role != MemberRole.MEMBER:
        raise TaskInvalid(f"{assignee.key} is a reviewer in team {team.name}; reviewers review, assign the task to a "
                          f"member.")


def _next_number(team: Team) -> int:
    """Allocate the team's next task number in the database: one UPDATE … RETURNING, which also holds the team row
    until commit (so creates of one team are serialized there, never by a process lock)."""
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {Team._meta.db_table} SET task_counter = task_counter + 1 "
                       f"WHERE id = %s AND status = 'active' RETURNING task_counter", [team.pk])
        row = cursor.fetchone()
    if row is None:
        raise TeamInvalid(f"Team {team.name} is archived; its board can be read but not changed.")
    return row[0]


def _resolve_blockers(team: Team, refs: Any, *, keep: Iterable[int] = (), self_task: TeamTask | None = None,
                      ) -> list[TeamTask]:
    """The tasks named by `refs` ("T-001", …), locked: same team and unfinished (or already a dependency, listed in
    `keep`). Anything else is refused, naming every bad reference."""
    if refs is None:
        refs = []
    if isinstance(refs, (str, int)):
        refs = [refs]
    if not isinstance(refs, (list, tuple)):
        raise TaskInvalid("blocked_by must be a list of task identifiers like [\"T-001\"].")
    if len(refs) > BLOCKED_BY_MAX:
        raise TaskInvalid(f"blocked_by names {len(refs)} tasks; the limit is {BLOCKED_BY_MAX}.")
    numbers: dict[int, str] = {}
    problems = []
    for ref in refs:
        number = task_number(ref)
        if number is None:
            problems.append(f"{str(ref)[:40]!r} is not a task identifier")
        else:
            numbers.setdefault(number, task_identifier(number))
    if self_task is not None and self_task.number in numbers:
        raise DependencyCycle(f"A task cannot wait for itself: {self_task.identifier} → {self_task.identifier}.")
    found = {t.number: t for t in TeamTask.objects.select_for_update(of=("self",))
             .filter(team=team, number__in=list(numbers)).order_by("number")}
    keep = set(keep)
    for number, ident in numbers.items():
        blocker = found.get(number)
        if blocker is None:
            problems.append(f"{ident} is not on team {team.name}'s board")
        elif blocker.status in TERMINAL_STATUSES and blocker.pk not in keep:
            problems.append(f"{ident} is already {_label(blocker.status)}")
    if problems:
        raise TaskInvalid("blocked_by must name unfinished tasks of this team: " + "; ".join(problems) + ".")
    return [found[n] for n in sorted(numbers)]


def _lock_named(team_id: int, refs: Any) -> None:
    """Lock the team's tasks that `refs` names (in number order); malformed refs are left to _resolve_blockers."""
    refs = [refs] if isinstance(refs, (str, int)) else refs
    if not isinstance(refs, (list, tuple)) or len(refs) > BLOCKED_BY_MAX:
        return
    numbers = [n for n in (task_number(ref) for ref in refs) if n is not None]
    list(TeamTask.objects.select_for_update(of=("self",)).filter(team_id=team_id, number__in=numbers)
         .order_by("number").values_list("pk", flat=True))


def _check_cycle(task: TeamTask, blockers: list[TeamTask]) -> None:
    """Refuse dependencies that would close a loop, naming it ("T-001 → T-003 → T-001": each waits for the next)."""
    edges: dict[int, list[int]] = {}
    numbers: dict[int, int] = {task.pk: task.number}
    for task_id, task_no, blocker_id, blocker_no in TaskDependency.objects.filter(task__team_id=task.team_id) \
            .exclude(task=task).values_list("task_id", "task__number", "blocker_id", "blocker__number"):
        edges.setdefault(task_id, []).append(blocker_id)
        numbers[task_id], numbers[blocker_id] = task_no, blocker_no
    for blocker in blockers:
        numbers[blocker.pk] = blocker.number
        path = _path_to(edges, blocker.pk, task.pk)
        if path is not None:
            shown = " → ".join(task_identifier(numbers[n]) for n in [task.pk, *path])
            raise DependencyCycle(f"That would make a dependency cycle: {shown} (each waits for the next). "
                                  f"Remove one of these dependencies.")


def _path_to(edges: dict[int, list[int]], start: int, goal: int) -> list[int] | None:
    """A path start → … → goal along `edges` (iterative DFS), or None."""
    stack = [(start, [start])]
    seen = {start}
    while stack:
        node, path = stack.pop()
        if node == goal:
            return path
        for nxt in edges.get(node, ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def _unfinished_blockers(task: TeamTask) -> list[TeamTask]:
    return list(TeamTask.objects.filter(dependents__task=task).exclude(status=S.COMPLETED).order_by("number"))


def _finished(task: TeamTask, actor: Actor) -> None:
    """In the finishing transaction: a completed task releases the tasks waiting only for it; a failed or cancelled
    one leaves them blocked and tells the lead. Then the delegation carried by the task takes its outcome."""
    if task.status == S.COMPLETED:
        _unblock_dependents(task, actor)
    else:
        _escalate_dependents(task, actor)
    # Delegation builds on the board (it creates and cancels tasks), so it imports this module; calling back by
    # name keeps the services package free of an import cycle (the acyclic-siblings contract of .importlinter).
    import_string(DELEGATION_FINISHED)(task)


def _unblock_dependents(task: TeamTask, actor: Actor) -> None:
    waiting_ids = TaskDependency.objects.filter(blocker=task).values("task_id")
    candidates = list(TeamTask.objects.select_for_update(of=("self",)).filter(pk__in=waiting_ids, status=S.BLOCKED)
                      .order_by("number").values_list("pk", flat=True))
    if not candidates:
        return
    unfinished = TaskDependency.objects.filter(task=OuterRef("pk")).exclude(blocker__status=S.COMPLETED)
    ready = list(TeamTask.objects.filter(pk__in=candidates).annotate(waiting=Exists(unfinished))
                 .filter(waiting=False).values_list("pk", flat=True))
    if not ready:
        return
    TeamTask.objects.filter(pk__in=ready, status=S.BLOCKED).update(status=S.PENDING, updated_at=_now())
    for dependent in TeamTask.objects.filter(pk__in=ready, status=S.PENDING).select_related(
            "owner", "team", "team__lead").order_by("number"):
        event_record(dependent.team, dependent, TeamEventType.UNBLOCKED, actor, {"by": task.identifier})
        _announce_assigned(dependent)


def _escalate_dependents(task: TeamTask, actor: Actor) -> None:
    team = task.team
    waiting = list(TeamTask.objects.filter(dependencies__blocker=task).exclude(status__in=TERMINAL_STATUSES)
                   .select_related("owner").order_by("number"))
    if not waiting:
        return
    for dependent in waiting:
        event_record(team, dependent, TeamEventType.ESCALATED, actor,
                     {"blocker": task.identifier, "blocker_status": task.status})
    names = ", ".join(d.identifier for d in waiting)
    message_system_send(
        team=team, to=team.lead, task=task,
        text=(f"{task.identifier} ({task.subject[:100]}) is {_label(task.status)}; {names} "
              f"{'waits for it and stays' if len(waiting) == 1 else 'wait for it and stay'} blocked. Retry {task.identifier}, "
              f"or unblock or cancel the waiting tasks."))


def _announce_assigned(task: TeamTask) -> None:
    """An owned task its owner can claim now: whatever runs agents wakes a hosted owner (after commit)."""
    if task.owner_id is not None and task.status == S.PENDING:
        work_announce("task.assigned", task_id=task.pk)


def _lock_values(team: Team, now: datetime) -> dict[str, Any]:
    return {"locked_at": now, "lock_expires_at": now + timedelta(minutes=team.lock_minutes)}


NO_LOCK = {"locked_at": None, "lock_expires_at": None}


# ---------------------------------------------------------------- the hot path: one statement per claim / complete

_TASK = TeamTask._meta.db_table
_FIELDS = [f for f in TeamTask._meta.concrete_fields if f.name != "search"]  # not the generated tsvector
_ATTNAMES = [f.attname for f in _FIELDS]
_TEAM_ID_AT = _ATTNAMES.index("team_id")
_RETURNING = ", ".join(f't."{f.column}"' for f in _FIELDS)
_COLUMNS = ", ".join(f'c."{f.column}"' for f in _FIELDS)
_TEAM_IS_ACTIVE = (f"EXISTS (SELECT 1 FROM {Team._meta.db_table} tm WHERE tm.id = t.team_id "
                   f"AND tm.status = '{TeamStatus.ACTIVE.value}')")
_BLOCKED_BY = (f"ARRAY(SELECT b.number FROM {TaskDependency._meta.db_table} d JOIN {_TASK} b ON b.id = d.blocker_id "
               f"WHERE d.task_id = c.id ORDER BY b.number)")


def _event_insert(event_type: str) -> str:
    return (f"INSERT INTO {TeamEvent._meta.db_table} (team_id, task_id, event_type, actor, data, created_at) "
            f"SELECT c.team_id, c.id, '{event_type}', $4, $5, $6 FROM changed c")


# Pick the best (or the named) claimable tasks, at most $8, skipping rows other claimers hold; take them only while
# the caller is a member of the active team; write a `claimed` event each; return the rows and their blockers'
# numbers. $1 team, $2 task (named claims), $3 the agent, $4 actor label, $5 event data, $6 now, $7 lock expiry,
# $8 how many.
_CLAIM_SQL = f"""
WITH pick AS (
    SELECT t.id FROM {_TASK} t
    WHERE t.team_id = $1 {{named}} AND t.status = '{S.PENDING.value}' AND (t.owner_id IS NULL OR t.owner_id = $3)
    ORDER BY t.priority DESC, t.number LIMIT $8 FOR UPDATE SKIP LOCKED
), changed AS (
    UPDATE {_TASK} t SET status = '{S.IN_PROGRESS.value}', owner_id = $3, updated_at = $6, locked_at = $6,
        lock_expires_at = $7
    FROM pick
    WHERE t.id = pick.id AND t.status = '{S.PENDING.value}' AND (t.owner_id IS NULL OR t.owner_id = $3)
      AND EXISTS (SELECT 1 FROM {TeamMember._meta.db_table} m
                  WHERE m.team_id = t.team_id AND m.agent_id = $3 AND m.role = '{MemberRole.MEMBER.value}')
      AND {_TEAM_IS_ACTIVE}
    RETURNING {_RETURNING}
), event AS ({_event_insert(TeamEventType.CLAIMED.value)})
SELECT {_COLUMNS}, {_BLOCKED_BY} FROM changed c ORDER BY c.priority DESC, c.number"""
_CLAIM_TYPES = ("bigint", "bigint", "bigint", "text", "jsonb", "timestamptz", "timestamptz", "integer")
# Prepared once per database connection (goclaw.db.PreparedStatement): planning these statements costs PostgreSQL
# more than running them.
_CLAIM_BEST = PreparedStatement(_CLAIM_SQL.replace("{named}", "AND $2::bigint IS NULL"), _CLAIM_TYPES)
_CLAIM_NAMED = PreparedStatement(_CLAIM_SQL.replace("{named}", "AND t.id = $2"), _CLAIM_TYPES)

# Complete the caller's own tasks while it is in the team (any role) and the team is active; write a `completed`
# event each; return the rows, their blockers' numbers, whether anything waits for each or a delegation runs on it
# (only then does the finishing logic run), and the lead's key (for the lead's event group). Those EXISTS read the
# statement's snapshot: a dependency added by a task_update that held a row while the UPDATE waited is missed,
# and the board sweep's unblocking (the safety net) releases that dependent.
# $1 task ids, $2 their results (same order, ids distinct), $3 the agent, $4 actor label, $5 event data, $6 now.
_COMPLETE_SQL = f"""
WITH changed AS (
    UPDATE {_TASK} t SET status = '{S.COMPLETED.value}', result = i.result, completed_at = $6,
        progress_percent = 100, question = '', question_asked_at = NULL, updated_at = $6, locked_at = NULL,
        lock_expires_at = NULL
    FROM unnest($1::bigint[], $2::text[]) AS i(id, result)
    WHERE t.id = i.id AND t.status IN ('{S.IN_PROGRESS.value}', '{S.PENDING.value}') AND t.owner_id = $3
      AND EXISTS (SELECT 1 FROM {TeamMember._meta.db_table} m WHERE m.team_id = t.team_id AND m.agent_id = $3)
      AND {_TEAM_IS_ACTIVE}
    RETURNING {_RETURNING}
), event AS ({_event_insert(TeamEventType.COMPLETED.value)})
SELECT {_COLUMNS}, {_BLOCKED_BY},
    EXISTS (SELECT 1 FROM {TaskDependency._meta.db_table} d WHERE d.blocker_id = c.id),
    EXISTS (SELECT 1 FROM {Delegation._meta.db_table} g
            WHERE g.task_id = c.id AND g.status = '{DelegationStatus.RUNNING.value}'),
    (SELECT a.key FROM {Team._meta.db_table} tm JOIN {Agent._meta.db_table} a ON a.id = tm.lead_id
     WHERE tm.id = c.team_id)
FROM changed c"""
_COMPLETE = PreparedStatement(_COMPLETE_SQL, ("bigint[]", "text[]", "bigint", "text", "jsonb", "timestamptz"))

def _task_from_row(row: tuple[Any, ...], actor: Actor, team: Team | None) -> tuple[TeamTask, list[str]]:
    """The task the fast statement returned (owned by the actor, with `team` when it is the task's), and the
    identifiers of its blockers."""
    task = TeamTask.from_db(connection.alias, _ATTNAMES, row[:len(_ATTNAMES)])
    task.owner = Agent.from_db(connection.alias, ["id", "key"], [actor.agent_id, actor.name])
    if team is not None and team.pk == task.team_id:
        task.team = team
    return task, [task_identifier(n) for n in row[len(_ATTNAMES)]]


def _claim_fast(actor: Actor, team: Team, named: TeamTask | None, count: int = 1) -> list[TeamTask]:
    """The whole claim of up to `count` tasks in one statement; [] when it took nothing (the slow path then says
    why)."""
    now = _now()
    expires = now + timedelta(minutes=team.lock_minutes)
    data = event_data({"lock_expires_at": expires})
    label = str(actor)
    statement = _CLAIM_NAMED if named is not None else _CLAIM_BEST
    rows = statement.run([team.pk, named.pk if named is not None else None, actor.agent_id, label, json.dumps(data), now,
                          expires, 1 if named is not None else count])
    claimed, published = [], []
    for row in rows:
        task, blocked_by = _task_from_row(row, actor, team)
        # The owner is the actor, a member (checked by the statement): its group hears the event.
        published.append(event_item(TeamEventType.CLAIMED, task.team_id, task_as_dict(task, blocked_by=blocked_by),
                                    label, data, owner_key=actor.name))
        claimed.append(task)
    events.publish_many(published)
    return claimed


def _complete_fast(actor: Actor, results: list[tuple[TeamTask, str]]) -> list[TeamTask]:
    """The whole completion of the caller's tasks in one statement (plus the finishing logic only for a task that
    something waits for or a delegation runs on); the tasks it completed, in the statement's order."""
    label = str(actor)
    rows = _COMPLETE.run([[task.pk for task, _ in results], [result for _, result in results], actor.agent_id, label,
                          "{}", _now()])
    teams = {task.team_id: task.team for task, _ in results if TeamTask.team.is_cached(task)}
    done_tasks, published = [], []
    for row in rows:
        done, blocked_by = _task_from_row(row, actor, teams.get(row[_TEAM_ID_AT]))
        has_dependents, has_delegation, lead_key = row[-3:]
        published.append(event_item(TeamEventType.COMPLETED, done.team_id, task_as_dict(done, blocked_by=blocked_by),
                                    label, {}, owner_key=actor.name, lead_key=lead_key))
        if has_dependents or has_delegation:
            events.publish_many(published)  # this task's event before those its finishing publishes
            published = []
            _finished(done, actor)
        done_tasks.append(done)
    events.publish_many(published)
    return done_tasks


# ---------------------------------------------------------------- create, claim, assign

@transaction.atomic
def task_create(*, actor: Actor, team: Team, subject: str, description: str = "", priority: Any = 0,
                assignee: Any = None, blocked_by: Any = (), user_id: str = "", channel: str = "",
                chat_id: str = "", session_key: str = "") -> TeamTask:
    """Put a task on the board (the lead or a person). Without an assignee it is open for any member to claim; with
    one it waits (pending) for that member to claim it, and a hosted assignee is woken. Unfinished blockers make it
    `blocked` until they complete. `session_key`: the creating lead's session (teammates report back there)."""
    subject = clean_text("subject", subject, SUBJECT_MAX, required=True).strip()
    description = clean_text("description", description, DESCRIPTION_MAX)
    priority = clean_int("priority", priority, -PRIORITY_MAX, PRIORITY_MAX)
    user_id = clean_text("user_id", user_id, 255)
    channel = clean_text("channel", channel, 64)
    chat_id = clean_text("chat_id", chat_id, 255)
    require_writable(team)
    require_role(team, actor, LEAD, "create tasks")
    if assignee is not None:
        _check_assignee(team, assignee)
    number = _next_number(team)  # the team row first, then the blockers' rows (see the module docstring)
    blockers = _resolve_blockers(team, blocked_by)
    task = TeamTask.objects.create(
        team=team, number=number, subject=subject, description=description, priority=priority, owner=assignee,
        status=S.BLOCKED if blockers else S.PENDING, created_by=str(actor), user_id=user_id, channel=channel,
        chat_id=chat_id, session_key=clean_session_key(session_key))
    TaskDependency.objects.bulk_create([TaskDependency(task=task, blocker=b) for b in blockers])
    event_record(team, task, TeamEventType.CREATED, actor,
                 {"assignee": assignee.key if assignee else None, "blocked_by": [b.identifier for b in blockers]})
    _announce_assigned(task)
    return task


def _claim_conflict(task: TeamTask, actor: Actor) -> TaskConflict:
    ident = task.identifier
    if task.status in (S.IN_PROGRESS, S.IN_REVIEW) and task.owner_id == actor.agent_id:
        return TaskConflict(f"{ident} is already yours ({_label(task.status)}); carry on with it.")
    if task.status == S.IN_PROGRESS and task.owner_id:
        return TaskConflict(f"{ident} was claimed by agent {task.owner.key} first; claim another task.")
    if task.status == S.PENDING and task.owner_id:
        return TaskConflict(f"{ident} is assigned to agent {task.owner.key}; claim an open task or one assigned "
                            f"to you.")
    if task.status == S.BLOCKED:
        names = ", ".join(b.identifier for b in _unfinished_blockers(task)) or "unfinished tasks"
        return TaskConflict(f"{ident} is blocked by {names}; it can be claimed once they are completed.")
    return _conflict(task, (S.PENDING,), "claimed")


@transaction.atomic
def task_claim(*, actor: Actor, team: Team, task: TeamTask | None = None) -> TeamTask:
    """A member takes a pending task that is open or assigned to it: the named one, or else the best one (highest
    priority, then lowest number). Under concurrency exactly one claimer wins each task (rows are taken with
    SELECT … FOR UPDATE SKIP LOCKED, then changed by a conditional UPDATE)."""
    if not actor.is_agent:
        raise TeamPermissionDenied("Only member agents claim tasks; people assign them instead.")
    require_writable(team)
    if task is None or task.team_id == team.pk:
        claimed = _claim_fast(actor, team, task)
        if claimed:
            return claimed[0]
        # The statement took nothing: the checks below say why. The caller's team object may be stale (archived
        # since it was read), so its status is read again.
        require_writable(Team.objects.only("name", "status").get(pk=team.pk))
    require_role(team, actor, (MemberRole.MEMBER,), "claim tasks")
    mine = Q(owner__isnull=True) | Q(owner_id=actor.agent_id)
    if task is None:
        row = (TeamTask.objects.select_for_update(skip_locked=True).filter(team=team, status=S.PENDING).filter(mine)
               .order_by("-priority", "number").values_list("pk", flat=True).first())
        if row is None:
            raise TaskNotFound(f"No task is waiting to be claimed on team {team.name}'s board (pending, and open or "
                               f"assigned to you).")
        pk = row
    else:
        if task.team_id != team.pk:
            raise TaskNotFound(f"Task {task.identifier} was not found on team {team.name}'s board.")
        pk = task.pk
        if TeamTask.objects.select_for_update(skip_locked=True).filter(pk=pk).values_list("pk").first() is None:
            current = TeamTask.objects.select_related("owner").filter(pk=pk).first()
            if current is None:
                raise TaskNotFound(f"Task {task.identifier} no longer exists.")
            if current.status == S.PENDING:
                raise TaskConflict(f"{current.identifier} is being claimed or changed by someone else right now; "
                                   f"claim another task.")
            raise _claim_conflict(current, actor)
    now = _now()
    rows = TeamTask.objects.filter(pk=pk, status=S.PENDING).filter(mine).update(
        status=S.IN_PROGRESS, owner_id=actor.agent_id, updated_at=now, **_lock_values(team, now))
    claimed = TeamTask.objects.select_related("owner", "team", "team__lead").get(pk=pk)
    if rows != 1:
        raise _claim_conflict(claimed, actor)
    event_record(claimed.team, claimed, TeamEventType.CLAIMED, actor, {"lock_expires_at": claimed.lock_expires_at})
    return claimed


@transaction.atomic
def task_claim_many(*, actor: Actor, team: Team, count: Any) -> list[TeamTask]:
    """A member takes up to `count` of the best claimable tasks at once (an agent that works on several, a worker
    pool taking a batch): each is claimed exactly as by task_claim, with its own lock and `claimed` event, in one
    statement. When none is claimable, the error says why, as task_claim's does."""
    count = clean_int("count", count, 1, CLAIM_BATCH_MAX)
    if actor.is_agent:
        require_writable(team)
        claimed = _claim_fast(actor, team, None, count)
        if claimed:
            return claimed
    return [task_claim(actor=actor, team=team)]  # the slow path: one task, or the reason there is none


def task_complete_many(*, actor: Actor, results: list[tuple[TeamTask, Any]]) -> list[TeamTask | ApplicationError]:
    """The owner finishes several tasks, each with its result: those that are the caller's and unfinished in one
    statement, each of the others as task_complete would (completed, or the error saying why, in its place: one
    task's refusal does not undo the others)."""
    if not results:
        raise TaskInvalid("Give at least one task to complete.")
    if len(results) > COMPLETE_BATCH_MAX:
        raise TaskInvalid(f"Complete at most {COMPLETE_BATCH_MAX} tasks at once.")
    if len({task.pk for task, _ in results}) != len(results):
        raise TaskInvalid("A task is listed twice; give each task once.")
    cleaned = [(task, clean_text("result", result, RESULT_MAX, required=True)) for task, result in results]
    done: dict[int, TeamTask] = {}
    if actor.is_agent:
        with transaction.atomic():
            done = {task.pk: task for task in _complete_fast(actor, cleaned)}
    answers: list[TeamTask | ApplicationError] = []
    for task, result in cleaned:
        if task.pk in done:
            answers.append(done[task.pk])
            continue
        try:
            answers.append(task_complete(actor=actor, task=task, result=result))
        except ApplicationError as exc:
            answers.append(exc)
    return answers


@transaction.atomic
def task_assign(*, actor: Actor, task: TeamTask, assignee: Any, session_key: str = "") -> TeamTask:
    """The lead (or a person) gives a task to a member, who then claims it (a hosted one is woken). A task in
    progress goes back to pending for its new owner (the previous owner is told); a blocked task stays blocked.
    `session_key`: the assigning lead's session, which the new owner reports back to (kept when not given)."""
    task, _ = _open(task, actor, LEAD, "assign tasks")
    team = task.team
    _check_assignee(team, assignee)
    allowed = (S.PENDING, S.STALE, S.BLOCKED, S.IN_PROGRESS)
    if task.status not in allowed:
        raise _conflict(task, allowed, "assigned")
    previous = task.owner
    status = S.BLOCKED if task.status == S.BLOCKED else S.PENDING
    keys = {"session_key": clean_session_key(session_key)} if session_key else {}
    _move(task, allowed, "assigned", status=status, owner=assignee, **keys, **NO_LOCK)
    event_record(team, task, TeamEventType.ASSIGNED, actor,
                 {"assignee": assignee.key, "previous": previous.key if previous else None})
    _announce_assigned(task)
    if previous is not None and previous.pk != assignee.pk:
        message_system_send(team=team, to=previous, task=task, sender="system:board",
                            text=f"{task.identifier} ({task.subject[:100]}) was reassigned to {assignee.key} by "
                                 f"{actor}; stop working on it.")
    return task


# ---------------------------------------------------------------- the owner's work

@transaction.atomic
def task_progress(*, actor: Actor, task: TeamTask, percent: Any, step: str = "") -> TeamTask:
    """The owner reports progress on a task in progress (percent never goes back); this renews its lock."""
    percent = clean_int("percent", percent, 0, 100)
    step = clean_text("step", step, STEP_MAX)
    task, _ = _open(task, actor, ANY_ROLE, "report progress")
    _require_owner(task, actor, "report progress on")
    if task.status != S.IN_PROGRESS:
        raise _conflict(task, (S.IN_PROGRESS,), "given progress")
    if percent < task.progress_percent:
        raise TaskInvalid(f"Progress never goes back: {task.identifier} is at {task.progress_percent}%; report "
                          f"{task.progress_percent}% or more.")
    now = _now()
    _move(task, (S.IN_PROGRESS,), "given progress", extra=Q(progress_percent__lte=percent), progress_percent=percent,
          progress_step=step or task.progress_step, updated_at=now, **_lock_values(task.team, now))
    event_record(task.team, task, TeamEventType.PROGRESS, actor, {"percent": percent, "step": task.progress_step})
    return task


@transaction.atomic
def task_complete(*, actor: Actor, task: TeamTask, result: str) -> TeamTask:
    """The owner finishes its task with a result (a pending task it owns, e.g. after its lock expired, may be
    completed directly). Tasks waiting only for this one become pending."""
    result = clean_text("result", result, RESULT_MAX, required=True)
    if actor.is_agent:  # the statement itself checks that the task is the caller's
        done = _complete_fast(actor, [(task, result)])
        if done:
            return done[0]
    task, _ = _open(task, actor, ANY_ROLE, "complete tasks")
    _require_owner(task, actor, "complete")
    allowed = (S.IN_PROGRESS, S.PENDING) if actor.is_agent else (S.IN_PROGRESS, S.PENDING, S.STALE)
    if task.status not in allowed:
        raise _conflict(task, allowed, "completed")
    now = _now()
    _move(task, allowed, "completed", status=S.COMPLETED, result=result, completed_at=now, progress_percent=100,
          question="", question_asked_at=None, updated_at=now, **NO_LOCK)
    event_record(task.team, task, TeamEventType.COMPLETED, actor, {})
    _finished(task, actor)
    return task


@transaction.atomic
def task_fail(*, actor: Actor, task: TeamTask, reason: str) -> TeamTask:
    """The owner gives up on its task (or the lead / a person fails any unfinished task), with the reason as the
    result. Tasks waiting for it stay blocked and the lead is told."""
    reason = clean_text("reason", reason, COMMENT_MAX, required=True)
    task, role = _open(task, actor, ANY_ROLE, "fail tasks")
    if role != MemberRole.LEAD:
        _require_owner(task, actor, "fail")
    allowed = ACTIVE_STATUSES if role in (MemberRole.LEAD, "person", "system") else (S.IN_PROGRESS, S.PENDING)
    if task.status not in allowed:
        raise _conflict(task, allowed, "failed")
    _move(task, allowed, "failed", status=S.FAILED, result=reason, **NO_LOCK)
    event_record(task.team, task, TeamEventType.FAILED, actor, {"reason": reason[:BLOCKER_RESULT_QUOTE]})
    _finished(task, actor)
    return task


@transaction.atomic
def task_cancel(*, actor: Actor, task: TeamTask, reason: str = "") -> TeamTask:
    """The lead (or a person) cancels an unfinished task; the reason becomes its result. Tasks waiting for it stay
    blocked and the lead is told."""
    reason = clean_text("reason", reason, COMMENT_MAX)
    task, _ = _open(task, actor, LEAD, "cancel tasks")
    if task.status not in ACTIVE_STATUSES:
        raise _conflict(task, ACTIVE_STATUSES, "cancelled")
    _move(task, ACTIVE_STATUSES, "cancelled", status=S.CANCELLED, result=reason, **NO_LOCK)
    event_record(task.team, task, TeamEventType.CANCELLED, actor, {"reason": reason[:BLOCKER_RESULT_QUOTE]})
    _finished(task, actor)
    return task


# ---------------------------------------------------------------- review

@transaction.atomic
def task_review(*, actor: Actor, task: TeamTask, result: str = "") -> TeamTask:
    """The owner submits its work for review: in progress → in review (optionally with the result so far)."""
    result = clean_text("result", result, RESULT_MAX)
    task, _ = _open(task, actor, ANY_ROLE, "submit tasks for review")
    _require_owner(task, actor, "submit for review")
    if task.status != S.IN_PROGRESS:
        raise _conflict(task, (S.IN_PROGRESS,), "submitted for review")
    values = {"result": result} if result else {}
    _move(task, (S.IN_PROGRESS,), "submitted for review", status=S.IN_REVIEW, **values, **NO_LOCK)
    event_record(task.team, task, TeamEventType.REVIEWED, actor, {})
    return task


@transaction.atomic
def task_approve(*, actor: Actor, task: TeamTask, note: str = "") -> TeamTask:
    """The lead, a reviewer or a person accepts a task in review: it is completed (never by its own owner)."""
    note = clean_text("note", note, COMMENT_MAX)
    task, _ = _open(task, actor, APPROVERS, "approve tasks")
    if actor.is_agent and task.owner_id == actor.agent_id:
        raise TeamPermissionDenied(f"You own {task.identifier}; someone else must approve your own work.")
    if task.status != S.IN_REVIEW:
        raise _conflict(task, (S.IN_REVIEW,), "approved")
    now = _now()
    _move(task, (S.IN_REVIEW,), "approved", status=S.COMPLETED, completed_at=now, updated_at=now)
    if note.strip():
        TaskComment.objects.create(task=task, kind=CommentKind.NOTE, author=str(actor), content=note)
    event_record(task.team, task, TeamEventType.APPROVED, actor, {"note": note[:BLOCKER_RESULT_QUOTE]})
    _finished(task, actor)
    return task


@transaction.atomic
def task_reject(*, actor: Actor, task: TeamTask, feedback: str) -> TeamTask:
    """The lead, a reviewer or a person sends a task in review back with feedback (a note): to its owner, in progress
    with a fresh lock, or to pending when it has none."""
    feedback = clean_text("feedback", feedback, COMMENT_MAX, required=True)
    task, _ = _open(task, actor, APPROVERS, "reject tasks")
    if task.status != S.IN_REVIEW:
        raise _conflict(task, (S.IN_REVIEW,), "rejected")
    now = _now()
    if task.owner_id:
        _move(task, (S.IN_REVIEW,), "rejected", status=S.IN_PROGRESS, updated_at=now, **_lock_values(task.team, now))
    else:
        _move(task, (S.IN_REVIEW,), "rejected", status=S.PENDING, updated_at=now, **NO_LOCK)
    TaskComment.objects.create(task=task, kind=CommentKind.NOTE, author=str(actor), content=feedback)
    event_record(task.team, task, TeamEventType.REJECTED, actor, {"feedback": feedback[:BLOCKER_RESULT_QUOTE]})
    if task.owner_id:
        message_system_send(team=task.team, to=task.owner, task=task, sender=str(actor),
                            text=f"{task.identifier} was sent back from review: {feedback}")
    return task


# ---------------------------------------------------------------- comments, attachments, questions

@transaction.atomic
def task_comment(*, actor: Actor, task: TeamTask, content: str, kind: str = CommentKind.NOTE) -> TaskComment:
    """Any teammate writes a note. A `blocker` (from the owner, the lead or a person, on a pending or in-progress
    task) fails the task, and when the team escalates blockers the lead gets an event and a mailbox message."""
    content = clean_text("content", content, COMMENT_MAX, required=True)
    if kind not in CommentKind.values:
        raise TaskInvalid(f"kind must be one of {', '.join(CommentKind.values)}.")
    task, role = _open(task, actor, ANY_ROLE, "comment on tasks")
    team = task.team
    if kind == CommentKind.BLOCKER:
        if role in (MemberRole.MEMBER, MemberRole.REVIEWER) and task.owner_id != actor.agent_id:
            raise TeamPermissionDenied(f"Only {task.identifier}'s owner or the lead can report a blocker on it; "
                                       f"write a note instead.")
        if task.status not in (S.IN_PROGRESS, S.PENDING):
            raise TaskConflict(f"{task.identifier} is {_label(task.status)}; a blocker applies to pending or in "
                               f"progress tasks (write a note instead).")
    comment = TaskComment.objects.create(task=task, kind=kind, author=str(actor), content=content)
    event_record(team, task, TeamEventType.COMMENTED, actor, {"kind": kind, "comment": comment.pk})
    if kind == CommentKind.BLOCKER:
        quote = content[:BLOCKER_RESULT_QUOTE]
        _move(task, (S.IN_PROGRESS, S.PENDING), "blocked", status=S.FAILED, result=f"Blocked: {quote}", **NO_LOCK)
        event_record(team, task, TeamEventType.FAILED, actor, {"reason": f"Blocked: {quote}", "blocker": True})
        if team.blocker_escalation:
            event_record(team, task, TeamEventType.ESCALATED, actor, {"reason": "blocker", "comment": comment.pk})
            message_system_send(
                team=team, to=team.lead, task=task,
                text=(f"[Escalation] {actor} is blocked on {task.identifier} ({task.subject[:100]}): {quote}\n"
                      f"The task is now failed: retry it, reassign it or cancel it."))
        _finished(task, actor)
    return comment


def _clean_path(path: Any) -> str:
    """A workspace-relative path by the workspace rules (tools_app.paths): text without NUL or control characters,
    not absolute, never leaving the workspace with `..`."""
    from tools_app.paths import PathError, validate_user_path

    try:
        validate_user_path(path)
    except PathError as exc:
        raise TaskInvalid(f"path: {exc}.") from None
    if path.startswith("/") or path.startswith("~"):
        raise TaskInvalid("Attach a workspace-relative path (like reports/summary.md), not an absolute one.")
    normalized = posixpath.normpath(path)
    if normalized in ("", "."):
        raise TaskInvalid("path names the workspace itself; attach a file inside it.")
    if normalized == ".." or normalized.startswith("../"):
        raise TaskInvalid("path leaves the workspace (..); attach a file inside it.")
    return normalized


@transaction.atomic
def task_attach(*, actor: Actor, task: TeamTask, path: str, size: Any = None, note: str = "") -> TaskAttachment:
    """Any teammate attaches a workspace file to a task (the path, already checked by the calling tool, is checked
    again here). Attaching the same path again updates its size and note."""
    path = _clean_path(path)
    if size is not None:
        size = clean_int("size", size, 0, 2 ** 62)
    note = clean_text("note", note, NOTE_MAX)
    task, _ = _open(task, actor, ANY_ROLE, "attach files")
    if TaskAttachment.objects.filter(task=task).exclude(path=path).count() >= ATTACHMENTS_MAX:
        raise TaskInvalid(f"{task.identifier} already has {ATTACHMENTS_MAX} attachments, the limit.")
    (attachment,) = TaskAttachment.objects.bulk_create(
        [TaskAttachment(task=task, path=path, size=size, note=note, created_by=str(actor))],
        update_conflicts=True, unique_fields=["task", "path"], update_fields=["size", "note", "created_by"])
    TeamTask.objects.filter(pk=task.pk).update(updated_at=_now())
    event_record(task.team, task, TeamEventType.ATTACHED, actor, {"path": path, "size": size})
    return attachment


@transaction.atomic
def task_ask_user(*, actor: Actor, task: TeamTask, question: str) -> TeamTask:
    """The owner asks the person behind the task a question (shown on the board until answered); renews the lock."""
    question = clean_text("question", question, COMMENT_MAX, required=True)
    task, _ = _open(task, actor, ANY_ROLE, "ask questions")
    _require_owner(task, actor, "ask about")
    if task.status != S.IN_PROGRESS:
        raise _conflict(task, (S.IN_PROGRESS,), "asked about")
    now = _now()
    _move(task, (S.IN_PROGRESS,), "asked about", question=question, question_asked_at=now, updated_at=now,
          **_lock_values(task.team, now))
    event_record(task.team, task, TeamEventType.ASKED_USER, actor, {"question": question[:BLOCKER_RESULT_QUOTE]})
    return task


@transaction.atomic
def task_answer(*, actor: Actor, task: TeamTask, answer: str) -> TeamTask:
    """A person (or the lead) answers the owner's open question: a note by them on the task, the question cleared,
    and the answer in the owner's mailbox."""
    answer = clean_text("answer", answer, COMMENT_MAX, required=True)
    task, _ = _open(task, actor, LEAD, "answer questions")
    if not task.question:
        raise TaskConflict(f"{task.identifier} has no open question to answer.")
    question = task.question
    _move(task, ACTIVE_STATUSES + TERMINAL_STATUSES, "answered", extra=~Q(question=""), question="",
          question_asked_at=None)
    TaskComment.objects.create(task=task, kind=CommentKind.NOTE, author=str(actor), content=answer)
    event_record(task.team, task, TeamEventType.ANSWERED, actor,
                 {"question": question[:BLOCKER_RESULT_QUOTE], "answer": answer[:BLOCKER_RESULT_QUOTE]})
    if task.owner_id:
        message_system_send(team=task.team, to=task.owner, task=task, sender=str(actor),
                            text=f"Answer to your question on {task.identifier} (“{question[:200]}”): {answer}")
    return task


# ---------------------------------------------------------------- changes and recovery

@transaction.atomic
def task_update(*, actor: Actor, task: TeamTask, subject: Any = None, description: Any = None,
                priority: Any = None, blocked_by: Any = None) -> TeamTask:
    """The lead (or a person) edits an unfinished task. New dependencies must be same-team unfinished tasks without
    a cycle, and the status follows them: blocked while any blocker is unfinished, pending once none is."""
    values: dict[str, Any] = {}
    if subject is not None:
        values["subject"] = clean_text("subject", subject, SUBJECT_MAX, required=True).strip()
    if description is not None:
        values["description"] = clean_text("description", description, DESCRIPTION_MAX)
    if priority is not None:
        values["priority"] = clean_int("priority", priority, -PRIORITY_MAX, PRIORITY_MAX)
    if blocked_by is not None:
        # The team row first (lock order), which also serializes dependency changes, so two concurrent updates
        # cannot each close half of a cycle. Then the named blockers before the task itself: finishing a blocker
        # locks the tasks waiting for it, so holding a dependent while waiting for its blocker would deadlock.
        list(Team.objects.select_for_update().filter(pk=task.team_id).values_list("pk", flat=True))
        _lock_named(task.team_id, blocked_by)
    task, _ = _open(task, actor, LEAD, "update tasks")
    team = task.team
    if task.status in TERMINAL_STATUSES:
        raise TaskConflict(f"{task.identifier} is {_label(task.status)}; finished tasks cannot be changed (retry it "
                           f"first).")
    changed: dict[str, Any] = {k: (v if k == "priority" else True) for k, v in values.items()}
    if blocked_by is not None:
        allowed = (S.PENDING, S.BLOCKED, S.STALE)
        if task.status not in allowed:
            raise TaskConflict(f"{task.identifier} is {_label(task.status)}; its dependencies can change only while "
                               f"it is {_labels(allowed)}.")
        current = set(TaskDependency.objects.filter(task=task).values_list("blocker_id", flat=True))
        blockers = _resolve_blockers(team, blocked_by, keep=current, self_task=task)
        _check_cycle(task, blockers)
        TaskDependency.objects.filter(task=task).exclude(blocker__in=blockers).delete()
        TaskDependency.objects.bulk_create([TaskDependency(task=task, blocker=b) for b in blockers
                                            if b.pk not in current])
        waiting = any(b.status != S.COMPLETED for b in blockers)
        status = S.BLOCKED if waiting else (S.PENDING if task.status == S.BLOCKED else task.status)
        if status != task.status:
            values["status"] = status
        changed["blocked_by"] = [b.identifier for b in blockers]
    if not changed:
        raise TaskInvalid("Nothing to update: pass subject, description, priority or blocked_by.")
    _move(task, (task.status,), "updated", **values)
    event_record(team, task, TeamEventType.UPDATED, actor, {"changed": changed})
    return task


@transaction.atomic
def task_retry(*, actor: Actor, task: TeamTask) -> TeamTask:
    """The lead (or a person) puts a failed, stale, cancelled or even completed task back on the board: pending for
    its previous owner to claim again while it is still a member, else open to all (blocked if it still waits for
    unfinished tasks), result and progress cleared."""
    task, _ = _open(task, actor, LEAD, "retry tasks")
    allowed = (S.FAILED, S.STALE, S.CANCELLED, S.COMPLETED)
    if task.status not in allowed:
        raise _conflict(task, allowed, "retried")
    previous = task.status
    status = S.BLOCKED if _unfinished_blockers(task) else S.PENDING
    # The previous owner claims it again only while it is a member (not removed, not now the lead or a reviewer):
    # otherwise the task would wait for an agent that can never claim it, so it opens to every member.
    values: dict[str, Any] = {}
    if task.owner_id is not None and member_role(task.team, task.owner_id) != MemberRole.MEMBER:
        values["owner"] = None
    _move(task, allowed, "retried", status=status, result="", progress_percent=0, progress_step="",
          completed_at=None, question="", question_asked_at=None, **values, **NO_LOCK)
    event_record(task.team, task, TeamEventType.RETRIED, actor, {"from": previous})
    _announce_assigned(task)
    return task


@transaction.atomic
def task_unblock(*, actor: Actor, task: TeamTask) -> TeamTask:
    """A person (or the lead) releases a blocked task by hand: it becomes pending, and its dependencies on unfinished
    tasks are dropped (listed in the event)."""
    task, _ = _open(task, actor, LEAD, "unblock tasks")
    if task.status != S.BLOCKED:
        raise _conflict(task, (S.BLOCKED,), "unblocked")
    dropped = _unfinished_blockers(task)
    TaskDependency.objects.filter(task=task, blocker__in=dropped).delete()
    _move(task, (S.BLOCKED,), "unblocked", status=S.PENDING)
    event_record(task.team, task, TeamEventType.UNBLOCKED, actor,
                 {"by": "hand", "dropped": [b.identifier for b in dropped]})
    _announce_assigned(task)
    return task
