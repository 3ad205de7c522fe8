"""A rich governance configuration built through the apps' own services (every section has entries), and a way to
empty the database of configuration (what an empty install holds is then only what the document brings)."""
from __future__ import annotations

import pytest

from mcp_app.models import MCPLauncher, MCPServer
from mcp_app.services import grants as mcp_grants
from mcp_app.services import servers as mcp_servers
from runtime_app.models import LLMProvider
from runtime_app.services.providers import provider_save
from sandbox_app.models import SandboxProfile
from teams_app.actors import Actor
from teams_app.models import AgentLink, HandoffRoute, Team
from teams_app.services.delegation import agent_link_create
from teams_app.services.teams import team_create
from tests.factories import make_agent
from tools_app.models import (Agent, ApprovalRule, CustomTool, SecureCLIBinary, ToolPermission, ToolPolicy,
                              ToolProfile)
from tools_app.services.cli_binaries import cli_binary_create
from tools_app.services.custom_tools import custom_tool_create
from tools_app.services.policy import tool_permission_save, tool_policy_save, tool_profile_save

SECRET_VALUES = {"DEPLOY_TOKEN": "s3cret-deploy-value-1", "GIT_TOKEN": "s3cret-git-value-2",
                 "FILES_KEY": "s3cret-files-value-3", "WEB_AUTH": "Bearer s3cret-web-value-4",
                 "GRANT_KEY": "s3cret-grant-value-5", "USER_KEY": "s3cret-user-value-6",
                 "PROVIDER_KEY": "s3cret-provider-value-7"}


def build_rich_configuration() -> dict[str, Agent]:
    """One or more entries in every section, secrets included (their values are SECRET_VALUES)."""
    system = Actor.system("test")
    strict = SandboxProfile(name="strict", description="no network", memory_mb=256, max_processes=32,
                            ro_binds=["/opt/tools"])
    strict.full_clean()
    strict.save()
    reviewers, _ = tool_profile_save(actor=None, profile=ToolProfile(name="reviewers", description="read only",
                                                                     tools=["read_file", "group:web"]))
    provider_save(actor=None, provider=LLMProvider(name="local", base_url="http://127.0.0.1:11434/v1", model="llama3",
                                                   max_concurrent=2, allow_private_network=True),
                  api_key=SECRET_VALUES["PROVIDER_KEY"])
    alpha = make_agent(key="alpha", provider="anthropic", sandbox_profile=strict, other_config={"rate_limit_per_hour": 50, "exec_ask": "always"})
    beta = make_agent(key="beta")
    gamma = make_agent(key="gamma", enabled=False)
    mcp_servers.launcher_set(actor=None, command="node", description="Node", denied_args=["-e", "--eval"])
    files = mcp_servers.server_create(actor=None, name="files", transport="stdio", command="python3",
                                      args=["files_server.py", "--root", "/srv"], sandbox_profile=strict,
                                      env={"FILES_KEY": SECRET_VALUES["FILES_KEY"]})
    web = mcp_servers.server_create(actor=None, name="web", transport="streamable-http",
                                    url="http://127.0.0.1:9/mcp", allow_private_network=True, tool_prefix="webby_",
                                    headers={"Authorization": SECRET_VALUES["WEB_AUTH"]}, timeout_seconds=20)
    mcp_grants.agent_grant_set(actor=None, server=files, agent=alpha, tool_allow=["read", "list"],
                               config_overrides={"timeout": 30, "env": {"GRANT_KEY": SECRET_VALUES["GRANT_KEY"]}})
    mcp_grants.agent_grant_set(actor=None, server=web, agent=beta, tool_deny=["post"], enabled=False)
    mcp_grants.user_grant_set(actor=None, server=web, user_id="user-7", tool_deny=["delete"],
                              credentials={"env": {"USER_KEY": SECRET_VALUES["USER_KEY"]}})
    custom_tool_create(actor=None, name="deploy_site", description="Deploy the site",
                       parameters={"type": "object", "properties": {"env": {"type": "string"}}},
                       command="deploy --env {{.env}}", timeout_seconds=120,
                       env={"DEPLOY_TOKEN": SECRET_VALUES["DEPLOY_TOKEN"]})
    custom_tool_create(actor=None, name="greet", description="Say hello", agent=alpha,
                       parameters={"type": "object", "properties": {}}, command="echo hello", group="fun",
                       requires_approval=False)
    cli_binary_create(actor=None, name="git", path="/usr/bin/git", deny_args=["push\\s+--force"],
                      deny_verbose=["--verbose"], tips="use git status first", agent=beta, risk_acknowledged=True,
                      env={"GIT_TOKEN": SECRET_VALUES["GIT_TOKEN"]})
    tool_policy_save(actor=None, policy=ToolPolicy(scope="global", deny=["exec"], note="no shells"))
    tool_policy_save(actor=None, policy=ToolPolicy(scope="agent", agent=alpha, profile=reviewers, also_allow=["exec"]))
    tool_policy_save(actor=None, policy=ToolPolicy(scope="provider", provider="openai", allow=["read_file"]))
    tool_permission_save(actor=None, permission=ToolPermission(scope="global", tool="exec", permission="ask"))
    tool_permission_save(actor=None, permission=ToolPermission(scope="agent", agent=beta, tool="web_fetch",
                                                               permission="deny", note="beta stays offline"))
    ApprovalRule.objects.create(agent=alpha, tool_name="exec", match="prefix", pattern="git status",
                                description="git status and its arguments")
    team_create(actor=system, name="core", lead=alpha, members=[(beta, "member"), (gamma, "reviewer")],
                description="the core team", lock_minutes=30)
    agent_link_create(actor=system, source=alpha, target=beta, direction="bidirectional", max_concurrent=2,
                      allow_user_ids=["user-7"])
    HandoffRoute.objects.create(channel="telegram", chat_id="42", target=beta, source=alpha, reason="billing")
    return {"alpha": alpha, "beta": beta, "gamma": gamma}


def wipe_configuration() -> None:
    """Delete every configuration row (an empty install, with not even the seeded profiles and launchers)."""
    from config_app.models import SecretSource

    for model in (Team, HandoffRoute, AgentLink, ApprovalRule, ToolPermission, ToolPolicy, CustomTool,
                  SecureCLIBinary, MCPServer, MCPLauncher, Agent, LLMProvider, ToolProfile, SandboxProfile,
                  SecretSource):
        model.objects.all().delete()


@pytest.fixture
def rich(db):
    return build_rich_configuration()


@pytest.fixture
def secret_env(monkeypatch):
    """The secrets' values in environment variables of the same names."""
    for name, value in SECRET_VALUES.items():
        monkeypatch.setenv(name, value)
    return SECRET_VALUES


@pytest.fixture
def superuser_api(db, django_user_model):
    from rest_framework.test import APIClient

    user = django_user_model.objects.create_user("root", password="pw-root-123", is_staff=True, is_superuser=True)
    client = APIClient()
    client.force_login(user)
    return client
