"""Who sees and may call which MCP tools: agent grants, user grants narrowing them, expiry, deny over allow, access
requests reviewed into grants atomically, per-caller connection settings (per-user credentials), and the server
checks made at save time. No MCP server is needed here: tools are pinned rows, calls are refused before the bridge."""
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from goclaw.errors import ApplicationError, Conflict
from mcp_app.choices import ToolStatus
from mcp_app.config import ToolDefinition
from mcp_app.models import MCPAccessRequest, MCPAgentGrant, MCPServer, MCPTool, MCPUserGrant
from mcp_app.services import grants
from mcp_app.services.connections import MCPCallRefused, mcp_call_target, server_config
from mcp_app.services.servers import MCPServerInvalid, launcher_set, server_create, server_update
from tests.factories import make_agent
from tools_app import pipeline
from tools_app.base import ToolError
from tools_app.calls import CallContext
from tools_app.choices import PolicyScope
from tools_app.models import ToolPolicy
from tools_app.selectors import tool_catalog_for_agent
from tools_app.services.policy import tool_policy_save
from tools_app.services.custom_tools import CustomToolCollision, custom_tool_create
from tools_app.toolsets import toolset_for

TOOLS = ("alpha", "beta", "gamma")


def make_server(name="files", tools=TOOLS, **fields) -> MCPServer:
    fields = {"transport": "streamable-http", "url": "http://127.0.0.1:9/mcp", "allow_private_network": True, **fields}
    server = server_create(actor="system", name=name, **fields)
    for tool in tools:
        definition = ToolDefinition(tool, f"the {tool} tool", {"type": "object", "properties": {}})
        digest = definition.pin_hash()
        MCPTool.objects.create(server=server, name=tool, description=definition.description,
                               input_schema=definition.input_schema, definition_hash=digest, approved_hash=digest,
                               approved_definition=definition.as_dict(), status=ToolStatus.APPROVED)
    return server


def visible(agent, user_id=""):
    return sorted(name for name in toolset_for(agent, user_id).names() if name.startswith("mcp_"))


@pytest.fixture
def published(published_events):
    return published_events


@pytest.mark.django_db
def test_an_agent_without_a_grant_sees_no_tools_of_a_server_even_with_a_user_grant():
    server, agent = make_server(), make_agent()
    grants.user_grant_set(actor="system", server=server, agent=agent, user_id="alice")
    assert visible(agent) == [] and visible(agent, "alice") == []


@pytest.mark.django_db
def test_an_agent_grant_shows_the_servers_tools_prefixed_in_a_stable_order_with_mcp_groups():
    server, agent = make_server(), make_agent()
    grants.agent_grant_set(actor="system", server=server, agent=agent)
    names = ["mcp_files__alpha", "mcp_files__beta", "mcp_files__gamma"]
    assert visible(agent) == names
    view = toolset_for(agent, "")
    assert view.expand(["group:mcp"]) == set(names) == view.expand(["group:mcp:files"])
    catalog = [t["name"] for t in tool_catalog_for_agent(agent, CallContext()) if t["name"].startswith("mcp_")]
    assert catalog == names


@pytest.mark.django_db
def test_a_user_grant_narrows_an_agent_grant_for_that_user_only():
    server, agent = make_server(), make_agent()
    grants.agent_grant_set(actor="system", server=server, agent=agent, tool_allow=["alpha", "beta", "gamma"])
    grants.user_grant_set(actor="system", server=server, agent=agent, user_id="alice", tool_allow=["beta", "gamma"],
                          tool_deny=["mcp_files__gamma"])  # a prefixed name is accepted and stored bare
    assert MCPUserGrant.objects.get().tool_deny == ["gamma"]
    assert visible(agent, "alice") == ["mcp_files__beta"]
    assert visible(agent, "bob") == ["mcp_files__alpha", "mcp_files__beta", "mcp_files__gamma"]


@pytest.mark.django_db
def test_a_user_grant_cannot_widen_what_the_agent_grant_allows():
    server, agent = make_server(), make_agent()
    grants.agent_grant_set(actor="system", server=server, agent=agent, tool_allow=["alpha"])
    grants.user_grant_set(actor="system", server=server, agent=agent, user_id="alice", tool_allow=["alpha", "beta"])
    assert visible(agent, "alice") == ["mcp_files__alpha"]


@pytest.mark.django_db
def test_a_disabled_user_grant_means_no_access_for_that_user():
    server, agent = make_server(), make_agent()
    grants.agent_grant_set(actor="system", server=server, agent=agent)
    grants.user_grant_set(actor="system", server=server, agent=None, user_id="mallory", enabled=False)
    assert visible(agent, "mallory") == [] and len(visible(agent, "alice")) == 3


@pytest.mark.django_db
def test_expired_grants_give_no_access_an_expired_user_grant_never_widens():
    server, agent, other = make_server(), make_agent(), make_agent()
    past = timezone.now() - timedelta(minutes=1)
    grants.agent_grant_set(actor="system", server=server, agent=agent, expires_at=past)
    assert visible(agent) == []
    grants.agent_grant_set(actor="system", server=server, agent=other)
    grants.user_grant_set(actor="system", server=server, agent=other, user_id="alice", tool_allow=["alpha"],
                          expires_at=past)
    assert visible(other, "alice") == [] and len(visible(other, "bob")) == 3


@pytest.mark.django_db
def test_deny_beats_allow_in_every_grant():
    server, agent = make_server(), make_agent()
    grants.agent_grant_set(actor="system", server=server, agent=agent, tool_allow=["alpha", "beta"], tool_deny=["alpha"])
    assert visible(agent) == ["mcp_files__beta"]
    grants.user_grant_set(actor="system", server=server, agent=None, user_id="alice", tool_deny=["beta"])
    assert visible(agent, "alice") == []


@pytest.mark.django_db
def test_quarantined_pending_rejected_and_unlisted_tools_are_hidden():
    server, agent = make_server(tools=("ok", "changed", "new", "rejected", "gone")), make_agent()
    grants.agent_grant_set(actor="system", server=server, agent=agent)
    MCPTool.objects.filter(name="changed").update(status=ToolStatus.QUARANTINED, definition_hash="other")
    MCPTool.objects.filter(name="new").update(status=ToolStatus.PENDING)
    MCPTool.objects.filter(name="rejected").update(status=ToolStatus.REJECTED)
    MCPTool.objects.filter(name="gone").update(present=False)
    with transaction.atomic():
        from tools_app.toolsets import tools_changed
        tools_changed()
    assert visible(agent) == ["mcp_files__ok"]


@pytest.mark.django_db
def test_a_disabled_server_shows_nothing():
    server, agent = make_server(), make_agent()
    grants.agent_grant_set(actor="system", server=server, agent=agent)
    server_update(actor="system", server=server, enabled=False)
    assert visible(agent) == []


@pytest.mark.django_db
def test_a_call_made_after_the_grant_is_revoked_is_refused_with_the_reason():
    server, agent = make_server(), make_agent()
    grant = grants.agent_grant_set(actor="system", server=server, agent=agent)
    tool = toolset_for(agent, "").get("mcp_files__alpha")
    assert mcp_call_target(agent.pk, "", server.pk, "alpha").name == "files"
    # the grant goes away after the agent's tool set was built: the call-time check refuses
    grants.agent_grant_revoke(actor="system", grant=grant)
    with pytest.raises(MCPCallRefused, match="not granted"):
        mcp_call_target(agent.pk, "", server.pk, "alpha")
    context = pipeline.build_context(pipeline.ToolCall(agent, "mcp_files__alpha", {}))
    with pytest.raises(ToolError, match="not granted"):
        tool.run(context, {})


@pytest.mark.django_db
def test_a_grant_expiring_after_the_last_call_refuses_the_next_one():
    server, agent = make_server(), make_agent()
    expires = timezone.now() + timedelta(seconds=1)
    grants.agent_grant_set(actor="system", server=server, agent=agent, expires_at=expires)
    assert mcp_call_target(agent.pk, "", server.pk, "alpha")  # checked (and memoized) while valid
    while timezone.now() <= expires:  # nothing is written when a grant expires: only the clock moves
        time.sleep(0.05)
    with pytest.raises(MCPCallRefused):
        mcp_call_target(agent.pk, "", server.pk, "alpha")


@pytest.mark.django_db
def test_a_policy_can_deny_a_servers_group():
    server, agent = make_server(), make_agent()
    grants.agent_grant_set(actor="system", server=server, agent=agent)
    make_server(name="other", tools=("delta",))
    grants.agent_grant_set(actor="system", server=MCPServer.objects.get(name="other"), agent=agent)
    tool_policy_save(actor=None, policy=ToolPolicy(scope=PolicyScope.AGENT, agent=agent, deny=["group:mcp:files"]))
    catalog = {t["name"] for t in tool_catalog_for_agent(agent, CallContext())}
    assert "mcp_other__delta" in catalog and not any(n.startswith("mcp_files__") for n in catalog)
    outcome = pipeline.execute(pipeline.ToolCall(agent, "mcp_files__alpha", {}))
    assert outcome.status == "denied"


# --- connection settings per caller ---------------------------------------------------------------------------------
@pytest.mark.django_db
def test_each_users_credentials_go_only_into_that_users_connection_settings():
    server = make_server(headers={"Authorization": "Bearer server-token"}, env={})
    agent = make_agent()
    grants.agent_grant_set(actor="system", server=server, agent=agent,
                           config_overrides={"headers": {"X-Team": "blue"}, "timeout": 5})
    grants.user_grant_set(actor="system", server=server, agent=agent, user_id="alice",
                          credentials={"headers": {"Authorization": "Bearer alice-own-token"}})
    alice = mcp_call_target(agent.pk, "alice", server.pk, "alpha")
    bob = mcp_call_target(agent.pk, "bob", server.pk, "alpha")
    assert alice.headers_dict() == {"Authorization": "Bearer alice-own-token", "X-Team": "blue"}
    assert bob.headers_dict() == {"Authorization": "Bearer server-token", "X-Team": "blue"}
    assert alice.timeout == bob.timeout == 5.0
    assert alice.key != bob.key and "alice-own-token" not in repr(bob)
    assert server_config(server).headers_dict() == {"Authorization": "Bearer server-token"}


@pytest.mark.django_db
def test_secrets_are_sealed_at_rest_and_readable_only_as_names():
    server = make_server(headers={"Authorization": "Bearer planted-header-secret"}, env={"TOKEN": "planted-env-1"})
    agent = make_agent()
    grants.agent_grant_set(actor="system", server=server, agent=agent, config_overrides={"env": {"K": "planted-env-2"}})
    grants.user_grant_set(actor="system", server=server, user_id="u", credentials={"env": {"T": "planted-user-3"}})
    with connection.cursor() as cursor:
        cursor.execute("SELECT row_to_json(s)::text FROM mcp_app_mcpserver s UNION ALL "
                       "SELECT row_to_json(g)::text FROM mcp_app_mcpagentgrant g UNION ALL "
                       "SELECT row_to_json(u)::text FROM mcp_app_mcpusergrant u")
        dump = " ".join(row[0] for row in cursor.fetchall())
    for planted in ("planted-header-secret", "planted-env-1", "planted-env-2", "planted-user-3"):
        assert planted not in dump
    server.refresh_from_db()
    assert server.headers_names == ["Authorization"] and server.env_names == ["TOKEN"]
    assert MCPAgentGrant.objects.get().overrides_summary == {"env": ["K"]}
    assert MCPUserGrant.objects.get().credentials_names == {"env": ["T"]}


@pytest.mark.django_db
def test_config_overrides_accept_only_the_documented_keys():
    server, agent = make_server(), make_agent()
    with pytest.raises(ApplicationError, match="unknown key"):
        grants.agent_grant_set(actor="system", server=server, agent=agent, config_overrides={"url": "http://evil"})
    with pytest.raises(ApplicationError, match="timeout"):
        grants.agent_grant_set(actor="system", server=server, agent=agent, config_overrides={"timeout": 0})


# --- access requests ------------------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_approving_an_access_request_creates_the_grant_and_tells_staff_and_the_agent(published):
    server, agent = make_server(), make_agent()
    request = grants.access_request_create(requested_by=f"agent:{agent.key}", scope="agent", server=server,
                                           agent=agent, tool_allow=["alpha"], reason="need alpha for reports")
    with pytest.raises(Conflict):
        grants.access_request_create(requested_by=f"agent:{agent.key}", scope="agent", server=server, agent=agent)
    grants.access_request_review(actor="reviewer", request=request, decision="approve", note="ok for reports")
    grant = MCPAgentGrant.objects.get(server=server, agent=agent)
    assert grant.tool_allow == ["alpha"] and grant.enabled and grant.granted_by == "reviewer"
    assert visible(agent) == ["mcp_files__alpha"]
    with pytest.raises(Conflict):
        grants.access_request_review(actor="other", request=request, decision="reject")
    kinds = [kind for kind, _, _ in published]
    assert "mcp.access_requested" in kinds and "mcp.access_reviewed" in kinds
    reviewed = next(payload for kind, payload, _ in published if kind == "mcp.access_reviewed")
    assert reviewed["status"] == "approved" and reviewed["agent"] == agent.key


@pytest.mark.django_db
def test_a_user_scope_request_approved_creates_a_user_grant():
    server, agent = make_server(), make_agent()
    grants.agent_grant_set(actor="system", server=server, agent=agent)
    request = grants.access_request_create(requested_by="staff", scope="user", server=server, agent=agent,
                                           user_id="alice", tool_allow=["beta"])
    grants.access_request_review(actor="reviewer", request=request, decision="approve")
    assert MCPUserGrant.objects.get(user_id="alice").tool_allow == ["beta"]
    assert visible(agent, "alice") == ["mcp_files__beta"]


@pytest.mark.django_db
def test_a_failure_while_granting_leaves_the_request_pending_and_no_grant(monkeypatch):
    server, agent = make_server(), make_agent()
    request = grants.access_request_create(requested_by="staff", scope="agent", server=server, agent=agent)

    def broken(**kwargs):
        MCPAgentGrant.objects.create(server=kwargs["server"], agent=kwargs["agent"])
        raise RuntimeError("database went away mid-way")

    monkeypatch.setattr(grants, "agent_grant_set", broken)
    with pytest.raises(RuntimeError):
        grants.access_request_review(actor="reviewer", request=request, decision="approve")
    assert MCPAccessRequest.objects.get().status == "pending" and not MCPAgentGrant.objects.exists()


@pytest.mark.django_db
def test_rejecting_and_withdrawing_requests():
    server, agent = make_server(), make_agent()
    first = grants.access_request_create(requested_by=f"agent:{agent.key}", scope="agent", server=server, agent=agent)
    grants.access_request_review(actor="reviewer", request=first, decision="reject", note="not for this agent")
    assert not MCPAgentGrant.objects.exists()
    second = grants.access_request_create(requested_by=f"agent:{agent.key}", scope="agent", server=server, agent=agent)
    with pytest.raises(ApplicationError):
        grants.access_request_withdraw(requested_by="agent:someone-else", request=second)
    assert grants.access_request_withdraw(requested_by=f"agent:{agent.key}", request=second).status == "withdrawn"


# --- what a server may be -------------------------------------------------------------------------------------------
@pytest.mark.django_db
@pytest.mark.parametrize("command,args,why", [
    ("bash", ["server.sh"], "not an allowed launcher"),
    ("python3", ["-c", "import os"], "inline code"),
    ("python3", ["-Ic", "import os"], "inline code"),
    ("python3", ["-cimport os"], "inline code"),
    ("node", ["--eval=require('x')"], "inline code"),
    ("/tmp/python3", ["server.py"], "not an allowed launcher"),
    ("python3", "server.py --port 1", "argv"),
])
def test_stdio_servers_start_only_with_allowed_launchers_and_no_inline_code(command, args, why):
    with pytest.raises(MCPServerInvalid, match=why):
        server_create(actor="system", name="bad", transport="stdio", command=command, args=args)


@pytest.mark.django_db
def test_whole_argument_matching_does_not_refuse_ordinary_package_names():
    launcher_set(actor="system", command="npx", denied_args=["-c", "--call"])
    server = server_create(actor="system", name="remote", transport="stdio", command="npx",
                           args=["-y", "mcp-remote", "--require-auth"])
    assert server.args == ["-y", "mcp-remote", "--require-auth"]


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/mcp", "http://localhost/mcp", "http://169.254.169.254/x",
                                 "http://10.0.0.5/mcp", "http://[::1]/mcp", "http://[::ffff:127.0.0.1]/mcp",
                                 "file:///etc/passwd", "http://user:pw@example.com/mcp"])
def test_server_urls_may_not_reach_goclaws_own_network_unless_allowed(url):
    with pytest.raises(MCPServerInvalid):
        server_create(actor="system", name="ssrf", transport="streamable-http", url=url)


@pytest.mark.django_db
def test_tool_prefixes_start_with_mcp_and_no_custom_tool_may_take_one():
    assert make_server(name="x", tool_prefix="read_", tools=()).prefix == "mcp_read_"  # mcp_ put in front
    with pytest.raises(MCPServerInvalid, match="tool_prefix"):
        make_server(name="y", tool_prefix="Read-Files")
    make_server(name="gh", tool_prefix="mcp_gh_")
    with pytest.raises(CustomToolCollision, match="reserved"):
        custom_tool_create(actor=None, name="mcp_gh_alpha", description="shadow", command="echo hi",
                           parameters={"type": "object", "properties": {}})
