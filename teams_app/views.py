"""Pages for people: the teams index, the live team board (columns by status, filters, live updates over
/ws/events/ group `team.<id>`), a task's detail and the recovery actions. Staff only; each action is one service call
with the person as actor, its errors shown as Django messages."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable

from django.contrib import admin, messages
from django.db.models import Count, Prefetch, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from goclaw.authz import person_may, person_required
from goclaw.errors import ApplicationError
from teams_app import forms as action_forms
from teams_app.actors import Actor
from teams_app.choices import ACTIVE_STATUSES, TERMINAL_STATUSES, TaskStatus
from teams_app.errors import TaskNotFound
from teams_app.models import TaskDependency, Team, TeamMember, TeamTask
from teams_app.selectors import TASK_LIST_MAX, task_get, task_list, task_list_finished
from teams_app.services import tasks as task_services
from teams_app.services.members import member_stop_request
from teams_app.work import member_activity

TERMINAL_LIMIT = 50  # latest cards shown per terminal column
ACTIVE_LIMIT = TASK_LIST_MAX  # active cards on one page; a board that full is read with the filters
QUERY_MAX = 200  # characters of a search
EVENTS_SHOWN = 200  # latest events on a task's page (an agent reporting progress every minute makes many)
COLUMNS = [TaskStatus.PENDING, TaskStatus.IN_PROGRESS, TaskStatus.BLOCKED, TaskStatus.IN_REVIEW, TaskStatus.STALE,
           TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED]
VIEW_PERMISSION = "teams_app.view_teamtask"
CHANGE_PERMISSION = "teams_app.change_teamtask"
STOP_PERMISSION = "runtime_app.run_session"  # stopping a member's hosted run cancels a session (docs/runtime.md)


def _context(request: HttpRequest, **extra: Any) -> dict[str, Any]:
    """The admin's own context (site header, user links, nav sidebar), so the pages look like the admin."""
    return {**admin.site.each_context(request), **extra}


def _team_or_none(team_id: int) -> Team | None:
    return Team.objects.select_related("lead").filter(pk=team_id).first()


def _board_url(team: Team) -> str:
    return reverse("teams:board", args=[team.pk])


def _task_url(team: Team, identifier: str) -> str:
    return reverse("teams:task", args=[team.pk, identifier])


@person_required(VIEW_PERMISSION)
@require_GET
def team_index(request: HttpRequest) -> HttpResponse:
    """Every team with its lead and open task counts, each linking to its board."""
    needs_person = Q(tasks__status__in=[TaskStatus.BLOCKED, TaskStatus.STALE, TaskStatus.IN_REVIEW]) | (
        Q(tasks__status__in=ACTIVE_STATUSES) & Q(tasks__question__gt=""))
    teams = Team.objects.select_related("lead").annotate(
        open_tasks=Count("tasks", filter=Q(tasks__status__in=ACTIVE_STATUSES), distinct=True),
        needs_person=Count("tasks", filter=needs_person, distinct=True),
        members_count=Count("members", distinct=True),
    ).order_by("status", "name")
    return TemplateResponse(request, "teams_app/index.html", _context(request, title="Team boards", teams=teams))


@dataclass
class BoardFilters:
    """The board's GET parameters: owner (a member's key), q (full-text search), terminal (open finished columns)."""

    owner: str = ""
    query: str = ""
    show_terminal: bool = False

    @classmethod
    def from_request(cls, request: HttpRequest) -> "BoardFilters":
        owner = request.GET.get("owner", "")[:64]
        query = " ".join(request.GET.get("q", "").split())[:QUERY_MAX]
        return cls(owner=owner, query=query,
                   show_terminal=request.GET.get("terminal") in ("1", "on", "true"))

    @property
    def active(self) -> bool:
        return bool(self.owner or self.query)


def _board_tasks(team: Team, filters: BoardFilters, owner_agent) -> list[TeamTask]:
    """The cards: the active tasks (the selector's board order, or best match first when searching) and the latest
    TERMINAL_LIMIT of each finished status, with owners and blockers in a fixed number of queries."""
    query = filters.query or None
    active = list(task_list(team, status="active", owner=owner_agent, query=query, limit=ACTIVE_LIMIT))
    return active + list(task_list_finished(team, owner=owner_agent, query=query, per_status=TERMINAL_LIMIT))


def _version(updated_at) -> int:
    """A card's version for the live page: `updated_at` in whole milliseconds, as events carry it (their JSON
    keeps milliseconds). Events may arrive out of order across processes; the page ignores older ones."""
    return int(updated_at.timestamp()) * 1000 + updated_at.microsecond // 1000


@person_required(VIEW_PERMISSION)
@require_GET
def board(request: HttpRequest, team_id: int) -> HttpResponse:
    """The live board: one column per status; filters (owner, full-text search, show terminal) are GET params."""
    team = _team_or_none(team_id)
    if team is None:
        messages.error(request, f"There is no team {team_id}.")
        return redirect("teams:index")
    filters = BoardFilters.from_request(request)
    members = list(TeamMember.objects.filter(team=team).select_related("agent").order_by("agent__key"))
    activity = member_activity(team.pk)  # what runs each hosted member now (its team session), if anything
    for member in members:
        member.run = activity.get(member.agent_id)
    owner_agent = next((m.agent for m in members if m.agent.key == filters.owner), None)
    if filters.owner and owner_agent is None:
        messages.warning(request, f"{filters.owner} is not a member of {team.name}: showing every owner.")
        filters.owner = ""
    by_status: dict[str, list[TeamTask]] = {status: [] for status in COLUMNS}
    cards = _board_tasks(team, filters, owner_agent)
    truncated = sum(task.status not in TERMINAL_STATUSES for task in cards) >= ACTIVE_LIMIT
    for task in cards:
        task.version = _version(task.updated_at)
        by_status.setdefault(task.status, []).append(task)
    columns = [{"status": status, "label": TaskStatus(status).label, "tasks": by_status[status],
                "terminal": status in TERMINAL_STATUSES} for status in COLUMNS]
    live = {"team": team.pk, "group": f"team.{team.pk}", "owner": filters.owner, "query": filters.query,
            "terminal_limit": TERMINAL_LIMIT, "task_url": _task_url(team, "T-000"), "placeholder": "T-000"}
    return TemplateResponse(request, "teams_app/board.html", _context(
        request, title=f"Board: {team.name}", team=team, columns=columns, members=members, filters=filters,
        live=live, truncated=truncated, active_limit=ACTIVE_LIMIT,
        can_stop=person_may(request.user, VIEW_PERMISSION, STOP_PERMISSION)))


@person_required(VIEW_PERMISSION)
@require_GET
def task_detail(request: HttpRequest, team_id: int, identifier: str) -> HttpResponse:
    """A task with its description, result, comments, attachments, events and dependencies both ways, and the
    recovery actions its status allows."""
    team = _team_or_none(team_id)
    if team is None:
        messages.error(request, f"There is no team {team_id}.")
        return redirect("teams:index")
    try:
        task = task_get(team, identifier)
    except TaskNotFound as exc:
        messages.error(request, exc.message)
        return redirect(_board_url(team))
    task = (TeamTask.objects.select_related("owner", "team")
            .prefetch_related("comments", "attachments",
                              Prefetch("dependencies", TaskDependency.objects.select_related("blocker__owner")),
                              Prefetch("dependents", TaskDependency.objects.select_related("task__owner")))
            .get(pk=task.pk))
    events = list(task.events.order_by("-created_at", "-id")[:EVENTS_SHOWN])
    for event in events:
        event.data_json = json.dumps(event.data, ensure_ascii=False, sort_keys=True, default=str)
    status = task.status
    can_change = person_may(request.user, CHANGE_PERMISSION)
    available = {
        "cancel": status not in TERMINAL_STATUSES,
        "retry": status in (TaskStatus.FAILED, TaskStatus.STALE, TaskStatus.CANCELLED, TaskStatus.COMPLETED),
        "reassign": status not in TERMINAL_STATUSES and status != TaskStatus.IN_REVIEW,
        "unblock": status == TaskStatus.BLOCKED,
        "answer": bool(task.question) and status not in TERMINAL_STATUSES,
        "approve": status == TaskStatus.IN_REVIEW,
        "reject": status == TaskStatus.IN_REVIEW,
        "comment": True,
    } if can_change else {}
    return TemplateResponse(request, "teams_app/task.html", _context(
        request, title=f"{task.identifier} {task.subject[:80]}", team=team, task=task, available=available,
        reassign_form=action_forms.ReassignForm(team=team), can_change=can_change, events=events,
        blocked_by=[d.blocker for d in task.dependencies.all()], blocks=[d.task for d in task.dependents.all()]))


@dataclass(frozen=True)
class RecoveryAction:
    """One button of the task page: the form that checks its input and the single service it calls."""

    form: type[action_forms.ActionForm]
    run: Callable[[Actor, TeamTask, dict], Any]
    done: str  # the success message, "{id}" replaced by the task's identifier


ACTIONS: dict[str, RecoveryAction] = {
    "cancel": RecoveryAction(action_forms.CancelForm, lambda actor, task, data: task_services.task_cancel(
        actor=actor, task=task, reason=data["reason"]), "{id} cancelled."),
    "retry": RecoveryAction(action_forms.ActionForm, lambda actor, task, data: task_services.task_retry(
        actor=actor, task=task), "{id} is pending again."),
    "reassign": RecoveryAction(action_forms.ReassignForm, lambda actor, task, data: task_services.task_assign(
        actor=actor, task=task, assignee=data["assignee"]), "{id} reassigned."),
    "unblock": RecoveryAction(action_forms.ActionForm, lambda actor, task, data: task_services.task_unblock(
        actor=actor, task=task), "{id} unblocked."),
    "answer": RecoveryAction(action_forms.AnswerForm, lambda actor, task, data: task_services.task_answer(
        actor=actor, task=task, answer=data["answer"]), "Answer sent to the owner of {id}."),
    "approve": RecoveryAction(action_forms.ApproveForm, lambda actor, task, data: task_services.task_approve(
        actor=actor, task=task, note=data["note"]), "{id} approved."),
    "reject": RecoveryAction(action_forms.RejectForm, lambda actor, task, data: task_services.task_reject(
        actor=actor, task=task, feedback=data["feedback"]), "{id} sent back with your feedback."),
    "comment": RecoveryAction(action_forms.CommentForm, lambda actor, task, data: task_services.task_comment(
        actor=actor, task=task, content=data["content"]), "Comment added to {id}."),
}


@person_required(VIEW_PERMISSION, CHANGE_PERMISSION)
@require_POST
def task_action(request: HttpRequest, team_id: int, identifier: str, action: str) -> HttpResponse:
    """Run one recovery action as the person; back to the task page (or the board, `back=board`) with a message."""
    team = _team_or_none(team_id)
    if team is None:
        messages.error(request, f"There is no team {team_id}.")
        return redirect("teams:index")
    spec = ACTIONS.get(action)
    back = _board_url(team) if request.POST.get("back") == "board" else _task_url(team, identifier)
    if spec is None:
        messages.error(request, f"Unknown action {action!r}; the board offers: {', '.join(ACTIONS)}.")
        return redirect(back)
    try:
        task = task_get(team, identifier)
        form = spec.form(request.POST, team=team)
        if not form.is_valid():
            messages.error(request, f"{action}: {action_forms.form_error_sentence(form)}")
        else:
            spec.run(Actor.for_user(request.user), task, form.cleaned_data)
            messages.success(request, spec.done.format(id=task.identifier))
    except TaskNotFound as exc:
        messages.error(request, exc.message)
        return redirect(_board_url(team))
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect(back)


@person_required(VIEW_PERMISSION, STOP_PERMISSION)
@require_POST
def member_stop(request: HttpRequest, team_id: int, agent_key: str) -> HttpResponse:
    """Stop the hosted run working for a member (the runtime cancels its team session); back to the board."""
    team = _team_or_none(team_id)
    if team is None:
        messages.error(request, f"There is no team {team_id}.")
        return redirect("teams:index")
    member = TeamMember.objects.filter(team=team, agent__key=agent_key).select_related("agent").first()
    if member is None:
        messages.error(request, f"{agent_key} is not a member of {team.name}.")
        return redirect(_board_url(team))
    try:
        member_stop_request(actor=Actor.for_user(request.user), team=team, agent=member.agent)
        messages.success(request, f"Stopped the run working for {member.agent.key}.")
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect(_board_url(team))
