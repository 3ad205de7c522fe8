"""Human approvals: per-tool permissions, durable approval requests bound to the exact call, "allow always"
rules, and file writes held for review. See docs/approvals.md."""
from __future__ import annotations

import uuid

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from tools_app.choices import (AgentMode, ApprovalDecision, ApprovalStatus, PendingChangeStatus, Permission,
                               PermissionScope, RuleMatch)
from tools_app.models.agents import Agent


class ToolPermission(models.Model):
    """allow / ask / deny for one tool name (or `group:<name>`) globally, for one agent, or for one mode.
    A deny from any scope wins; otherwise the most specific scope (agent > mode > global) decides."""

    scope = models.CharField(max_length=10, choices=PermissionScope.choices)
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="tool_permissions")
    mode = models.CharField(max_length=20, choices=AgentMode.choices, blank=True)
    tool = models.CharField(max_length=200, help_text='a tool name or "group:<name>"')
    permission = models.CharField(max_length=5, choices=Permission.choices)
    note = models.CharField(max_length=300, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["scope", "tool"]
        constraints = [
            models.UniqueConstraint(fields=["scope", "agent", "mode", "tool"], name="tool_permission_unique",
                                    nulls_distinct=False),
            models.CheckConstraint(
                name="tool_permission_scope_fields",
                condition=(Q(scope="global", agent__isnull=True, mode="")
                           | Q(scope="agent", agent__isnull=False, mode="")
                           | Q(scope="mode", agent__isnull=True) & ~Q(mode="")),
            ),
        ]

    def __str__(self) -> str:
        where = {"agent": getattr(self.agent, "key", ""), "mode": self.mode}.get(self.scope, "global")
        return f"{self.tool}: {self.permission} ({where})"

    def clean(self) -> None:
        if self.scope == PermissionScope.AGENT and self.agent_id is None:
            raise ValidationError({"agent": "an agent permission needs an agent"})
        if self.scope == PermissionScope.MODE and not self.mode:
            raise ValidationError({"mode": "a mode permission needs a mode"})
        if self.scope != PermissionScope.AGENT:
            self.agent = None
        if self.scope != PermissionScope.MODE:
            self.mode = ""


class ApprovalRequest(models.Model):
    """One call waiting for (or past) a person's decision. Bound to the exact call by `args_hash`;
    `expires_at` is the deadline of the current step: the decision while pending, the execution once approved."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="approval_requests")
    user_id = models.CharField(max_length=255, blank=True)
    session_key = models.CharField(max_length=255, blank=True)
    channel = models.CharField(max_length=64, blank=True)
    call_context = models.JSONField(default=dict, blank=True, help_text="provider, chat, subagent depth, request allow list")
    tool_name = models.CharField(max_length=128)
    arguments = models.JSONField(default=dict, help_text="scrubbed for display; the hash binds the exact values")
    args_hash = models.CharField(max_length=64)
    summary = models.TextField()
    details = models.JSONField(default=dict, blank=True, help_text="e.g. the exec command, directory and parsed commands")
    reason = models.CharField(max_length=500, blank=True, help_text="why a person is asked")
    status = models.CharField(max_length=10, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING)
    decision = models.CharField(max_length=12, choices=ApprovalDecision.choices, blank=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    note = models.CharField(max_length=500, blank=True)
    requested_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    consumed_at = models.DateTimeField(null=True, blank=True)
    invocation_id = models.UUIDField(null=True, blank=True, help_text="the audit row of the approved run")
    rule = models.ForeignKey("ApprovalRule", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["-requested_at"]
        permissions = [("decide_approvalrequest", "Can decide approval requests (approve, deny, cancel)")]
        indexes = [
            models.Index(fields=["status", "expires_at"], name="approval_status_expiry"),
            models.Index(fields=["agent", "session_key", "tool_name", "status"], name="approval_agent_session"),
        ]

    def __str__(self) -> str:
        return f"{self.agent.key}:{self.tool_name} {self.status}"

    @property
    def is_overdue(self) -> bool:
        return self.expires_at <= timezone.now()


class ApprovalRule(models.Model):
    """"Allow always", made durable and revocable: one agent (optionally one user), one tool, one pattern.
    `exact` matches the hash of the approved arguments (exec: command, working_dir and timeout); prefix/glob are
    explicit widenings judged on the analysed command or the normalised path (docs/approvals.md)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="approval_rules")
    user_id = models.CharField(max_length=255, blank=True, help_text="empty: any user of this agent")
    tool_name = models.CharField(max_length=128)
    match = models.CharField(max_length=10, choices=RuleMatch.choices, default=RuleMatch.EXACT)
    pattern = models.TextField(help_text="exec: the command (exact, shown scrubbed), its leading words (prefix) or "
                                         "word globs (glob); other tools: canonical arguments JSON (exact) or a JSON "
                                         "object of per-argument globs")
    args_hash = models.CharField(max_length=64, blank=True,
                                 help_text="exact rules: hash of tool + every argument (exec: command, working_dir, timeout)")
    free_effects = models.JSONField(default=list, blank=True,
                                    help_text="exec prefix/glob: effects (write, delete) the further arguments may have "
                                              "because the approved command's had them")
    description = models.TextField(blank=True, help_text="what the rule covers, as shown to the person who created it")
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    use_count = models.PositiveIntegerField(default=0)
    last_used_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_from = models.ForeignKey(ApprovalRequest, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["agent", "tool_name"], name="approval_rule_agent_tool")]

    def __str__(self) -> str:
        return f"{self.agent.key}:{self.tool_name} {self.match} {self.pattern[:60]}"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > timezone.now())


class PendingChange(models.Model):
    """A write_file/edit call held in review/audit mode; a person accepts (it runs then) or rejects it. The exact
    arguments exist only sealed; `arguments`, `path` and `summary` are scrubbed display copies."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="pending_changes")
    user_id = models.CharField(max_length=255, blank=True)
    session_key = models.CharField(max_length=255, blank=True)
    channel = models.CharField(max_length=64, blank=True)
    call_context = models.JSONField(default=dict, blank=True, help_text="provider, chat, subagent depth, request allow list")
    tool_name = models.CharField(max_length=128)
    path = models.CharField(max_length=4096)
    arguments = models.JSONField(default=dict, blank=True, help_text="scrubbed copy of the call, for display")
    sealed_arguments = models.TextField(blank=True, help_text="the exact call, AES-256-GCM sealed to this row "
                                                              "(goclaw.crypto); applied on accept, erased once decided")
    args_hash = models.CharField(max_length=64)
    summary = models.TextField()
    status = models.CharField(max_length=10, choices=PendingChangeStatus.choices, default=PendingChangeStatus.PENDING)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    result = models.TextField(blank=True)
    invocation_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at"]
        indexes = [models.Index(fields=["agent", "session_key", "status"], name="pending_change_session")]
        permissions = [("decide_pendingchange", "Can accept or reject held changes")]

    def __str__(self) -> str:
        return f"{self.agent.key}:{self.tool_name} {self.path} {self.status}"
