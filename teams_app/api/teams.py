"""The teams API (docs/teams.md), mounted at /api/v1/ by teams_app/api/urls.py: teams and their members (staff
writes), the board (staff and the team's member agents read it; staff or the lead's token create tasks), the staff
recovery actions on a task (cancel, retry, assign, unblock, answer, approve, reject, comment, fail), the event log and
the mailbox. Thin: parse, call one service or selector, render. An agent asking about a team it is not in gets the
same 404 as for a team that does not exist; agents steer tasks through the `team_tasks` tool, not these actions."""
from __future__ import annotations

from typing import Any, Callable

from django.db.models import Count, Prefetch, Q, QuerySet
from django.urls import re_path
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from goclaw.api import IsAgentOrStaff, IsStaff, agent_of, error_responses, validated, validated_query
from goclaw.errors import NotFound
from teams_app import selectors
from teams_app.actors import Actor
from teams_app.api import serializers as s
from teams_app.choices import ACTIVE_STATUSES
from teams_app.errors import TaskInvalid, TaskNotFound, TeamInvalid, TeamNotFound
from teams_app.models import Team, TeamEvent, TeamMember, TeamMessage
from teams_app.services import tasks as task_services
from teams_app.services import teams as team_services
from tools_app.models import Agent

MAX_ID = 2**63 - 1
IDENTIFIER_MAX = 20  # "T-001" and its spellings; anything longer is simply not a task
TEAM_ID = OpenApiParameter("id", OpenApiTypes.INT, OpenApiParameter.PATH, description="the team's id")
TASK_ID = OpenApiParameter("task_id", OpenApiTypes.STR, OpenApiParameter.PATH,
                           description="the task's identifier in its team, e.g. T-001")
AGENT_KEY = OpenApiParameter("agent", OpenApiTypes.STR, OpenApiParameter.PATH, description="the member's agent key")

NO_TEAM = error_responses({404: "no such team, or one this agent is not a member of (team_not_found)"})
NO_TASK = error_responses({404: "no such team (team_not_found) or no such task on its board (task_not_found)"})
TEAM_ERRORS = error_responses({400: "invalid fields, an unknown agent key, a taken name, the lead listed as a "
                                    "member, a bad role (`details` names the field; team_invalid / invalid_request)"})
ACTION_ERRORS = error_responses({
    400: "invalid fields, or an unknown assignee (task_invalid)",
    409: "the task is not in a state this action applies to, or another agent changed it first (task_conflict)"})
TASK_ERRORS = error_responses({
    400: "invalid fields, an unknown assignee or dependency (task_invalid), a dependency cycle (task_dependency_cycle)",
    403: "the agent is not the team's lead (team_permission_denied); staff only for a session",
    409: "the task is not in a state this action applies to, or another agent changed it first (task_conflict)"})


# --- lookups -------------------------------------------------------------------------------------------------------
def _actor(request) -> Actor:
    """Who acts: the token's agent, or the staff member (recorded as "user:<name>")."""
    agent = agent_of(request)
    return Actor.for_agent(agent) if agent is not None else Actor.for_user(request.user)


def _teams_for(request) -> QuerySet[Team]:
    """Every team for staff; for an agent token only the active teams it is a member of. With the lead, the members
    (ordered) and the count of open tasks in the same few queries whatever the number of teams."""
    rows = Team.objects.all()
    agent = agent_of(request)
    if agent is not None:
        rows = rows.filter(pk__in=selectors.teams_for_agent(agent).values("pk"))
    members = TeamMember.objects.select_related("agent").order_by("role", "agent__key")
    return (rows.select_related("lead").prefetch_related(Prefetch("members", queryset=members))
            .annotate(open_tasks=Count("tasks", filter=Q(tasks__status__in=ACTIVE_STATUSES)))
            .order_by("name", "pk"))


def _team(request, id: str) -> Team:
    team = None
    if id.isascii() and id.isdigit() and int(id) <= MAX_ID:
        team = _teams_for(request).filter(pk=int(id)).first()
    if team is None:
        raise TeamNotFound(f"no team {id[:40]}" + (" among this agent's teams" if agent_of(request) else ""))
    return team


def _task(team: Team, task_id: str):
    if len(task_id) > IDENTIFIER_MAX or "\x00" in task_id:
        raise TaskNotFound(f"Task {task_id[:IDENTIFIER_MAX]!r} was not found on team {team.name}'s board.")
    return selectors.task_get(team, task_id)


def _agent(key: str | None, field: str, error: type = TeamInvalid) -> Agent | None:
    """The agent a body names by key; an unknown key is a 400 naming the field."""
    if key is None:
        return None
    agent = Agent.objects.filter(key=key).first() if "\x00" not in key else None
    if agent is None:
        raise error(f"{field}: no agent has the key {key[:64]!r}", details={field: ["unknown agent key"]})
    return agent


def _team_answer(request, team: Team, status: int = 200) -> Response:
    return Response(s.TeamSerializer(_team(request, str(team.pk))).data, status=status)


def _task_answer(team: Team, task_id: str, status: int = 200) -> Response:
    """A task as task_as_dict(detail=True) gives it, read again after the write (comments and events included)."""
    return Response(selectors.task_as_dict(selectors.task_get(team, task_id), detail=True), status=status)


class _ReadsForMembers:
    """GET for staff and the team's member agents; every other method for staff only (documented per method)."""

    def get_permissions(self):
        method = getattr(getattr(self, "request", None), "method", "GET")
        return [IsAgentOrStaff()] if method in ("GET", "HEAD", "OPTIONS") else [IsStaff()]


# --- teams ---------------------------------------------------------------------------------------------------------
class TeamListView(_ReadsForMembers, ListAPIView):
    serializer_class = s.TeamSerializer
    staff_permissions = {"GET": ("teams_app.view_team",), "POST": ("teams_app.add_team",)}

    def get_queryset(self):
        return _teams_for(self.request)

    @extend_schema(summary="Teams: all of them (staff), or the active teams the calling agent is a member of")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(request=s.TeamCreateSerializer, responses={201: s.TeamSerializer, **TEAM_ERRORS},
                   summary="Create a team with its lead and members (staff)")
    def post(self, request):
        data = dict(validated(s.TeamCreateSerializer, request.data))
        lead = _agent(data.pop("lead"), "lead")
        members = [(_agent(m["agent"], "members"), m["role"]) for m in data.pop("members", [])]
        team = team_services.team_create(actor=_actor(request), name=data.pop("name"), lead=lead, members=members,
                                         **data)
        return _team_answer(request, team, status=201)


class TeamDetailView(_ReadsForMembers, APIView):
    staff_permissions = {"GET": ("teams_app.view_team",), "PATCH": ("teams_app.change_team",),
                         "DELETE": ("teams_app.delete_team",)}

    @extend_schema(parameters=[TEAM_ID], responses={200: s.TeamSerializer, **NO_TEAM},
                   summary="One team with its members and settings (staff; an agent: a team it is in)")
    def get(self, request, id):
        return Response(s.TeamSerializer(_team(request, id)).data)

    @extend_schema(parameters=[TEAM_ID], request=s.TeamPatchSerializer,
                   responses={200: s.TeamSerializer, **TEAM_ERRORS, **NO_TEAM},
                   summary="Change a team: settings, description, name, lead, status archived | active (staff)")
    def patch(self, request, id):
        team = _team(request, id)
        data = dict(validated(s.TeamPatchSerializer, request.data))
        if "lead" in data:
            data["lead"] = _agent(data["lead"], "lead")
        team = team_services.team_update(actor=_actor(request), team=team, **data)
        return _team_answer(request, team)

    @extend_schema(parameters=[TEAM_ID], responses={204: None, **NO_TEAM, **error_responses({
        409: "the team has tasks: archive it instead (PATCH status archived) so its board stays readable "
             "(team_has_tasks)"})},
        summary="Delete a team that has no tasks (staff; a team with tasks is archived instead)")
    def delete(self, request, id):
        team_services.team_delete(actor=_actor(request), team=_team(request, id))
        return Response(status=204)


class TeamMemberListView(APIView):
    permission_classes = [IsStaff]
    staff_permissions = {"POST": ("teams_app.add_teammember", "teams_app.change_teammember")}  # adds or changes a role

    @extend_schema(parameters=[TEAM_ID], request=s.TeammateWriteSerializer,
                   responses={200: s.TeamSerializer, **TEAM_ERRORS, **NO_TEAM},
                   summary="Add a member or reviewer to a team, or change a teammate's role (staff)")
    def post(self, request, id):
        team = _team(request, id)
        data = validated(s.TeammateWriteSerializer, request.data)
        team_services.team_member_set(actor=_actor(request), team=team, agent=_agent(data["agent"], "agent"),
                                      role=data["role"])
        return _team_answer(request, team)


class TeamMemberDetailView(APIView):
    permission_classes = [IsStaff]
    staff_permissions = {"DELETE": ("teams_app.delete_teammember",)}

    @extend_schema(parameters=[TEAM_ID, AGENT_KEY], responses={204: None, **NO_TEAM, **error_responses({
        400: "the agent is the lead (change the lead first) or not in the team (team_invalid)",
        404: "no such team, or no agent with this key"})},
        summary="Remove an agent from a team (staff; the lead cannot be removed)")
    def delete(self, request, id, agent):
        team = _team(request, id)
        member = Agent.objects.filter(key=agent).first() if "\x00" not in agent else None
        if member is None:
            raise NotFound(f"no agent has the key {agent[:64]!r}", code="agent_not_found")
        team_services.team_member_remove(actor=_actor(request), team=team, agent=member)
        return Response(status=204)


# --- the board -----------------------------------------------------------------------------------------------------
class TaskListView(ListAPIView):
    permission_classes = [IsAgentOrStaff]
    staff_permissions = {"GET": ("teams_app.view_teamtask",), "POST": ("teams_app.add_teamtask",)}
    serializer_class = s.TaskCreateSerializer  # what OPTIONS describes; GET answers task_as_dict rows

    def get_queryset(self):
        return selectors.task_list(self.team, status=self.filters.get("status") or None,
                                   owner=self.filters.get("owner") or None, query=self.filters.get("q") or None,
                                   limit=None)

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response([selectors.task_as_dict(task) for task in page])

    @extend_schema(parameters=[TEAM_ID, s.TaskListQuerySerializer], responses={200: s.TaskSerializer(many=True), **NO_TEAM},
                   summary="A team's tasks: by status, owner, or full-text search over subject and description "
                           "(best match first); otherwise by priority, then number")
    def get(self, request, *args, id, **kwargs):
        self.team = _team(request, id)
        self.filters = validated_query(s.TaskListQuerySerializer, request)
        return super().get(request, *args, **kwargs)

    @extend_schema(parameters=[TEAM_ID], request=s.TaskCreateSerializer,
                   responses={201: s.TaskDetailSerializer, **TASK_ERRORS, **NO_TEAM},
                   summary="Create a task (staff, or the team lead's token); no assignee: open for any member to claim")
    def post(self, request, id):
        team = _team(request, id)
        data = dict(validated(s.TaskCreateSerializer, request.data))
        if data.get("assignee") is not None:
            data["assignee"] = _agent(data["assignee"], "assignee", TaskInvalid)
        task = task_services.task_create(actor=_actor(request), team=team, **data)
        return _task_answer(team, task.identifier, status=201)


class TaskDetailView(APIView):
    permission_classes = [IsAgentOrStaff]
    staff_permissions = {"GET": ("teams_app.view_teamtask",)}

    @extend_schema(parameters=[TEAM_ID, TASK_ID], responses={200: s.TaskDetailSerializer, **NO_TASK},
                   summary="One task with its comments, attachments, events and the tasks it blocks")
    def get(self, request, id, task_id):
        task = _task(_team(request, id), task_id)
        return Response(selectors.task_as_dict(task, detail=True))


# --- the staff recovery actions: one service call each, as the person ---------------------------------------------
def _assign(actor, task, data):
    return task_services.task_assign(actor=actor, task=task, assignee=_agent(data["assignee"], "assignee", TaskInvalid))


ACTIONS: dict[str, tuple[type | None, Callable[..., Any], str]] = {
    "cancel": (s.ReasonSerializer, lambda actor, task, d: task_services.task_cancel(actor=actor, task=task, **d),
               "Cancel a task that is not finished"),
    "retry": (None, lambda actor, task, d: task_services.task_retry(actor=actor, task=task),
              "Retry a failed, stale, cancelled or completed task: back to pending, the owner kept as the assignee"),
    "assign": (s.AssignSerializer, _assign, "Give a task to a teammate (an in-progress task returns to pending)"),
    "unblock": (None, lambda actor, task, d: task_services.task_unblock(actor=actor, task=task),
                "Unblock a blocked task by hand: pending, its unfinished dependencies dropped"),
    "answer": (s.AnswerSerializer, lambda actor, task, d: task_services.task_answer(actor=actor, task=task, **d),
               "Answer the owner's ask_user question (a comment and a mailbox message to the owner)"),
    "approve": (s.NoteSerializer, lambda actor, task, d: task_services.task_approve(actor=actor, task=task, **d),
                "Approve a task in review: completed"),
    "reject": (s.FeedbackSerializer, lambda actor, task, d: task_services.task_reject(actor=actor, task=task, **d),
               "Reject a task in review with feedback: back to its owner (in progress) or pending"),
    "comment": (s.CommentSerializer, lambda actor, task, d: task_services.task_comment(actor=actor, task=task, **d),
                "Comment on a task (kind blocker fails it and may escalate to the lead)"),
    "fail": (s.RequiredReasonSerializer, lambda actor, task, d: task_services.task_fail(actor=actor, task=task, **d),
             "Mark a task failed with the reason"),
}


def _action_view(name: str, body: type | None, run: Callable[..., Any], summary: str) -> type[APIView]:
    class TaskActionView(APIView):
        permission_classes = [IsStaff]
        staff_permissions = {"POST": ("teams_app.change_teamtask",)}  # as the board page's recovery actions

        @extend_schema(operation_id=f"team_task_{name}", parameters=[TEAM_ID, TASK_ID], request=body,
                       responses={200: s.TaskDetailSerializer, **NO_TASK, **ACTION_ERRORS},
                       summary=f"{summary} (staff; recorded as a TeamEvent by user:<name>)")
        def post(self, request, id, task_id):
            team = _team(request, id)
            data = dict(validated(body, request.data)) if body is not None else {}
            task = _task(team, task_id)
            run(_actor(request), task, data)
            return _task_answer(team, task.identifier)

    TaskActionView.__name__ = TaskActionView.__qualname__ = f"Task{name.capitalize()}View"
    TaskActionView.__doc__ = f"POST …/tasks/<T-001>/{name}/: {summary.lower()} (staff)."
    return TaskActionView


# --- event log and mailbox -----------------------------------------------------------------------------------------
class TeamEventListView(ListAPIView):
    permission_classes = [IsAgentOrStaff]
    staff_permissions = {"GET": ("teams_app.view_teamevent",)}
    serializer_class = s.TeamEventSerializer

    def get_queryset(self):
        events = TeamEvent.objects.filter(team=self.team).select_related("task").order_by("-created_at", "-id")
        if self.filters.get("task"):
            events = events.filter(task=_task(self.team, self.filters["task"]))
        return events

    @extend_schema(parameters=[TEAM_ID, s.EventListQuerySerializer], responses={200: s.TeamEventSerializer(many=True),
                                                                                 **NO_TASK},
                   summary="A team's event log, newest first (staff and the team's agents); ?task= one task's")
    def get(self, request, *args, id, **kwargs):
        self.team = _team(request, id)
        self.filters = validated_query(s.EventListQuerySerializer, request)
        return super().get(request, *args, **kwargs)


class TeamMessageListView(ListAPIView):
    permission_classes = [IsStaff]
    staff_permissions = {"GET": ("teams_app.view_teammessage",)}
    serializer_class = s.TeamMessageSerializer

    def get_queryset(self):
        return (TeamMessage.objects.filter(team=self.team).select_related("recipient", "task")
                .order_by("-created_at", "-id"))

    @extend_schema(parameters=[TEAM_ID], responses={200: s.TeamMessageSerializer(many=True), **NO_TEAM},
                   summary="A team's mailbox, newest first, with read receipts (staff)")
    def get(self, request, *args, id, **kwargs):
        self.team = _team(request, id)
        return super().get(request, *args, **kwargs)


# Ids and identifiers are matched as text and parsed by the views: a malformed one is the same 404 envelope as an
# unknown one (after the credential checks).
def _route(pattern: str, view, name: str):
    """`teams/<id>/tasks` with or without the trailing slash (agents' HTTP clients differ; a POST cannot be
    redirected)."""
    regex = pattern.replace("<id>", "(?P<id>[^/]+)").replace("<task_id>", "(?P<task_id>[^/]+)")
    return re_path(f"^{regex.replace('<agent>', '(?P<agent>[^/]+)')}/?$", view, name=name)


urlpatterns: list = [
    _route("teams", TeamListView.as_view(), "team-list"),
    _route("teams/<id>", TeamDetailView.as_view(), "team-detail"),
    _route("teams/<id>/members", TeamMemberListView.as_view(), "team-member-list"),
    _route("teams/<id>/members/<agent>", TeamMemberDetailView.as_view(), "team-member-detail"),
    _route("teams/<id>/tasks", TaskListView.as_view(), "team-task-list"),
    _route("teams/<id>/tasks/<task_id>", TaskDetailView.as_view(), "team-task-detail"),
    *(_route(f"teams/<id>/tasks/<task_id>/{name}", _action_view(name, *spec).as_view(), f"team-task-{name}")
      for name, spec in ACTIONS.items()),
    _route("teams/<id>/events", TeamEventListView.as_view(), "team-event-list"),
    _route("teams/<id>/messages", TeamMessageListView.as_view(), "team-message-list"),
]
