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


class AgentMode(models.TextChoices):
    """How much a person oversees the agent's tool calls (see docs/approvals.md)."""

    AUTONOMOUS = "autonomous", "Autonomous (policy and exec settings decide)"
    CAUTIOUS = "cautious", "Cautious (mutating tools ask)"
    MANUAL = "manual", "Manual (every tool asks)"
    PLAN = "plan", "Plan (mutating tools denied until a plan is approved)"
    REVIEW = "review", "Review (file writes held for review; other mutating tools ask)"
    AUDIT = "audit", "Audit (file writes held for review; other mutating tools denied)"


class Permission(models.TextChoices):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


class PermissionScope(models.TextChoices):
    GLOBAL = "global"
    AGENT = "agent"
    MODE = "mode"


class ApprovalStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


class ApprovalDecision(models.TextChoices):
    ALLOW_ONCE = "allow_once", "Allow once"
    ALLOW_ALWAYS = "allow_always", "Allow always"
    DENY = "deny", "Deny"


class RuleMatch(models.TextChoices):
    """How far an allow-always rule reaches (docs/approvals.md, "What an allow-always rule covers")."""

    EXACT = "exact", "Exact call (exec: command, working directory and timeout)"
    PREFIX = "prefix", "Leading command words (exec only; analysed arguments)"
    GLOB = "glob", "Globs on command words or on argument values (paths normalised, segment-wise)"


class ExecSecurity(models.TextChoices):
    DENY = "deny"
    ALLOWLIST = "allowlist"
    FULL = "full"


class ExecAsk(models.TextChoices):
    OFF = "off"
    ON_MISS = "on-miss"
    ALWAYS = "always"


class PendingChangeStatus(models.TextChoices):
    PENDING = "pending"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    FAILED = "failed"
