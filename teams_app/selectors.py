"""Reads of the team board (docs/teams.md): which teams an agent is in, finding a task by its identifier, listing and
searching a board, and `task_as_dict`, the one JSON shape of a task that the API, the tools, events and the board page
all use. Permission scoping lives here: an agent only ever sees teams it is a member of."""
from __future__ import annotations

import re
from typing import Any, Iterable

from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db.models import F, Prefetch, QuerySet, Window
from django.db.models.functions import Coalesce, RowNumber

from teams_app.choices import TERMINAL_STATUSES, TaskStatus, TeamStatus
from teams_app.errors import TaskNotFound, TeamInvalid, TeamNotFound
from teams_app.models import Team, TeamTask, task_identifier

TASK_LIST_DEFAULT = 30
TASK_LIST_MAX = 200
DETAIL_EVENTS_MAX = 100
_IDENTIFIER_RE = re.compile(r"^\s*(?:[Tt]\s*-?\s*)?0*(\d{1,9})\s*$")


def teams_for_agent(agent: Any) -> QuerySet[Team]:
    """The active teams `agent` is a member of (as lead, member or reviewer), by name."""
    return Team.objects.filter(status=TeamStatus.ACTIVE, members__agent=agent).select_related("lead").order_by("name")


def team_for_agent(agent: Any, team_ref: Any = None) -> Team:
    """The one team a call is about: `team_ref` (a name or an id) among the agent's teams, or its only team.
    An agent never learns that a team it is not in exists: such a reference is simply not found."""
    teams = teams_for_agent(agent)
    if team_ref not in (None, ""):
        ref = str(team_ref).strip()[:200]
        if ref.isascii() and ref.isdigit():  # not "²": str.isdigit() accepts digits int() refuses
            team = teams.filter(pk=int(ref)).first() or teams.filter(name__iexact=ref).first()
        else:
            team = teams.filter(name__iexact=ref).first()
        if team is None:
            raise TeamNotFound(f"You are not in a team named {ref!r}; your teams: {_names(teams) or 'none'}.")
        return team
    found = list(teams[:21])
    if not found:
        raise TeamNotFound("You are not a member of any active team.")
    if len(found) > 1:
        raise TeamInvalid(f"You are in teams {_names(teams)}: pass team to say which one.")
    return found[0]


def _names(teams: QuerySet[Team]) -> str:
    names = list(teams.values_list("name", flat=True)[:21])
    return ", ".join(names[:20]) + (", …" if len(names) > 20 else "")


def task_number(identifier: Any) -> int | None:
    """The number in "T-001" / "t-1" / "1" / 1, or None when it is not a task identifier."""
    if isinstance(identifier, bool):
        return None
    if isinstance(identifier, int):
        return identifier if 0 < identifier < 10 ** 9 else None
    if not isinstance(identifier, str):
        return None
    match = _IDENTIFIER_RE.match(identifier)
    number = int(match.group(1)) if match else 0
    return number or None


def task_get(team: Team, identifier: Any) -> TeamTask:
    """One task of `team` by its identifier ("T-001", "t-1", "1"); TaskNotFound otherwise."""
    number = task_number(identifier)
    task = None
    if number is not None:
        task = (TeamTask.objects.select_related("owner", "team").prefetch_related(_blocked_by_prefetch())
                .filter(team=team, number=number).first())
    if task is None:
        shown = str(identifier)[:40] if identifier is not None else "(none)"
        raise TaskNotFound(f"Task {shown} was not found on team {team.name}'s board; list or search the board "
                           f"for its identifier (like T-001).")
    return task


def _blocked_by_prefetch() -> Prefetch:
    return Prefetch("blocked_by", queryset=TeamTask.objects.only("id", "number", "status").order_by("number"))


def task_list(team: Team, *, status: Any = None, owner: Any = None, query: str | None = None,
              limit: int | None = TASK_LIST_DEFAULT) -> QuerySet[TeamTask]:
    """The tasks of `team`: optionally of some statuses ("active" = not finished), of one owner (an Agent or its
    key), matching a full-text `query` (PostgreSQL, over subject + description; best match first). Otherwise ordered
    by status board order: highest priority first, then by number. `limit=None`: every match (the API pages)."""
    tasks = TeamTask.objects.filter(team=team).select_related("owner").prefetch_related(_blocked_by_prefetch())
    statuses = _statuses(status)
    if statuses is not None:
        tasks = tasks.filter(status__in=statuses)
    if owner is not None:
        tasks = tasks.filter(owner__key=owner) if isinstance(owner, str) else tasks.filter(owner=owner)
    if limit is not None:
        try:
            limit = max(1, min(int(limit), TASK_LIST_MAX))
        except (TypeError, ValueError):
            raise TeamInvalid(f"limit must be a whole number from 1 to {TASK_LIST_MAX}.") from None
    if query and str(query).strip():
        search = SearchQuery(str(query)[:500], config="simple", search_type="websearch")
        tasks = tasks.filter(search=search).annotate(rank=SearchRank(F("search"), search)).order_by("-rank", "number")
    else:
        tasks = tasks.order_by("-priority", "number")
    return tasks if limit is None else tasks[:limit]


def task_list_finished(team: Team, *, owner: Any = None, query: str | None = None,
                       per_status: int = 50) -> QuerySet[TeamTask]:
    """The latest `per_status` tasks of each finished status in one query (a window per status), newest first:
    what a person looks for in a finished column (`task_list` orders by priority). Same filters as `task_list`."""
    tasks = TeamTask.objects.filter(team=team, status__in=TERMINAL_STATUSES)
    if owner is not None:
        tasks = tasks.filter(owner=owner)
    if query:
        tasks = tasks.filter(search=SearchQuery(query, config="simple", search_type="websearch"))
    finished_at = Coalesce("completed_at", "updated_at")
    latest = Window(RowNumber(), partition_by=[F("status")], order_by=[finished_at.desc(), F("number").desc()])
    return (tasks.annotate(latest=latest, finished_at=finished_at).filter(latest__lte=per_status)
            .select_related("owner").prefetch_related(_blocked_by_prefetch()).order_by("-finished_at", "-number"))


def _statuses(status: Any) -> list[str] | None:
    if status in (None, "", "all"):
        return None
    if status == "active":
        return [TaskStatus.PENDING, TaskStatus.IN_PROGRESS, TaskStatus.BLOCKED, TaskStatus.IN_REVIEW,
                TaskStatus.STALE]
    wanted: Iterable[Any] = [status] if isinstance(status, str) else status
    statuses = [str(s) for s in wanted]
    unknown = [s for s in statuses if s not in TaskStatus.values]
    if unknown:
        raise TeamInvalid(f"Unknown task status {unknown[0][:40]!r}; use one of {', '.join(TaskStatus.values)}, "
                          f"active or all.")
    return statuses


def task_as_dict(task: TeamTask, *, detail: bool = False, blocked_by: list[str] | None = None) -> dict[str, Any]:
    """The one JSON shape of a task (API, tools, events, board page). `detail` adds comments, attachments, the
    event log and the tasks waiting for this one. `blocked_by`: the caller already has the identifiers (no query)."""
    if blocked_by is None:
        blocked_by = [task_identifier(b.number) for b in sorted(task.blocked_by.all(), key=lambda b: b.number)]
    data: dict[str, Any] = {
        "id": task.identifier,
        "team": task.team_id,
        "subject": task.subject,
        "description": task.description,
        "status": task.status,
        "priority": task.priority,
        "owner": task.owner.key if task.owner_id else None,
        "created_by": task.created_by,
        "blocked_by": blocked_by,
        "result": task.result,
        "progress": {"percent": task.progress_percent, "step": task.progress_step},
        "lock_expires_at": task.lock_expires_at,
        "question": task.question,
        "user_id": task.user_id,
        "channel": task.channel,
        "chat_id": task.chat_id,
        "created_at": task.created_at,
        "updated_at": task.updated_at,
        "completed_at": task.completed_at,
    }
    if detail:
        data["comments"] = [{"kind": c.kind, "author": c.author, "content": c.content, "created_at": c.created_at}
                            for c in task.comments.all()]
        data["attachments"] = [{"path": a.path, "size": a.size, "note": a.note, "created_by": a.created_by,
                                "created_at": a.created_at} for a in task.attachments.all()]
        events = task.events.order_by("-created_at", "-id")[:DETAIL_EVENTS_MAX]
        data["events"] = [{"type": e.event_type, "actor": e.actor, "data": e.data, "created_at": e.created_at}
                          for e in reversed(list(events))]
        data["blocks"] = [task_identifier(n) for n in
                          TeamTask.objects.filter(dependencies__blocker=task).order_by("number")
                          .values_list("number", flat=True)]
    return data
