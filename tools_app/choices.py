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


class PolicyScope(models.TextChoices):
    GLOBAL = "global", "Global"
    PROVIDER = "provider", "Provider override"
    AGENT = "agent", "Agent"
    AGENT_PROVIDER = "agent_provider", "Agent + provider"
    GROUP = "group", "Channel / group chat"
    SUBAGENT = "subagent", "Subagents (depth > 0)"
    LEAF = "leaf", "Leaf subagents (max depth)"
