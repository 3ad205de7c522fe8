"""Context files (SOUL.md, USER.md, …) stored in PostgreSQL (docs/context-files.md): the agent-level files, the
per-user files, and the history of every write so an operator can see and undo what an agent wrote."""
from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone

from tools_app.models.agents import Agent

# The files routed to the database, in the order an agent loop puts them into its system prompt.
CONTEXT_FILE_NAMES = ("SOUL.md", "IDENTITY.md", "AGENTS.md", "TOOLS.md", "HEARTBEAT.md", "USER.md", "BOOTSTRAP.md")
# The files a predefined agent keeps per user (every other one is agent-level and read-only to the agent).
PREDEFINED_PER_USER_NAMES = ("USER.md", "BOOTSTRAP.md")
BOOTSTRAP_NAME = "BOOTSTRAP.md"
CONTEXT_FILE_NAME_CHOICES = [(name, name) for name in CONTEXT_FILE_NAMES]
USER_ID_MAX_LENGTH = 255


class ContextActorKind(models.TextChoices):
    AGENT = "agent", "Agent (through a file tool)"
    PERSON = "person", "Person (admin or API)"
    SYSTEM = "system", "System"


class AgentContextFile(models.Model):
    """One agent-level context file: what every user of the agent sees, and an open agent's template for a user
    who has no file of their own."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="context_files")
    name = models.CharField(max_length=32, choices=CONTEXT_FILE_NAME_CHOICES)
    content = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["agent__key", "name"]
        constraints = [models.UniqueConstraint(fields=["agent", "name"], name="agent_context_file_unique")]

    def __str__(self) -> str:
        return f"{self.agent.key}/{self.name}"


class UserContextFile(models.Model):
    """One user's own copy of a context file for one agent (an open agent's files, a predefined agent's USER.md
    and BOOTSTRAP.md)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="user_context_files")
    user_id = models.CharField(max_length=USER_ID_MAX_LENGTH)
    name = models.CharField(max_length=32, choices=CONTEXT_FILE_NAME_CHOICES)
    content = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["agent__key", "user_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "user_id", "name"], name="user_context_file_unique"),
            models.CheckConstraint(condition=~Q(user_id=""), name="user_context_file_has_user"),
        ]

    def __str__(self) -> str:
        return f"{self.agent.key}/{self.user_id}/{self.name}"


class ContextFileVersion(models.Model):
    """The state of one context file after one write (or its deletion), with the diff from the state before and
    who wrote it; restoring a version is itself a new version."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="context_file_versions")
    user_id = models.CharField(max_length=USER_ID_MAX_LENGTH, blank=True, default="",
                               help_text="empty: the agent-level file")
    name = models.CharField(max_length=32, choices=CONTEXT_FILE_NAME_CHOICES)
    content = models.TextField(blank=True, default="", help_text="the file's text after this write")
    deleted = models.BooleanField(default=False, help_text="this write removed the file")
    previous_hash = models.CharField(max_length=64, blank=True, default="",
                                     help_text="SHA-256 of the text before this write (empty: there was no file)")
    diff = models.TextField(blank=True, default="", help_text="unified diff from the previous text")
    actor_kind = models.CharField(max_length=16, choices=ContextActorKind.choices)
    actor_name = models.CharField(max_length=150, blank=True, default="")
    restored_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["agent", "user_id", "name", "-created_at"], name="context_version_lookup")]

    def __str__(self) -> str:
        scope = f"{self.user_id}/" if self.user_id else ""
        return f"{self.agent.key}/{scope}{self.name} @ {self.created_at:%Y-%m-%d %H:%M:%S} by {self.actor}"

    @property
    def actor(self) -> str:
        """`agent:<key>`, `person:<username>` or `system:<name>`."""
        return f"{self.actor_kind}:{self.actor_name}" if self.actor_name else self.actor_kind
