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
