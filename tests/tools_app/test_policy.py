"""The policy engine: every step alone and combined, explain, caching (also across processes), admin checks."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from goclaw.management.commands.up import database_url

from tests.factories import make_agent
from tools_app.base import Tool, ToolResult
from tools_app.calls import CallContext
from tools_app.models import ToolPolicy, ToolProfile
from tools_app.policy import PolicyInput, explain, resolve
from tools_app.registry import registry
from tools_app.services.policy import tool_policy_delete, tool_policy_save

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("counters_reread_only_after_a_change")]  # counts queries
ROOT = Path(__file__).resolve().parents[2]


def _tool(name, group):
    return type(name, (Tool,), {"name": name, "description": name, "group": group,
                                "run": lambda self, ctx, args: ToolResult(for_llm=name)})()


@pytest.fixture
def reg():
    """Global built-ins plus a small synthetic world: web, messaging, memory, sessions."""
    r = registry.clone()
    for name, group in [("web_search", "web"), ("web_fetch", "web"), ("message", "messaging"), ("memory_search", "memory"),
                        ("memory_get", "memory"), ("sessions_list", "sessions"), ("spawn", "sessions"),
                        ("session_status", "sessions"), ("cron", "automation")]:
        r.register(_tool(name, group))
    return r


def policy(scope, **fields):
    """Create or update the policy at this scope through its service (as the admin does)."""
    target = {"scope": scope, "agent": fields.pop("agent", None), "provider": fields.pop("provider", ""),
              "group_key": fields.pop("group_key", "")}
    spec = ToolPolicy.objects.filter(**target).first() or ToolPolicy(**target)
    for name, value in fields.items():
        setattr(spec, name, value)
    return tool_policy_save(actor=None, policy=spec)[0]


def profile(name):
    return ToolProfile.objects.get(name=name)


def policy_input(agent, depth=0, **kw):
    return PolicyInput(agent, CallContext(subagent_depth=depth, **kw))


def allowed(reg, agent, **kw):
    return set(resolve(policy_input(agent, **kw), reg))


FS = {"read_file", "write_file", "edit", "list_files", "search", "glob", "workspace_dir"}


def test_no_policy_means_every_tool(reg):
    assert allowed(reg, make_agent()) == set(reg.names())


CASES = [
    # (id, policies, input kwargs, must contain, must not contain)
    ("global profile coding", [("global", {"profile": "coding"})], {}, FS | {"exec", "web_search", "memory_get", "spawn"}, {"message", "cron", "datetime"}),
    ("global profile minimal", [("global", {"profile": "minimal"})], {}, {"session_status"}, FS | {"exec"}),
    ("provider profile replaces global", [("global", {"profile": "coding"}), ("provider", {"provider": "openai", "profile": "messaging"})],
     {"provider": "openai"}, {"message", "web_fetch"}, FS),
    ("provider override ignored for other provider", [("global", {"profile": "coding"}), ("provider", {"provider": "openai", "profile": "minimal"})],
     {"provider": "anthropic"}, FS, {"message"}),
    ("global allow intersects", [("global", {"allow": ["group:fs", "datetime"]})], {}, FS | {"datetime"}, {"exec", "web_search"}),
    ("provider allow intersects", [("provider", {"provider": "openai", "allow": ["read_file", "exec"]})], {"provider": "openai"}, {"read_file", "exec"}, {"write_file"}),
    ("agent allow intersects", [("agent", {"allow": ["group:web"]})], {}, {"web_search", "web_fetch"}, FS),
    ("agent+provider allow intersects", [("agent", {"allow": ["group:web", "group:fs"]}), ("agent_provider", {"provider": "openai", "allow": ["web_fetch"]})],
     {"provider": "openai"}, {"web_fetch"}, {"web_search"} | FS),
    ("group allow intersects", [("group", {"group_key": "telegram", "allow": ["message", "web_search"]})], {"channel": "telegram"}, {"message", "web_search"}, FS),
    ("group chat key also applies", [("group", {"group_key": "telegram:42", "allow": ["message"]})], {"channel": "telegram", "chat_id": "42"}, {"message"}, {"web_search"}),
    ("group of another channel ignored", [("group", {"group_key": "slack", "allow": ["message"]})], {"channel": "telegram"}, FS, set()),
    ("global deny subtracts", [("global", {"deny": ["group:runtime"]})], {}, FS, {"exec", "tool_output_get"}),
    ("provider deny is read", [("provider", {"provider": "openai", "deny": ["exec"]})], {"provider": "openai"}, FS, {"exec"}),
    ("agent deny beats agent allow", [("agent", {"allow": ["group:fs"], "deny": ["write_file"]})], {}, FS - {"write_file"}, {"write_file"}),
    ("deny beats allow across scopes", [("global", {"allow": ["exec", "read_file"]}), ("agent", {"deny": ["exec"]})], {}, {"read_file"}, {"exec"}),
    ("also_allow adds outside the profile", [("global", {"profile": "minimal", "also_allow": ["datetime"]}), ("agent", {"also_allow": ["group:web"]})],
     {}, {"session_status", "datetime", "web_search"}, FS),
    ("also_allow never resurrects a denied tool", [("global", {"profile": "minimal", "deny": ["exec"]}), ("agent", {"also_allow": ["exec", "datetime"]})],
     {}, {"datetime"}, {"exec"}),
    ("subagent deny applies below depth 0", [], {"depth": 1}, FS, {"memory_search", "memory_get", "cron", "session_status"}),
    ("subagent deny not applied at depth 0", [], {"depth": 0}, {"memory_search", "cron", "session_status"}, set()),
    ("leaf deny at max depth", [], {"depth": 1}, FS, {"spawn", "sessions_list"}),
    ("per-request allow intersects last", [("agent", {"also_allow": ["datetime"]})], {"request_allow": ("group:fs",)}, FS, {"datetime", "exec"}),
    ("aliases in lists name the canonical tool", [("agent", {"deny": ["edit_file", "bash"]})], {}, FS - {"edit"}, {"edit", "exec"}),
    ("disabled policy is ignored", [("global", {"profile": "minimal", "enabled": False})], {}, FS, set()),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_pipeline_steps(reg, case):
    _, policies, inputs, present, absent = case
    agent = make_agent(provider="anthropic")
    for scope, fields in policies:
        fields = dict(fields)
        if "profile" in fields:
            fields["profile"] = profile(fields["profile"])
        if scope in ("agent", "agent_provider"):
            fields["agent"] = agent
        policy(scope, **fields)
    result = allowed(reg, agent, **inputs)
    assert present <= result, present - result
    assert not (absent & result), absent & result


def test_agent_provider_defaults_to_the_agents_own_provider(reg):
    agent = make_agent(provider="openai")
    policy("provider", provider="openai", deny=["exec"])
    assert "exec" not in allowed(reg, agent)
    assert "exec" in allowed(reg, agent, provider="anthropic")


def test_leaf_deny_follows_the_configured_max_depth(reg, settings):
    settings.TOOL_MAX_SUBAGENT_DEPTH = 2
    agent = make_agent()
    assert "spawn" in allowed(reg, agent, depth=1)
    assert "spawn" not in allowed(reg, agent, depth=2)


def test_mcp_style_groups_added_at_runtime_are_policy_names(reg):
    reg.register(_tool("mcp_github_issues", "mcp:github"))
    reg.add_group("mcp", ["mcp_github_issues"])
    agent = make_agent()
    policy("agent", agent=agent, allow=["group:mcp:github"])
    assert allowed(reg, agent) == {"mcp_github_issues"}


def test_explain_names_the_step_that_decided_each_tool(reg):
    agent = make_agent(provider="openai")
    policy("global", profile=profile("coding"), also_allow=["datetime"])
    policy("agent", agent=agent, deny=["exec"])
    result = explain(policy_input(agent, depth=1), reg)
    tools = {t["name"]: t for t in result["tools"]}
    assert tools["exec"]["allowed"] is False
    assert tools["exec"]["trail"] == [{"step": "global profile (coding)", "effect": "added"},
                                      {"step": f"agent {agent.key} deny", "effect": "removed"}]
    assert tools["datetime"]["decided_by"] == "global also_allow (denied tools excluded)" and tools["datetime"]["allowed"]
    assert tools["message"]["decided_by"] is None and not tools["message"]["allowed"]
    assert tools["memory_get"]["decided_by"] == "subagent deny (depth 1)"
    assert [t["name"] for t in result["tools"]] == sorted(tools)
    assert {t["name"] for t in result["tools"] if t["allowed"]} == allowed(reg, agent, depth=1)


def test_cold_resolution_is_bounded_in_queries_and_warm_is_free(reg, django_assert_max_num_queries, django_assert_num_queries):
    agent = make_agent(provider="openai")
    policy("global", profile=profile("coding"))
    policy("provider", provider="openai", allow=["group:fs", "exec", "group:web"])
    policy("agent", agent=agent, deny=["exec"])
    policy("agent_provider", agent=agent, provider="openai", also_allow=["datetime"])
    policy("group", group_key="cli", allow=["group:fs", "datetime"])
    from tools_app.policy import _cache

    _cache.clear()
    inp = policy_input(agent, channel="cli", depth=1)
    with django_assert_max_num_queries(6):
        cold = resolve(inp, reg)
    with django_assert_num_queries(0):
        assert resolve(inp, reg) == cold
    assert cold == FS | {"datetime"}


def test_a_change_is_visible_at_once_in_the_same_process(reg):
    agent = make_agent()
    assert "exec" in allowed(reg, agent)
    p = policy("agent", agent=agent, deny=["exec"])
    assert "exec" not in allowed(reg, agent)
    tool_policy_delete(actor=None, queryset=ToolPolicy.objects.filter(pk=p.pk))
    assert "exec" in allowed(reg, agent)


def test_catalog_endpoint_is_exactly_the_resolution_and_execute_refuses_the_rest(api, agent):
    policy("agent", agent=agent, allow=["group:fs", "datetime"], deny=["write_file"])
    names = [t["name"] for t in api.get("/api/v1/tools").json()["tools"]]
    assert names == sorted(allowed(registry, agent))
    assert "write_file" not in names and "exec" not in names and "datetime" in names
    body = json.dumps({"tool": "write_file", "arguments": {"path": "x", "content": "y"}})
    result = api.post("/api/v1/tools/execute", data=body, content_type="application/json").json()
    assert result["status"] == "denied" and "not available" in result["for_llm"]
    assert not (agent.workspace_path / "x").exists()


def test_subagent_depth_in_execute_context_is_enforced(api, agent):
    body = json.dumps({"tool": "datetime", "context": {"subagent_depth": 1, "allow": ["datetime"]}})
    assert api.post("/api/v1/tools/execute", data=body, content_type="application/json").json()["status"] == "ok"
    policy("subagent", deny=["datetime"])
    assert api.post("/api/v1/tools/execute", data=body, content_type="application/json").json()["status"] == "denied"


def test_explain_endpoint_is_staff_only_and_matches_the_catalog(api, staff_api, agent):
    policy("agent", agent=agent, deny=["exec"])
    assert api.get(f"/api/v1/tools/explain?agent={agent.key}").status_code == 403
    body = staff_api.get(f"/api/v1/tools/explain?agent={agent.key}&depth=0").json()
    exec_row = next(t for t in body["tools"] if t["name"] == "exec")
    assert exec_row == {"name": "exec", "allowed": False, "decided_by": f"agent {agent.key} deny",
                        "trail": [{"step": "global profile (full: every tool)", "effect": "added"},
                                  {"step": f"agent {agent.key} deny", "effect": "removed"}]}
    assert staff_api.get("/api/v1/tools/explain?agent=ghost").status_code == 404
    assert staff_api.get(f"/api/v1/tools/explain?agent={agent.key}&depth=x").status_code == 400


def test_admin_rejects_malformed_specs_and_warns_about_unknown_names(admin_client, agent):
    url = "/admin/tools_app/toolpolicy/add/"
    bad = admin_client.post(url, {"scope": "agent", "agent": agent.pk, "allow": '"read_file"', "deny": "[]", "also_allow": '[1, "bad name!"]',
                                  "enabled": "on"})
    assert bad.status_code == 200
    page = bad.content.decode()
    assert "allow: must be a list" in page and "also_allow: 1 is not a string" in page and "not a valid tool name" in page
    ok = admin_client.post(url, {"scope": "agent", "agent": agent.pk, "allow": '["read_file", "group:nope", "made_up_tool"]',
                                 "deny": "[]", "also_allow": "[]", "enabled": "on"}, follow=True)
    page = ok.content.decode()
    assert "unknown group &#x27;group:nope&#x27;" in page and "unknown tool &#x27;made_up_tool&#x27;" in page
    assert ToolPolicy.objects.get(scope="agent", agent=agent).allow == ["read_file", "group:nope", "made_up_tool"]


def test_admin_explain_page_shows_every_tool_with_its_deciding_step(admin_client, agent):
    policy("agent", agent=agent, deny=["exec"])
    page = admin_client.get(f"/admin/tools_app/agent/{agent.pk}/explain/?depth=1").content.decode()
    assert f"removed by agent {agent.key} deny" in page and "<code>exec</code>" in page
    assert "<code>read_file</code>" in page and "subagent deny (depth 1)" in page
    assert f"/admin/tools_app/agent/{agent.pk}/explain/" in admin_client.get(f"/admin/tools_app/agent/{agent.pk}/change/").content.decode()


def test_profiles_are_data_and_admins_can_add_one(admin_client, reg):
    response = admin_client.post("/admin/tools_app/toolprofile/add/", {"name": "readonly", "description": "x",
                                                                       "tools": '["read_file", "list_files", "glob"]'})
    assert response.status_code == 302
    agent = make_agent()
    policy("agent", agent=agent, profile=ToolProfile.objects.get(name="readonly"))
    assert allowed(reg, agent) == {"read_file", "list_files", "glob"}


@pytest.mark.django_db(transaction=True)
def test_a_change_made_here_reaches_another_process(tmp_path):
    """A second process (as an API or worker process would) drops its cached catalog after the change commits."""
    agent = make_agent(key="xproc")
    url = database_url()
    script = (
        "import django, sys, time; django.setup()\n"
        "from tools_app.models import Agent; from tools_app.policy import PolicyInput, resolve\n"
        "agent = Agent.objects.get(key='xproc'); seen = None; deadline = time.monotonic() + 30\n"
        "while time.monotonic() < deadline:\n"
        "    now = 'exec' in resolve(PolicyInput(agent=agent))\n"
        "    if now != seen:\n"
        "        print(f'{time.time():.3f} {now}', flush=True); seen = now\n"
        "        if now is False: break\n"
        "    time.sleep(0.02)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_VERSION", "PYTEST_CURRENT_TEST")}
    env.update({"DATABASE_URL": url, "GOCLAW_DATA_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "goclaw.settings"})
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline().split()
        assert first[1] == "True"
        # The agent is the same object, but the other process only learns of the change through the database.
        policy("agent", agent=agent, deny=["exec"])
        changed_at = time.time()
        second = proc.stdout.readline().split()
        assert second and second[1] == "False"
        print(f"cross-process visibility: {float(second[0]) - changed_at:.3f}s")
    finally:
        proc.kill()
        proc.wait()
