from django.db import models


class TeamStatus(models.TextChoices):
    ACTIVE = "active"
    ARCHIVED = "archived"


class MemberRole(models.TextChoices):
    """The lead creates, assigns, approves, rejects and cancels; members claim and work; reviewers review."""

    LEAD = "lead"
    MEMBER = "member"
    REVIEWER = "reviewer"


class TaskStatus(models.TextChoices):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    BLOCKED = "blocked"
    IN_REVIEW = "in_review"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    STALE = "stale"


TERMINAL_STATUSES = (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED)
ACTIVE_STATUSES = (TaskStatus.PENDING, TaskStatus.IN_PROGRESS, TaskStatus.BLOCKED, TaskStatus.IN_REVIEW,
                   TaskStatus.STALE)


class CommentKind(models.TextChoices):
    NOTE = "note"
    BLOCKER = "blocker"


class TeamEventType(models.TextChoices):
    CREATED = "created"
    CLAIMED = "claimed"
    ASSIGNED = "assigned"
    PROGRESS = "progress"
    COMMENTED = "commented"
    ATTACHED = "attached"
    REVIEWED = "reviewed"
    APPROVED = "approved"
    REJECTED = "rejected"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UPDATED = "updated"
    STALE = "stale"
    UNBLOCKED = "unblocked"
    ESCALATED = "escalated"
    RETRIED = "retried"
    RELEASED = "released"  # an expired lock returned the task to pending
    ASKED_USER = "asked_user"
    ANSWERED = "answered"
    STOPPED = "stopped"  # a person stopped a member's hosted run from the board


class MessageKind(models.TextChoices):
    DIRECT = "direct"
    BROADCAST = "broadcast"
    SYSTEM = "system"  # escalations and notices from goclaw itself


class LinkDirection(models.TextChoices):
    OUTBOUND = "outbound", "Outbound (source → target)"
    BIDIRECTIONAL = "bidirectional", "Bidirectional (either may delegate to the other)"


class DelegationStatus(models.TextChoices):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
