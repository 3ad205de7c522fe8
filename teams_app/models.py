"""Agent teams (docs/teams.md): teams and members, the task board (tasks, dependencies, comments, attachments, the
event log), the mailbox, handoff routes and delegation links. The services in `teams_app.services` are the only
writers: every status change is a conditional UPDATE with a row-count check."""
from __future__ import annotations

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from teams_app.choices import (CommentKind, DelegationStatus, LinkDirection, MemberRole, MessageKind, TaskStatus,
                               TeamEventType, TeamStatus)

ACTOR_MAX = 200  # "agent:<key>", "user:<username>" or "system"


class Team(models.Model):
    """A lead agent and its teammates sharing one task board and one mailbox."""

    name = models.CharField(max_length=100, unique=True)
    lead = models.ForeignKey("tools_app.Agent", on_delete=models.PROTECT, related_name="led_teams")
    description = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=TeamStatus.choices, default=TeamStatus.ACTIVE)
    blocker_escalation = models.BooleanField(
        default=True, help_text="a blocker comment fails the task and tells the lead (an event and a mailbox message)")
    lock_minutes = models.PositiveIntegerField(
        default=60, validators=[MinValueValidator(1), MaxValueValidator(24 * 60)],
        help_text="how long a claim holds without progress before the task returns to pending")
    stale_after_minutes = models.PositiveIntegerField(
        default=120, validators=[MinValueValidator(1), MaxValueValidator(30 * 24 * 60)],
        help_text="a pending task untouched this long is marked stale")
    review_stale_after_minutes = models.PositiveIntegerField(
        default=240, validators=[MinValueValidator(1), MaxValueValidator(30 * 24 * 60)],
        help_text="a task waiting in review this long is marked stale")
    task_counter = models.PositiveIntegerField(default=0, editable=False)  # the last T-NNN handed out
    created_by = models.CharField(max_length=ACTOR_MAX, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class TeamMember(models.Model):
    """An agent's place in a team. The lead is a member with role `lead` (kept in step with `Team.lead`)."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="members")
    agent = models.ForeignKey("tools_app.Agent", on_delete=models.CASCADE, related_name="team_memberships")
    role = models.CharField(max_length=16, choices=MemberRole.choices, default=MemberRole.MEMBER)
    joined_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team", "role", "agent__key"]
        constraints = [models.UniqueConstraint(fields=["team", "agent"], name="team_member_unique")]

    def __str__(self) -> str:
        return f"{self.agent} in {self.team} ({self.role})"


class TeamTask(models.Model):
    """One card on a team's board, identified as T-001… within its team."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="tasks")
    number = models.PositiveIntegerField()
    subject = models.CharField(max_length=500)
    description = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=TaskStatus.choices, default=TaskStatus.PENDING)
    priority = models.IntegerField(default=0, help_text="higher first")
    owner = models.ForeignKey("tools_app.Agent", null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="owned_tasks")
    created_by = models.CharField(max_length=ACTOR_MAX, blank=True)
    blocked_by = models.ManyToManyField("self", symmetrical=False, related_name="blocks", blank=True,
                                        through="TaskDependency", through_fields=("task", "blocker"))
    result = models.TextField(blank=True)
    progress_percent = models.PositiveSmallIntegerField(default=0, validators=[MaxValueValidator(100)])
    progress_step = models.CharField(max_length=500, blank=True)
    locked_at = models.DateTimeField(null=True, blank=True)
    lock_expires_at = models.DateTimeField(null=True, blank=True)
    question = models.TextField(blank=True, help_text="the owner's open ask_user question, until answered")
    question_asked_at = models.DateTimeField(null=True, blank=True)
    user_id = models.CharField(max_length=255, blank=True)
    channel = models.CharField(max_length=64, blank=True)
    chat_id = models.CharField(max_length=255, blank=True)
    session_key = models.CharField(max_length=255, blank=True,
                                   help_text="the session of the agent that created or last assigned it (a hosted "
                                             "lead's: its teammates' results are told there)")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    search = models.GeneratedField(
        expression=SearchVector("subject", "description", config="simple"),
        output_field=SearchVectorField(), db_persist=True)

    class Meta:
        ordering = ["team", "number"]
        constraints = [
            models.UniqueConstraint(fields=["team", "number"], name="team_task_number_unique"),
            models.CheckConstraint(condition=Q(progress_percent__lte=100), name="team_task_progress_le_100"),
        ]
        indexes = [
            models.Index(fields=["team", "status", "-priority", "number"], name="team_task_board"),
            models.Index(fields=["status", "lock_expires_at"], name="team_task_lock_expiry"),
            models.Index(fields=["owner", "status"], name="team_task_owner"),
            GinIndex(fields=["search"], name="team_task_search_gin"),
        ]

    def __str__(self) -> str:
        return f"{self.identifier} {self.subject[:60]}"

    @property
    def identifier(self) -> str:
        return task_identifier(self.number)


def task_identifier(number: int) -> str:
    return f"T-{number:03d}"


class TaskDependency(models.Model):
    """`task` waits for `blocker` (same team; cycles are refused by the services). Kept after the blocker finishes,
    so the board can show what a task waited for."""

    task = models.ForeignKey(TeamTask, on_delete=models.CASCADE, related_name="dependencies")
    blocker = models.ForeignKey(TeamTask, on_delete=models.CASCADE, related_name="dependents")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["task", "blocker"], name="task_dependency_unique"),
            models.CheckConstraint(condition=~Q(task=models.F("blocker")), name="task_dependency_not_self"),
        ]

    def __str__(self) -> str:
        return f"{self.task_id} waits for {self.blocker_id}"


class TaskComment(models.Model):
    """A note on a task, or a blocker (which fails the task and may escalate to the lead)."""

    task = models.ForeignKey(TeamTask, on_delete=models.CASCADE, related_name="comments")
    kind = models.CharField(max_length=16, choices=CommentKind.choices, default=CommentKind.NOTE)
    author = models.CharField(max_length=ACTOR_MAX)
    content = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["task", "created_at", "id"]

    def __str__(self) -> str:
        return f"{self.kind} by {self.author}"


class TaskAttachment(models.Model):
    """A workspace file attached to a task (the path as checked by the workspace rules of the attaching call)."""

    task = models.ForeignKey(TeamTask, on_delete=models.CASCADE, related_name="attachments")
    path = models.CharField(max_length=4096)
    size = models.BigIntegerField(null=True, blank=True)
    note = models.CharField(max_length=500, blank=True)
    created_by = models.CharField(max_length=ACTOR_MAX)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["task", "created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["task", "path"], name="task_attachment_unique")]

    def __str__(self) -> str:
        return self.path


class TeamEvent(models.Model):
    """The board's audit log: what happened to which task, by whom (an agent or a person), with details."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="events")
    task = models.ForeignKey(TeamTask, null=True, blank=True, on_delete=models.CASCADE, related_name="events")
    event_type = models.CharField(max_length=20, choices=TeamEventType.choices)
    actor = models.CharField(max_length=ACTOR_MAX)
    data = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["team", "-created_at"], name="team_event_recent"),
                   models.Index(fields=["task", "created_at"], name="team_event_task")]

    def __str__(self) -> str:
        return f"{self.event_type} by {self.actor}"


class TeamMessage(models.Model):
    """The mailbox: a direct message to one teammate, or a broadcast (one row per recipient, so every read
    receipt is its own). `read_at` is the receipt."""

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="messages")
    sender = models.CharField(max_length=ACTOR_MAX)
    recipient = models.ForeignKey("tools_app.Agent", on_delete=models.CASCADE, related_name="team_messages")
    kind = models.CharField(max_length=16, choices=MessageKind.choices, default=MessageKind.DIRECT)
    text = models.TextField()
    task = models.ForeignKey(TeamTask, null=True, blank=True, on_delete=models.SET_NULL, related_name="messages")
    session_key = models.CharField(max_length=255, blank=True,
                                   help_text="the sender's session (a hosted agent's: a teammate woken by the message "
                                             "reports back there)")
    created_at = models.DateTimeField(auto_now_add=True)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["recipient", "team"], condition=Q(read_at__isnull=True),
                                name="team_message_unread")]

    def __str__(self) -> str:
        return f"{self.kind} from {self.sender} to {self.recipient}"


class HandoffRoute(models.Model):
    """Which agent receives the next message of one conversation (channel + chat id), until cleared or expired."""

    channel = models.CharField(max_length=64)
    chat_id = models.CharField(max_length=255)
    target = models.ForeignKey("tools_app.Agent", on_delete=models.CASCADE, related_name="handoffs_in")
    source = models.ForeignKey("tools_app.Agent", null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="handoffs_out")
    reason = models.TextField(blank=True)
    created_by = models.CharField(max_length=ACTOR_MAX, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["channel", "chat_id"], name="handoff_route_unique")]

    def __str__(self) -> str:
        return f"{self.channel}/{self.chat_id} → {self.target}"


class AgentLink(models.Model):
    """Permission for `source` to delegate to `target` (and back, when bidirectional), with a concurrency limit and
    per-user allow / deny lists (deny wins; an empty allow list allows everyone)."""

    source = models.ForeignKey("tools_app.Agent", on_delete=models.CASCADE, related_name="links_out")
    target = models.ForeignKey("tools_app.Agent", on_delete=models.CASCADE, related_name="links_in")
    direction = models.CharField(max_length=16, choices=LinkDirection.choices, default=LinkDirection.OUTBOUND)
    max_concurrent = models.PositiveIntegerField(default=3, validators=[MinValueValidator(1), MaxValueValidator(1000)])
    allow_user_ids = models.JSONField(default=list, blank=True)
    deny_user_ids = models.JSONField(default=list, blank=True)
    description = models.TextField(blank=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["source__key", "target__key"]
        constraints = [
            models.UniqueConstraint(fields=["source", "target"], name="agent_link_unique"),
            models.CheckConstraint(condition=~Q(source=models.F("target")), name="agent_link_not_self"),
        ]

    def __str__(self) -> str:
        arrow = "↔" if self.direction == LinkDirection.BIDIRECTIONAL else "→"
        return f"{self.source} {arrow} {self.target}"


class Delegation(models.Model):
    """One piece of work `source` handed to `target` over a link. To a team lead it is a task on the lead's board,
    and the task's result becomes the delegation's."""

    source = models.ForeignKey("tools_app.Agent", on_delete=models.CASCADE, related_name="delegations_out")
    target = models.ForeignKey("tools_app.Agent", on_delete=models.CASCADE, related_name="delegations_in")
    link = models.ForeignKey(AgentLink, null=True, blank=True, on_delete=models.SET_NULL, related_name="delegations")
    task = models.OneToOneField(TeamTask, null=True, blank=True, on_delete=models.SET_NULL, related_name="delegation")
    request = models.TextField()
    status = models.CharField(max_length=16, choices=DelegationStatus.choices, default=DelegationStatus.RUNNING)
    result = models.TextField(blank=True)
    user_id = models.CharField(max_length=255, blank=True)
    session_key = models.CharField(max_length=255, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["target", "status"], name="delegation_target_status"),
                   models.Index(fields=["link", "status"], name="delegation_link_status"),
                   models.Index(fields=["source", "-created_at"], name="delegation_source_recent")]

    def __str__(self) -> str:
        return f"D-{self.pk} {self.source} → {self.target} ({self.status})"
