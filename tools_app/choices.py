from django.db import models


class AgentType(models.TextChoices):
    OPEN = "open", "Open (per-user workspaces)"
    PREDEFINED = "predefined", "Predefined (one shared workspace)"


class InvocationStatus(models.TextChoices):
    OK = "ok"
    ERROR = "error"
    DENIED = "denied"
    RATE_LIMITED = "rate_limited"
    INVALID = "invalid_arguments"
    TIMEOUT = "timeout"
    PENDING_APPROVAL = "pending_approval"
