"""Skills agents publish, search and use (docs/skills.md): a SKILL.md body with its files, kept in PostgreSQL so
every agent in its scope can find and load it, whoever published it and wherever its workspace is."""
from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q
from django.utils import timezone

from tools_app.models.agents import Agent

SKILL_SLUG_MAX = 64


class Skill(models.Model):
    """A published skill: instructions (the SKILL.md body) plus its text files, global (agent empty) or one agent's.
    The slug is unique per scope; an agent's own skill shadows a global one of the same slug for that agent."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=SKILL_SLUG_MAX, help_text="derived from the name when first published")
    description = models.TextField()
    content = models.TextField(help_text="the SKILL.md body after its front matter")
    files = models.JSONField(default=dict, blank=True,
                             help_text="the skill directory's other text files: relative path → text")
    tags = models.JSONField(default=list, blank=True)
    arguments = models.JSONField(default=list, blank=True,
                                 help_text='declared in front matter: [{"name", "description", "required"}] '
                                           '(the skill as an MCP prompt; {{name}} in the text takes the value)')
    version = models.PositiveIntegerField(default=1, help_text="incremented on every re-publish or edit")
    enabled = models.BooleanField(default=True)
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="skills",
                              help_text="empty: every agent sees this skill")
    source_path = models.CharField(max_length=1024, blank=True,
                                   help_text="the workspace directory it was last published from")
    published_by = models.CharField(max_length=255, blank=True, help_text='"agent:<key>" or "staff:<username>"')
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug", "created_at"]
        constraints = [
            models.UniqueConstraint(fields=["slug"], condition=Q(agent__isnull=True), name="skill_global_slug"),
            models.UniqueConstraint(fields=["slug", "agent"], name="skill_agent_slug"),
            models.CheckConstraint(name="skill_version_positive", condition=Q(version__gte=1)),
        ]

    def __str__(self) -> str:
        return f"{self.slug} ({self.agent.key})" if self.agent_id else self.slug


class SkillUse(models.Model):
    """One `use_skill` call: who loaded which skill, for usage counts (the pipeline's audit row has the rest).
    Agent key and caller strings are kept as the audit keeps them (scrubbed labels), not as foreign keys."""

    id = models.BigAutoField(primary_key=True)
    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="uses")
    agent_key = models.CharField(max_length=64)
    user_id = models.CharField(max_length=255, blank=True)
    session_key = models.CharField(max_length=255, blank=True)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-at"]
        indexes = [models.Index(fields=["skill", "-at"], name="skill_use_recent")]

    def __str__(self) -> str:
        return f"{self.agent_key} used {self.skill_id} at {self.at:%Y-%m-%d %H:%M}"
