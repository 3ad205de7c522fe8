"""Credentialed CLI binaries (docs/credentialed-exec.md): a host program such as `gh` that agents may run only through
`credentialed_exec`, with an env (its credentials) sealed with goclaw.crypto and never shown to the agent."""
from __future__ import annotations

import uuid

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import Q

from tools_app.models.agents import Agent

CLI_BINARY_NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}\Z"
CLI_BINARY_DEFAULT_TIMEOUT = 120
CLI_BINARY_MAX_TIMEOUT = 3600


class SecureCLIBinary(models.Model):
    """One registered binary, global (agent empty) or one agent's. `path` is checked at every call against the real
    file (absolute, no symlink, root-owned, not writable by others, outside every workspace) and run as is, no
    shell. Its env is sealed (bound to this row) and write-only: only the variable names are readable."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=64, validators=[RegexValidator(CLI_BINARY_NAME_RE, "a program name such as gh")],
                            help_text="the name the agent passes as `binary`, and the name exec refuses")
    path = models.CharField(max_length=1024, help_text="absolute path of the real file, e.g. /usr/bin/gh")
    deny_args = models.JSONField(default=list, blank=True,
                                 help_text="regexes searched in the space-joined arguments; a match refuses the call")
    deny_verbose = models.JSONField(default=list, blank=True,
                                    help_text="flags refused anywhere in the arguments (e.g. --verbose, --debug)")
    timeout_seconds = models.PositiveIntegerField(
        default=CLI_BINARY_DEFAULT_TIMEOUT,
        validators=[MinValueValidator(1), MaxValueValidator(CLI_BINARY_MAX_TIMEOUT)])
    tips = models.TextField(blank=True, help_text="shown to the model in the tool description")
    enabled = models.BooleanField(default=True)
    risk_acknowledged = models.BooleanField(
        default=False, verbose_name="I accept that this binary can reveal its credentials",
        help_text="required for a program that can start other programs or print its environment (env, shells, "
                  "interpreters, xargs, find, busybox, …): an agent could make it print the credentials in forms the "
                  "scrubber may not recognise")
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="cli_binaries",
                              help_text="empty: every agent may use this binary")
    env_sealed = models.TextField(blank=True, default="", editable=False)
    env_names = models.JSONField(default=list, blank=True, editable=False)
    env_changed_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name", "created_at"]
        permissions = [("manage_credentialed_binaries", "Can register, change and remove credentialed binaries")]
        constraints = [
            models.UniqueConstraint(fields=["name"], condition=Q(agent__isnull=True), name="cli_binary_global_name"),
            models.UniqueConstraint(fields=["name", "agent"], name="cli_binary_agent_name"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.agent.key})" if self.agent_id else self.name
