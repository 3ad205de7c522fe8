from __future__ import annotations

from django.db import models
from django.db.models import Q

from tools_app.choices import PolicyScope
from tools_app.models.agents import Agent


class ToolProfile(models.Model):
    """A named starting set of tools (`*` = every tool). Seeded with full/coding/messaging/minimal."""

    name = models.SlugField(max_length=64, unique=True)
    description = models.CharField(max_length=300, blank=True)
    tools = models.JSONField(default=list, help_text='Tool names and "group:<name>"; "*" means every tool')

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ToolPolicy(models.Model):
    """One policy spec at one scope. Lists hold tool names or `group:<name>` entries; `resources` and `prompts` hold
    the URI / name globs that govern what an MCP client reads and gets (tools_app.policy.content_rules)."""

    scope = models.CharField(max_length=20, choices=PolicyScope.choices)
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.CASCADE, related_name="tool_policies")
    provider = models.CharField(max_length=64, blank=True)
    group_key = models.CharField(max_length=255, blank=True, help_text='"<channel>" or "<channel>:<chat id>"')
    profile = models.ForeignKey(ToolProfile, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    allow = models.JSONField(default=list, blank=True)
    deny = models.JSONField(default=list, blank=True)
    also_allow = models.JSONField(default=list, blank=True)
    # What an MCP client may read and get besides tools (docs/policy.md "Resources and prompts"): {"allow": [globs],
    # "deny": [globs]} of resource URIs / prompt names. Empty: the agent's own data, all of it.
    resources = models.JSONField(default=dict, blank=True,
                                 help_text='MCP resources by URI glob: {"allow": ["goclaw://memory/*"], "deny": […]}')
    prompts = models.JSONField(default=dict, blank=True,
                               help_text='MCP prompts (skills by slug): {"allow": ["pdf-*"], "deny": ["internal-*"]}')
    enabled = models.BooleanField(default=True)
    note = models.CharField(max_length=300, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "tool policies"
        ordering = ["scope", "provider", "group_key"]
        constraints = [
            models.UniqueConstraint(fields=["scope"], condition=Q(scope__in=["global", "subagent", "leaf"]), name="policy_singleton_scopes"),
            models.UniqueConstraint(fields=["provider"], condition=Q(scope="provider"), name="policy_one_per_provider"),
            models.UniqueConstraint(fields=["agent"], condition=Q(scope="agent"), name="policy_one_per_agent"),
            models.UniqueConstraint(fields=["agent", "provider"], condition=Q(scope="agent_provider"), name="policy_one_per_agent_provider"),
            models.UniqueConstraint(fields=["group_key"], condition=Q(scope="group"), name="policy_one_per_group"),
            models.CheckConstraint(
                name="policy_scope_fields",
                condition=(Q(scope__in=["global", "subagent", "leaf"], agent__isnull=True, provider="", group_key="")
                           | Q(scope="provider", agent__isnull=True, group_key="") & ~Q(provider="")
                           | Q(scope="agent", agent__isnull=False, provider="", group_key="")
                           | Q(scope="agent_provider", agent__isnull=False, group_key="") & ~Q(provider="")
                           | Q(scope="group", agent__isnull=True, provider="") & ~Q(group_key="")),
            ),
        ]

    def __str__(self) -> str:
        target = {"provider": self.provider, "agent": getattr(self.agent, "key", ""), "group": self.group_key,
                  "agent_provider": f"{getattr(self.agent, 'key', '')}/{self.provider}"}.get(self.scope, "")
        return f"{self.get_scope_display()}{': ' + target if target else ''}"
