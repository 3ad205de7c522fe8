from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db import models
from django.utils import timezone

from tools_app.agent_config import agent_config_validate
from tools_app.choices import AgentMode, AgentType


class Agent(models.Model):
    """An LLM agent that calls tools through goclaw; its key names it in URLs, events and policies."""

    key = models.SlugField(max_length=64, unique=True)
    display_name = models.CharField(max_length=200, blank=True)
    agent_type = models.CharField(max_length=20, choices=AgentType.choices, default=AgentType.PREDEFINED)
    provider = models.CharField(max_length=64, blank=True, help_text="LLM provider, e.g. openai, anthropic")
    model = models.CharField(max_length=128, blank=True)
    workspace = models.CharField(max_length=1024, blank=True, help_text="Empty: <GOCLAW_WORKSPACES_DIR>/<key>")
    mode = models.CharField(max_length=20, choices=AgentMode.choices, default=AgentMode.AUTONOMOUS,
                            help_text="how much a person oversees tool calls (docs/approvals.md)")
    other_config = models.JSONField(default=dict, blank=True)
    sandbox_profile = models.ForeignKey("sandbox_app.SandboxProfile", null=True, blank=True, on_delete=models.PROTECT,
                                        related_name="agents",
                                        help_text="how the processes this agent starts are isolated (empty: the default profile)")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["key"]
        permissions = [("execute_as_agent", "Can run a tool as an agent (API execute, playground, approved runs)")]

    def __str__(self) -> str:
        return self.key

    def clean(self) -> None:
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
