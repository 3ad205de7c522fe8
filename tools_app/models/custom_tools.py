"""Custom tools: a shell command template an operator defines in the database (docs/custom-tools.md). Arguments are
shell-quoted into the template; the command runs through the same sandbox as `exec`."""
from __future__ import annotations

import uuid

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q

from tools_app.models.agents import Agent

CUSTOM_TOOL_NAME_RE = r"^[a-z][a-z0-9_]{0,63}\Z"
CUSTOM_TOOL_DEFAULT_TIMEOUT = 60
CUSTOM_TOOL_MAX_TIMEOUT = 3600


class CustomTool(models.Model):
    """A tool made of a command template (`{{.arg}}` placeholders), global (agent empty) or one agent's. Its env is
    sealed with goclaw.crypto (bound to this row) and write-only: only the variable names are readable."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=64, validators=[RegexValidator(CUSTOM_TOOL_NAME_RE,
                            "lower-case letters, digits and _, starting with a letter (at most 64)")])
    description = models.TextField()
    parameters = models.JSONField(default=dict, help_text="JSON Schema of the arguments (type object)")
    command = models.TextField(help_text="shell command template; {{.name}} is replaced by the quoted argument")
    timeout_seconds = models.PositiveIntegerField(
        default=CUSTOM_TOOL_DEFAULT_TIMEOUT,
        validators=[MinValueValidator(1), MaxValueValidator(CUSTOM_TOOL_MAX_TIMEOUT)])
    working_dir = models.CharField(max_length=1024, blank=True, help_text="relative to the workspace (empty: its root)")
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="custom_tools",
                              help_text="empty: every agent has this tool")
    enabled = models.BooleanField(default=True)
    group = models.CharField(max_length=64, default="custom")
    requires_approval = models.BooleanField(default=True, help_text="may be held for a person, as exec is")
    always_require_approval = models.BooleanField(default=False, help_text="a person approves every call")
    env_sealed = models.TextField(blank=True, default="", editable=False)
    env_names = models.JSONField(default=list, blank=True, editable=False)
    env_changed_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "created_at"]
        constraints = [
            models.UniqueConstraint(fields=["name"], condition=Q(agent__isnull=True), name="custom_tool_global_name"),
            models.UniqueConstraint(fields=["name", "agent"], name="custom_tool_agent_name"),
            models.CheckConstraint(name="custom_tool_timeout_range",
                                   condition=Q(timeout_seconds__gte=1, timeout_seconds__lte=CUSTOM_TOOL_MAX_TIMEOUT)),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.agent.key})" if self.agent_id else self.name
