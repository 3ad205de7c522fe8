from django.db import models


class ProviderKind(models.TextChoices):
    OPENAI = "openai", "OpenAI-compatible chat completions"
    ANTHROPIC = "anthropic", "Anthropic Messages API"


class SessionStatus(models.TextChoices):
    RUNNING = "running"
    WAITING_APPROVAL = "waiting_approval"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    ARCHIVED = "archived"


ACTIVE_STATUSES = (SessionStatus.RUNNING, SessionStatus.WAITING_APPROVAL)
ENDED_STATUSES = (SessionStatus.COMPLETED, SessionStatus.FAILED, SessionStatus.CANCELLED)


class MessageRole(models.TextChoices):
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    # A subagent's result for its parent: delivered to the model as one user message per batch.
    ANNOUNCE = "announce"


class SessionOrigin(models.TextChoices):
    """Why a session exists: a person's or channel's conversation, or work another session started."""

    DIRECT = "direct"          # the API, a channel gateway, a person
    SUBAGENT = "subagent"      # spawn: the same agent one level deeper
    DELEGATION = "delegation"  # another agent delegated work to this (hosted) agent
    EVALUATION = "evaluation"  # a generator or evaluator round of evaluate_loop
    GATE = "gate"              # a quality gate's reviewer
    TEAM = "team"              # a hosted team member woken by a task or a mailbox message
    HANDOFF = "handoff"        # a conversation handed off to this agent
