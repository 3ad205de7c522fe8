"""Bodies, query strings and responses of the teams API (docs/teams.md). Fields take exactly the JSON type they
document (goclaw.api's strict fields), so the OpenAPI schema and the validation agree. A task is always answered in
the one shape `teams_app.selectors.task_as_dict` gives (API, tool, events, board): the serializers below only
document it."""
from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from goclaw.api import ClosedBody, StrictBooleanField, StrictCharField, StrictIntegerField
from teams_app.choices import CommentKind, MemberRole, TaskStatus, TeamStatus
from teams_app.models import Team, TeamEvent, TeamMember, TeamMessage

# Bounds of the request bodies: the services check the same limits (and say so in the error), these keep an
# oversized body from reaching them at all.
NAME_MAX = 100
AGENT_KEY_MAX = 64
DESCRIPTION_MAX = 20_000
TEAM_DESCRIPTION_MAX = 10_000
SUBJECT_MAX = 500
TEXT_MAX = 10_000
RESULT_MAX = 50_000
MEMBERS_MAX = 200
BLOCKED_BY_MAX = 50
PRIORITY_MAX = 1_000_000
LOCK_MINUTES_MAX = 24 * 60
STALE_MINUTES_MAX = 30 * 24 * 60
# Not only whitespace (a pattern the OpenAPI schema states too, so schema-valid and accepted agree).
NOT_BLANK = RegexValidator(r"\S", message="must not be blank")
TEAMMATE_ROLES = [MemberRole.MEMBER.value, MemberRole.REVIEWER.value]


def _text(max_length: int, **kwargs) -> StrictCharField:
    kwargs.setdefault("required", False)
    kwargs.setdefault("allow_blank", True)
    return StrictCharField(max_length=max_length, **kwargs)


def _agent_key(**kwargs) -> StrictCharField:
    return StrictCharField(max_length=AGENT_KEY_MAX, **kwargs)


# --- teams -------------------------------------------------------------------------------------------------------
class TeamMemberSerializer(serializers.ModelSerializer):
    """One teammate: the lead is listed too, with role `lead`."""

    agent = serializers.SlugRelatedField(slug_field="key", read_only=True)
    role = serializers.CharField(read_only=True, help_text=" | ".join(MemberRole.values))

    class Meta:
        model = TeamMember
        fields = ["agent", "role"]


class TeamSerializer(serializers.ModelSerializer):
    lead = serializers.SlugRelatedField(slug_field="key", read_only=True, help_text="the lead agent's key")
    status = serializers.CharField(read_only=True, help_text=" | ".join(TeamStatus.values))
    members = TeamMemberSerializer(many=True, read_only=True)
    open_tasks = serializers.IntegerField(read_only=True, help_text="tasks not completed, failed or cancelled")

    class Meta:
        model = Team
        fields = ["id", "name", "lead", "description", "status", "members", "blocker_escalation", "lock_minutes",
                  "stale_after_minutes", "review_stale_after_minutes", "open_tasks", "created_by", "created_at",
                  "updated_at"]


class TeammateWriteSerializer(serializers.Serializer):
    agent = _agent_key(help_text="the agent's key")
    role = serializers.ChoiceField(choices=TEAMMATE_ROLES, default=MemberRole.MEMBER.value,
                                   help_text="member (claims and works) or reviewer (approves / rejects)")


class _TeamSettings(serializers.Serializer):
    description = _text(TEAM_DESCRIPTION_MAX)
    blocker_escalation = StrictBooleanField(
        required=False, help_text="a blocker comment fails the task and tells the lead")
    lock_minutes = StrictIntegerField(required=False, min_value=1, max_value=LOCK_MINUTES_MAX,
                                      help_text="how long a claim holds without progress")
    stale_after_minutes = StrictIntegerField(required=False, min_value=1, max_value=STALE_MINUTES_MAX,
                                             help_text="a pending task untouched this long is marked stale")
    review_stale_after_minutes = StrictIntegerField(required=False, min_value=1, max_value=STALE_MINUTES_MAX,
                                                    help_text="a task waiting in review this long is marked stale")


class TeamCreateSerializer(_TeamSettings):
    """A new team: its lead and teammates by agent key (the lead is not listed among the members)."""

    name = StrictCharField(max_length=NAME_MAX, validators=[NOT_BLANK])
    lead = _agent_key(help_text="the lead agent's key")
    members = serializers.ListField(child=TeammateWriteSerializer(), required=False, max_length=MEMBERS_MAX)

    def validate(self, attrs: dict) -> dict:
        seen: set[str] = set()
        for member in attrs.get("members", []):
            key = member["agent"]
            if key == attrs.get("lead"):
                raise serializers.ValidationError({"members": [
                    f"{key[:64]} is the lead (role lead); do not list it among the members"]})
            if key in seen:
                raise serializers.ValidationError({"members": [f"{key[:64]} is listed twice"]})
            seen.add(key)
        return attrs


class TeamPatchSerializer(_TeamSettings):
    """The fields to change; `lead` names the new lead by key (the old lead stays a member)."""

    name = StrictCharField(required=False, max_length=NAME_MAX, validators=[NOT_BLANK])
    lead = _agent_key(required=False, help_text="the new lead agent's key")
    status = serializers.ChoiceField(choices=TeamStatus.choices, required=False,
                                     help_text="archived: no more writes; active: back in use")


# --- tasks -------------------------------------------------------------------------------------------------------
class TaskProgressSerializer(serializers.Serializer):
    percent = serializers.IntegerField(min_value=0, max_value=100)
    step = serializers.CharField(allow_blank=True)


class TaskSerializer(serializers.Serializer):
    """The one JSON shape of a task (teams_app.selectors.task_as_dict)."""

    id = serializers.CharField(help_text="the task's identifier in its team, e.g. T-001")
    team = serializers.IntegerField(help_text="the team's id")
    subject = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    status = serializers.CharField(help_text=" | ".join(TaskStatus.values))
    priority = serializers.IntegerField(help_text="higher first")
    owner = serializers.CharField(allow_null=True, help_text="the owning (or assigned) agent's key; null: open")
    created_by = serializers.CharField(allow_blank=True, help_text='"agent:<key>", "user:<name>" or "system…"')
    blocked_by = serializers.ListField(child=serializers.CharField(), help_text="identifiers this task waits for")
    result = serializers.CharField(allow_blank=True)
    progress = TaskProgressSerializer()
    lock_expires_at = serializers.DateTimeField(allow_null=True)
    question = serializers.CharField(allow_blank=True, help_text="the owner's open ask_user question")
    user_id = serializers.CharField(allow_blank=True)
    channel = serializers.CharField(allow_blank=True)
    chat_id = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    completed_at = serializers.DateTimeField(allow_null=True)


class TaskCommentRecordSerializer(serializers.Serializer):
    kind = serializers.CharField(help_text=" | ".join(CommentKind.values))
    author = serializers.CharField()
    content = serializers.CharField(allow_blank=True)
    created_at = serializers.DateTimeField()


class TaskAttachmentRecordSerializer(serializers.Serializer):
    path = serializers.CharField(help_text="workspace-relative path")
    size = serializers.IntegerField(allow_null=True)
    note = serializers.CharField(allow_blank=True)
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()


class TaskEventRecordSerializer(serializers.Serializer):
    type = serializers.CharField(help_text="the event type: created, claimed, …")
    actor = serializers.CharField()
    data = serializers.JSONField()
    created_at = serializers.DateTimeField()


class TaskDetailSerializer(TaskSerializer):
    comments = TaskCommentRecordSerializer(many=True, help_text="notes and blockers, oldest first")
    attachments = TaskAttachmentRecordSerializer(many=True, help_text="workspace files attached to the task")
    events = TaskEventRecordSerializer(many=True, help_text="what happened to the task and by whom (the latest 100)")
    blocks = serializers.ListField(child=serializers.CharField(), help_text="identifiers waiting for this task")


class TaskListQuerySerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=[*TaskStatus.values, "active", "all"], required=False,
                                     help_text="one status; active: not finished; all (the default): every task")
    owner = _text(AGENT_KEY_MAX, help_text="only tasks this agent owns (key)")
    q = _text(500, help_text="full-text search over subject and description")


class TaskCreateSerializer(ClosedBody, serializers.Serializer):
    subject = StrictCharField(max_length=SUBJECT_MAX, validators=[NOT_BLANK])
    description = _text(DESCRIPTION_MAX)
    priority = StrictIntegerField(required=False, min_value=-PRIORITY_MAX, max_value=PRIORITY_MAX,
                                  help_text="higher first")
    assignee = _agent_key(required=False, allow_null=True,
                          help_text="a teammate's key: the task is theirs to claim; absent: open to any member")
    blocked_by = serializers.ListField(child=StrictCharField(max_length=20), required=False,
                                       max_length=BLOCKED_BY_MAX, help_text='identifiers it waits for, e.g. ["T-001"]')



# --- the staff recovery actions ----------------------------------------------------------------------------------
class ReasonSerializer(serializers.Serializer):
    reason = _text(TEXT_MAX, default="")


class RequiredReasonSerializer(serializers.Serializer):
    reason = StrictCharField(max_length=TEXT_MAX, validators=[NOT_BLANK], help_text="why it failed (becomes the task's result)")


class AssignSerializer(serializers.Serializer):
    assignee = _agent_key(help_text="a teammate's key")


class AnswerSerializer(serializers.Serializer):
    answer = StrictCharField(max_length=TEXT_MAX, validators=[NOT_BLANK], help_text="the answer to the owner's ask_user question")


class NoteSerializer(serializers.Serializer):
    note = _text(TEXT_MAX, default="")


class FeedbackSerializer(serializers.Serializer):
    feedback = StrictCharField(max_length=TEXT_MAX, validators=[NOT_BLANK], help_text="what to change (a note on the task)")


class CommentSerializer(serializers.Serializer):
    content = StrictCharField(max_length=TEXT_MAX, validators=[NOT_BLANK])
    kind = serializers.ChoiceField(choices=CommentKind.choices, default=CommentKind.NOTE.value,
                                   help_text="blocker: fails the task and may escalate to the lead")


# --- events and messages -----------------------------------------------------------------------------------------
@extend_schema_field({"type": "string", "nullable": True, "description": "the task's identifier, e.g. T-001"})
class TaskRefField(serializers.Field):
    """A row's task as its identifier (T-001), or null (select_related("task") keeps it one query)."""

    def get_attribute(self, instance):
        return instance.task if instance.task_id is not None else None

    def to_representation(self, task: Any) -> str:
        return task.identifier


class TeamEventSerializer(serializers.ModelSerializer):
    task = TaskRefField(read_only=True)
    event_type = serializers.CharField(read_only=True)
    data = serializers.JSONField(read_only=True)

    class Meta:
        model = TeamEvent
        fields = ["id", "task", "event_type", "actor", "data", "created_at"]


class TeamMessageSerializer(serializers.ModelSerializer):
    recipient = serializers.SlugRelatedField(slug_field="key", read_only=True)
    task = TaskRefField(read_only=True)
    kind = serializers.CharField(read_only=True)

    class Meta:
        model = TeamMessage
        fields = ["id", "sender", "recipient", "kind", "text", "task", "created_at", "read_at"]


class EventListQuerySerializer(serializers.Serializer):
    task = _text(20, help_text="only this task's events (T-001)")
