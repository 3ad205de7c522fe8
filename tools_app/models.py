from __future__ import annotations

import uuid
from pathlib import Path

from django.conf import settings
from django.db import models
from django.utils import timezone

from tools_app.choices import AgentType, InvocationStatus


class Agent(models.Model):
    """An LLM agent that calls tools through goclaw; its key names it in URLs, events and policies."""

    key = models.SlugField(max_length=64, unique=True)
    display_name = models.CharField(max_length=200, blank=True)
    agent_type = models.CharField(max_length=20, choices=AgentType.choices, default=AgentType.PREDEFINED)
    provider = models.CharField(max_length=64, blank=True, help_text="LLM provider, e.g. openai, anthropic")
    model = models.CharField(max_length=128, blank=True)
    workspace = models.CharField(max_length=1024, blank=True, help_text="Empty: <GOCLAW_WORKSPACES_DIR>/<key>")
    other_config = models.JSONField(default=dict, blank=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["key"]

    def __str__(self) -> str:
        return self.key

    def clean(self) -> None:
        from tools_app.services.agents import agent_config_validate

        agent_config_validate(self.other_config, as_django_error=True)

    @property
    def workspace_path(self) -> Path:
        return Path(self.workspace).expanduser() if self.workspace else settings.WORKSPACES_DIR / self.key


class AgentToken(models.Model):
    """A bearer credential for one agent. Only the SHA-256 of the token is kept; the prefix identifies it."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="tokens")
    name = models.CharField(max_length=100, default="default")
    prefix = models.CharField(max_length=16, unique=True)
    token_hash = models.CharField(max_length=64)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.agent.key}/{self.name} (gclw_{self.prefix}_…)"

    @property
    def is_active(self) -> bool:
        return not self.revoked and (self.expires_at is None or self.expires_at > timezone.now())


class ToolInvocation(models.Model):
    """Audit row for one pass through the pipeline, whatever its outcome. Arguments are stored scrubbed."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Audit history outlives agents: keyed by the agent's key, deliberately not a foreign key.
    agent_key = models.CharField(max_length=64)
    user_id = models.CharField(max_length=255, blank=True)
    session_key = models.CharField(max_length=255, blank=True)
    channel = models.CharField(max_length=64, blank=True)
    tool_name = models.CharField(max_length=128)
    arguments = models.JSONField(default=dict)
    status = models.CharField(max_length=20, choices=InvocationStatus.choices)
    observed = models.BooleanField(default=False)
    observe_reasons = models.JSONField(default=list, blank=True)
    duration_ms = models.FloatField(default=0)
    result_size = models.IntegerField(default=0)
    error = models.TextField(blank=True)
    output_id = models.UUIDField(null=True, blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["agent_key", "-created_at"], name="invocation_agent_recent"),
            models.Index(fields=["tool_name", "-created_at"], name="invocation_tool_recent"),
            models.Index(fields=["status", "-created_at"], name="invocation_status_recent"),
        ]

    def __str__(self) -> str:
        return f"{self.agent_key}:{self.tool_name} {self.status}"


class StoredToolOutput(models.Model):
    """The full (scrubbed) output of a call that exceeded the output budget; read back with tool_output_get."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent_key = models.CharField(max_length=64, db_index=True)
    user_id = models.CharField(max_length=255, blank=True)
    tool_name = models.CharField(max_length=128)
    content = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"output {self.id} of {self.tool_name}"


class RateLimitBucket(models.Model):
    """Token-bucket state per key, shared by every process (used when REDIS_URL is not set)."""

    key = models.CharField(max_length=300, primary_key=True)
    tokens = models.FloatField()
    updated_at = models.DateTimeField()
    last_allowed = models.BooleanField(default=True)

    def __str__(self) -> str:
        return self.key
