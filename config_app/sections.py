"""The document's sections as data: for each, the model, its natural key, the exported fields, the references (by
natural key), the secrets (references only, never values) and the writers (the owning app's services where they
exist, else `full_clean()` + save). Listed in dependency order: an import applies them top-down, a prune removes
bottom-up. Runtime state (invocations, approval requests, pending changes, memory, tasks, messages, events,
delegations, sessions, MCP tool pins and health, tokens) is not configuration and has no section."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Model, QuerySet
from django.utils import timezone

from goclaw import crypto
from goclaw.errors import ValidationError
from mcp_app.models import MCPAgentGrant, MCPLauncher, MCPServer, MCPUserGrant
from mcp_app.services import grants as mcp_grants
from mcp_app.services import servers as mcp_servers
from mcp_app.services.common import agent_grant_overrides
from runtime_app.models import LLMProvider
from runtime_app.services import providers as llm_providers
from sandbox_app.models import SandboxProfile
from teams_app.actors import Actor
from teams_app.models import AgentLink, HandoffRoute, Team
from teams_app.services import delegation as team_links
from teams_app.services import handoff as team_handoff
from teams_app.services import teams as team_services
from tools_app.custom_tools import env_seal_context
from tools_app.models import Agent, ApprovalRule, CustomTool, SecureCLIBinary, ToolPermission, ToolPolicy, ToolProfile
from tools_app.services import agents as agent_services
from tools_app.services import cli_binaries, custom_tools, policy
from tools_app.services.approvals.rules import approval_rule_revoke
from tools_app.toolsets import tools_changed


@dataclass(frozen=True)
class Ref:
    """A foreign key written as the target's natural key (`lookup`), e.g. an agent's key."""

    model: type[Model]
    lookup: str
    section: str  # the section that defines the target (prune checks references against it)
    what: str     # how a message names the target


@dataclass(frozen=True)
class Secret:
    """A mapping of names to sealed values at `path` of an entry (`env`, `config_overrides.headers`), stored in the
    model column `sealed`; `open` returns the current values (server-side only, to compare and merge). A `single`
    secret is one value written at `path` itself (`api_key: {env: VAR}`); `open` returns it under the path's last
    part (`{"api_key": value}`, `{}` when none is set)."""

    path: tuple[str, ...]
    sealed: str
    open: Callable[[Any], dict[str, str]]
    single: bool = False


@dataclass(frozen=True)
class Section:
    """One kind of entity in the document. `create(actor, values, secrets)`, `update(actor, obj, values, changed,
    secrets)` and `delete(actor, obj)` are the writers; `values` holds every field with references resolved,
    `secrets` maps a secret path ("env") to the names to set (a value) or remove (None)."""

    name: str
    model: type[Model]
    key: tuple[str, ...]
    fields: tuple[str, ...]
    refs: dict[str, Ref] = field(default_factory=dict)
    secrets: tuple[Secret, ...] = ()
    computed: dict[str, tuple[Callable[[Any], Any], Any]] = field(default_factory=dict)  # name: (getter, default)
    queryset: Callable[[], QuerySet] | None = None
    create: Callable[..., Any] | None = None
    update: Callable[..., Any] | None = None
    delete: Callable[..., Any] | None = None

    def rows(self) -> QuerySet:
        qs = self.queryset() if self.queryset else self.model._default_manager.all()
        return qs.select_related(*[name for name in self.refs])

    @property
    def all_fields(self) -> tuple[str, ...]:
        return self.key + tuple(f for f in (*self.fields, *self.refs, *self.computed) if f not in self.key)


# --- generic writers: the model's own validation (full_clean) where an app has no write service ------------------
def _clean_save(obj: Model) -> Model:
    try:
        obj.full_clean()
    except DjangoValidationError as exc:
        raise ValidationError("invalid entry", code="config_entry_invalid", details=exc.message_dict) from None
    obj.save()
    return obj


def _assigned(obj: Model, values: dict[str, Any], changed) -> Model:
    for name in changed:
        setattr(obj, name, values[name])
    return obj


def generic_create(model: type[Model]):
    return lambda actor, values, secrets: _clean_save(model(**values))


def generic_update(actor, obj, values, changed, secrets):
    return _clean_save(_assigned(obj, values, changed))


def generic_delete(actor, obj) -> None:
    obj.delete()


def _team_actor(actor) -> Actor:
    return Actor.for_user(actor) if getattr(actor, "pk", None) else Actor.system("config_import")


def _picked(values: dict[str, Any], names) -> dict[str, Any]:
    return {name: values[name] for name in names if name in values}


# --- sandbox profiles: one default at a time, so a document may move the default from one profile to another ----
def _sandbox_save(obj: SandboxProfile) -> SandboxProfile:
    if obj.is_default:
        SandboxProfile.objects.filter(is_default=True).exclude(pk=obj.pk).update(is_default=False)
    return _clean_save(obj)


def _sandbox_update(actor, obj, values, changed, secrets):
    return _sandbox_save(_assigned(obj, values, changed))


# --- agents, profiles, policies, permissions ----------------------------------------------------------------------
def _agent_create(actor, values, secrets):
    return agent_services.agent_save(agent=Agent(**values), actor=actor)


def _agent_update(actor, obj, values, changed, secrets):
    return agent_services.agent_update(agent=obj, actor=actor, **_picked(values, changed))


def _saved_with(save: Callable[..., Any], kwarg: str, model: type[Model]):
    """Writers over a tools_app `*_save(actor, <kwarg>=obj)` service (policies, profiles, permissions)."""
    def create(actor, values, secrets):
        return save(actor=actor, **{kwarg: model(**values)})[0]

    def update(actor, obj, values, changed, secrets):
        return save(actor=actor, **{kwarg: _assigned(obj, values, changed)})[0]
    return create, update


def _deleted_with(delete: Callable[..., Any]):
    return lambda actor, obj: delete(actor=actor, queryset=type(obj)._default_manager.filter(pk=obj.pk))


# --- secrets ------------------------------------------------------------------------------------------------------
def _custom_tool_env(tool: CustomTool) -> dict[str, str]:
    return crypto.decrypt_json(tool.env_sealed, associated_data=env_seal_context(tool.pk)) if tool.env_sealed else {}


def _grant_overrides_part(key: str):
    return lambda grant: dict(agent_grant_overrides(grant).get(key) or {})


def _user_credentials_part(key: str):
    return lambda grant: dict(mcp_grants.user_grant_credentials(grant).get(key) or {})


# --- custom tools, credentialed binaries, MCP ---------------------------------------------------------------------
def _custom_tool_create(actor, values, secrets):
    return custom_tools.custom_tool_create(actor=actor, env=secrets.get("env") or None, **values)


def _custom_tool_update(actor, obj, values, changed, secrets):
    return custom_tools.custom_tool_update(actor=actor, tool=obj, env=secrets.get("env") or None,
                                           **_picked(values, changed))


def _cli_create(actor, values, secrets):
    return cli_binaries.cli_binary_create(actor=actor, env=secrets.get("env") or None, **values)


def _cli_update(actor, obj, values, changed, secrets):
    return cli_binaries.cli_binary_update(actor=actor, binary=obj, env=secrets.get("env") or None,
                                          **_picked(values, changed))


def _launcher_set(actor, values, secrets):
    return mcp_servers.launcher_set(actor=actor, **values)


def _launcher_delete(actor, obj) -> None:
    obj.delete()
    tools_changed()  # call-time checks re-read the allowlist


def _server_create(actor, values, secrets):
    return mcp_servers.server_create(actor=actor, headers=secrets.get("headers") or None,
                                     env=secrets.get("env") or None, **values)


def _server_update(actor, obj, values, changed, secrets):
    return mcp_servers.server_update(actor=actor, server=obj, headers=secrets.get("headers") or None,
                                     env=secrets.get("env") or None, **_picked(values, changed - {"name"}))


def _overrides_public(grant: MCPAgentGrant) -> dict[str, Any]:
    summary = grant.overrides_summary or {}
    return {k: summary[k] for k in ("args_suffix", "timeout") if k in summary}


def _grant_set(actor, values, secrets, obj=None):
    """agent_grant_set replaces the overrides whole: merge the kept secret values with the changed ones."""
    current = agent_grant_overrides(obj) if obj is not None else {}
    overrides = dict(values.get("config_overrides") or {})
    for key in ("env", "headers"):
        merged = custom_tools.env_merged(current.get(key) or {}, secrets.get(f"config_overrides.{key}") or {})
        if merged:
            overrides[key] = merged
    return mcp_grants.agent_grant_set(actor=actor, server=values["server"], agent=values["agent"],
                                      tool_allow=values["tool_allow"], tool_deny=values["tool_deny"],
                                      expires_at=values["expires_at"], enabled=values["enabled"],
                                      config_overrides=overrides)


def _user_grant_set(actor, values, secrets, obj=None):
    credentials = {key: secrets[f"credentials.{key}"] for key in ("headers", "env") if secrets.get(f"credentials.{key}")}
    return mcp_grants.user_grant_set(actor=actor, **_picked(values, ("server", "agent", "user_id", "tool_allow",
                                                                      "tool_deny", "expires_at", "enabled")),
                                     credentials=credentials or None)


# --- LLM providers: `timeout` in the document is the model's timeout_seconds ------------------------------------
PROVIDER_FIELDS = ("kind", "base_url", "model", "max_concurrent", "allow_private_network", "enabled")


def _provider_api_key(provider: LLMProvider) -> dict[str, str]:
    key = llm_providers.provider_api_key(provider)
    return {"api_key": key} if key else {}


def _provider_key_change(secrets) -> dict[str, Any]:
    """provider_save's key arguments from the engine's secret changes (a value sets the key, None removes it)."""
    change = secrets.get("api_key") or {}
    if "api_key" not in change:
        return {}
    return {"api_key": change["api_key"]} if change["api_key"] is not None else {"clear_api_key": True}


def _provider_fields(provider: LLMProvider, values: dict[str, Any], names) -> LLMProvider:
    for name in names:
        setattr(provider, "timeout_seconds" if name == "timeout" else name, values[name])
    return provider


def _provider_create(actor, values, secrets):
    provider = _provider_fields(LLMProvider(), values, ("name", "timeout", *PROVIDER_FIELDS))
    return llm_providers.provider_save(actor=actor, provider=provider, **_provider_key_change(secrets))


def _provider_update(actor, obj, values, changed, secrets):
    return llm_providers.provider_save(actor=actor, provider=_provider_fields(obj, values, changed),
                                       **_provider_key_change(secrets))


# --- teams, links, handoffs ---------------------------------------------------------------------------------------
TEAM_SETTINGS = ("blocker_escalation", "lock_minutes", "stale_after_minutes", "review_stale_after_minutes")


def _team_members(team: Team) -> list[dict[str, str]]:
    return [{"agent": m.agent.key, "role": m.role}
            for m in sorted(team.members.select_related("agent"), key=lambda m: m.agent.key) if m.role != "lead"]


def _member_agents(members: Any) -> list[tuple[Agent, str]]:
    if not isinstance(members, list) or not all(isinstance(m, dict) and set(m) <= {"agent", "role"} for m in members):
        raise ValidationError("members", details={"members": "a list of {agent: KEY, role: member|reviewer}"})
    agents = {a.key: a for a in Agent.objects.filter(key__in=[str(m.get("agent")) for m in members])}
    missing = [str(m.get("agent")) for m in members if str(m.get("agent")) not in agents]
    if missing:
        raise ValidationError("members", details={"members": f"no agent has the key {missing[0][:64]!r}"})
    return [(agents[str(m["agent"])], m.get("role", "member")) for m in members]


def _team_create(actor, values, secrets):
    who = _team_actor(actor)
    team = team_services.team_create(actor=who, name=values["name"], lead=values["lead"],
                                     members=_member_agents(values["members"]), description=values["description"],
                                     **_picked(values, TEAM_SETTINGS))
    if values["status"] != team.status:
        team = team_services.team_update(actor=who, team=team, status=values["status"])
    return team


def _team_update(actor, obj, values, changed, secrets):
    who = _team_actor(actor)
    wanted = dict(_member_agents(values["members"]))
    fields = _picked(values, changed & {"description", "status", "lead", *TEAM_SETTINGS})
    team = team_services.team_update(actor=who, team=obj, **fields) if fields else obj
    if "members" in changed or "lead" in changed:
        for member in list(team.members.select_related("agent")):
            if member.role != "lead" and member.agent not in wanted:
                team_services.team_member_remove(actor=who, team=team, agent=member.agent)
        for agent, role in wanted.items():
            team_services.team_member_set(actor=who, team=team, agent=agent, role=role)
    return team


def _team_delete(actor, obj) -> None:
    team_services.team_delete(actor=_team_actor(actor), team=obj)


def _link_create(actor, values, secrets):
    return team_links.agent_link_create(actor=_team_actor(actor), **values)


def _link_update(actor, obj, values, changed, secrets):
    return team_links.agent_link_update(actor=_team_actor(actor), link=obj, **_picked(values, changed))


def _handoff_create(actor, values, secrets):
    # an expired route still holds its (channel, chat_id) until the sweep: it is not configuration, make room
    team_handoff.handoff_routes_purge_expired(channel=values["channel"], chat_id=values["chat_id"])
    return _clean_save(HandoffRoute(**values))


def _handoff_delete(actor, obj) -> None:
    team_handoff.handoff_clear_route(actor=_team_actor(actor), route=obj)


AGENT = Ref(Agent, "key", "agents", "agent")
SERVER = Ref(MCPServer, "name", "mcp_servers", "MCP server")
SANDBOX = Ref(SandboxProfile, "name", "sandbox_profiles", "sandbox profile")

_policy_create, _policy_update = _saved_with(policy.tool_policy_save, "policy", ToolPolicy)
_profile_create, _profile_update = _saved_with(policy.tool_profile_save, "profile", ToolProfile)
_permission_create, _permission_update = _saved_with(policy.tool_permission_save, "permission", ToolPermission)

SECTIONS: tuple[Section, ...] = (
    Section("sandbox_profiles", SandboxProfile, ("name",),
            ("description", "backend", "mode", "network", "network_local", "timeout_seconds", "cpu_seconds",
             "memory_mb", "max_processes", "max_open_files", "max_file_mb", "image", "ro_binds", "is_default"),
            create=lambda actor, values, secrets: _sandbox_save(SandboxProfile(**values)), update=_sandbox_update),
    Section("tool_profiles", ToolProfile, ("name",), ("description", "tools"),
            create=_profile_create, update=_profile_update, delete=_deleted_with(policy.tool_profile_delete)),
    Section("providers", LLMProvider, ("name",), PROVIDER_FIELDS,
            secrets=(Secret(("api_key",), "api_key_sealed", _provider_api_key, single=True),),
            computed={"timeout": (lambda provider: provider.timeout_seconds, 120.0)},
            create=_provider_create, update=_provider_update,
            delete=lambda actor, obj: llm_providers.provider_delete(actor=actor, provider=obj)),
    Section("agents", Agent, ("key",),
            ("display_name", "agent_type", "provider", "model", "workspace", "mode", "other_config", "enabled"),
            refs={"sandbox_profile": SANDBOX},
            create=_agent_create, update=_agent_update,
            delete=lambda actor, obj: agent_services.agent_delete(queryset=Agent.objects.filter(pk=obj.pk), actor=actor)),
    Section("mcp_launchers", MCPLauncher, ("command",), ("description", "denied_args", "enabled"),
            create=_launcher_set, update=lambda actor, obj, values, changed, secrets: _launcher_set(actor, values, secrets),
            delete=_launcher_delete),
    Section("mcp_servers", MCPServer, ("name",),
            ("display_name", "transport", "command", "args", "url", "allow_private_network", "tool_prefix",
             "timeout_seconds", "enabled", "review_new_tools"),
            refs={"sandbox_profile": SANDBOX},
            secrets=(Secret(("headers",), "headers_sealed", lambda s: mcp_servers.server_secrets(s)[0]),
                     Secret(("env",), "env_sealed", lambda s: mcp_servers.server_secrets(s)[1])),
            create=_server_create, update=_server_update,
            delete=lambda actor, obj: mcp_servers.server_delete(actor=actor, server=obj)),
    Section("mcp_agent_grants", MCPAgentGrant, ("server", "agent"), ("enabled", "tool_allow", "tool_deny", "expires_at"),
            refs={"server": SERVER, "agent": AGENT},
            secrets=(Secret(("config_overrides", "env"), "overrides_sealed", _grant_overrides_part("env")),
                     Secret(("config_overrides", "headers"), "overrides_sealed", _grant_overrides_part("headers"))),
            computed={"config_overrides": (_overrides_public, {})},
            create=_grant_set, update=lambda actor, obj, values, changed, secrets: _grant_set(actor, values, secrets, obj),
            delete=lambda actor, obj: mcp_grants.agent_grant_revoke(actor=actor, grant=obj)),
    Section("mcp_user_grants", MCPUserGrant, ("server", "agent", "user_id"),
            ("enabled", "tool_allow", "tool_deny", "expires_at"),
            refs={"server": SERVER, "agent": AGENT},
            secrets=(Secret(("credentials", "headers"), "credentials_sealed", _user_credentials_part("headers")),
                     Secret(("credentials", "env"), "credentials_sealed", _user_credentials_part("env"))),
            create=_user_grant_set,
            update=lambda actor, obj, values, changed, secrets: _user_grant_set(actor, values, secrets, obj),
            delete=lambda actor, obj: mcp_grants.user_grant_revoke(actor=actor, grant=obj)),
    Section("custom_tools", CustomTool, ("name", "agent"),
            ("description", "parameters", "command", "timeout_seconds", "working_dir", "enabled", "group",
             "requires_approval", "always_require_approval"),
            refs={"agent": AGENT}, secrets=(Secret(("env",), "env_sealed", _custom_tool_env),),
            create=_custom_tool_create, update=_custom_tool_update,
            delete=lambda actor, obj: custom_tools.custom_tool_delete(actor=actor, tool=obj)),
    Section("cli_binaries", SecureCLIBinary, ("name", "agent"),
            ("path", "deny_args", "deny_verbose", "timeout_seconds", "tips", "enabled", "risk_acknowledged"),
            refs={"agent": AGENT}, secrets=(Secret(("env",), "env_sealed", cli_binaries.cli_binary_env),),
            create=_cli_create, update=_cli_update,
            delete=lambda actor, obj: cli_binaries.cli_binary_delete(actor=actor, binary=obj)),
    Section("tool_policies", ToolPolicy, ("scope", "agent", "provider", "group_key"),
            ("allow", "deny", "also_allow", "resources", "prompts", "enabled", "note"),
            refs={"agent": AGENT, "profile": Ref(ToolProfile, "name", "tool_profiles", "tool profile")},
            create=_policy_create, update=_policy_update, delete=_deleted_with(policy.tool_policy_delete)),
    Section("tool_permissions", ToolPermission, ("scope", "agent", "mode", "tool"), ("permission", "note"),
            refs={"agent": AGENT},
            create=_permission_create, update=_permission_update, delete=_deleted_with(policy.tool_permission_delete)),
    Section("approval_rules", ApprovalRule, ("agent", "user_id", "tool_name", "match", "pattern"),
            ("args_hash", "free_effects", "description", "expires_at"),
            refs={"agent": AGENT}, queryset=lambda: ApprovalRule.objects.filter(revoked_at__isnull=True),
            delete=lambda actor, obj: approval_rule_revoke(rule=obj, actor=actor)),
    Section("teams", Team, ("name",), ("description", "status", *TEAM_SETTINGS),
            refs={"lead": AGENT}, computed={"members": (_team_members, [])},
            create=_team_create, update=_team_update, delete=_team_delete),
    Section("agent_links", AgentLink, ("source", "target"),
            ("direction", "max_concurrent", "allow_user_ids", "deny_user_ids", "description", "enabled"),
            refs={"source": AGENT, "target": AGENT},
            create=_link_create, update=_link_update,
            delete=lambda actor, obj: team_links.agent_link_delete(actor=_team_actor(actor), link=obj)),
    Section("handoff_routes", HandoffRoute, ("channel", "chat_id"), ("reason", "expires_at"),
            refs={"target": AGENT, "source": AGENT},
            queryset=lambda: HandoffRoute.objects.exclude(expires_at__lte=timezone.now()),
            create=_handoff_create, delete=_handoff_delete),
)

SECTIONS_BY_NAME = {section.name: section for section in SECTIONS}

# Every other model of the apps, and why it is not configuration (a test keeps this list complete, so a new model
# gets a decision: a section, or a line here).
NOT_EXPORTED = {
    "tools_app.AgentToken": "credentials: issued per install, never exported (issue_token)",
    "tools_app.ApprovalRequest": "runtime: a call waiting for (or past) a decision",
    "tools_app.PendingChange": "runtime: a held file write",
    "tools_app.ToolInvocation": "audit", "tools_app.StoredToolOutput": "runtime", "tools_app.RateLimitBucket": "runtime",
    "tools_app.AuditEvent": "audit: what people did (append-only, docs/audit-integrity.md)",
    "tools_app.AgentContextFile": "content agents and people edit (SOUL.md …), versioned on its own",
    "tools_app.UserContextFile": "per-user content", "tools_app.ContextFileVersion": "history",
    "tools_app.MemoryDocument": "memory", "tools_app.MemoryChunk": "memory", "tools_app.EmbeddingCache": "cache",
    "tools_app.Skill": "content agents publish (skills), not governance", "tools_app.SkillUse": "audit",
    "tools_app.NotificationChannel": "credentials: a webhook URL (Slack's hold a token in the path) and its signing "
                                     "secret are set per install in the admin, never written to a document",
    "tools_app.NotificationDelivery": "runtime: a notification being sent",
    "mcp_app.MCPTool": "discovered at listing and pinned by review: a new install re-lists and re-reviews",
    "mcp_app.MCPAccessRequest": "runtime: a request waiting for review",
    "mcp_app.MCPServerSession": "runtime: a client session", "mcp_app.MCPApprovalResume": "runtime",
    "mcp_app.MCPTask": "runtime: a call waiting for a person, as an MCP task",
    "tools_app.OAuthClient": "credentials: clients register per install (their secrets are hashed), never exported",
    "tools_app.OAuthGrant": "credentials: a person's consent, per install",
    "tools_app.OAuthAuthorizationCode": "runtime: single-use, 60 s", "tools_app.OAuthRefreshToken": "credentials",
    "teams_app.TeamMember": "part of the teams section (members)",
    "teams_app.TeamTask": "the board's work", "teams_app.TaskDependency": "the board's work",
    "teams_app.TaskComment": "the board's work", "teams_app.TaskAttachment": "the board's work",
    "teams_app.TeamEvent": "audit", "teams_app.TeamMessage": "mailbox", "teams_app.Delegation": "runtime",
    "runtime_app.Session": "runtime: a hosted agent's conversation", "runtime_app.SessionMessage": "runtime",
}
