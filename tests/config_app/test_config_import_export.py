"""Configuration as code: the export is complete, stable and secret-free; the import reproduces it, is all or
nothing, reports every problem with its path, and a dry run changes nothing."""
from __future__ import annotations

import copy

import pytest
import yaml
from django.db import connection

from config_app.document import document_dump, document_load
from config_app.errors import ConfigInvalid
from config_app.sections import SECTIONS
from config_app.services import config_export, config_import
from mcp_app.models import MCPAgentGrant, MCPServer
from mcp_app.services.common import agent_grant_overrides
from mcp_app.services.servers import server_secrets
from tests.config_app.conftest import SECRET_VALUES, wipe_configuration
from tools_app.models import Agent, CustomTool, ToolPolicy
from tools_app.services.cli_binaries import cli_binary_env

pytestmark = pytest.mark.django_db


def export_text() -> str:
    return document_dump(config_export())


def with_env_refs(document: dict) -> dict:
    """The document with every `{set: true}` secret replaced by `{env: <its name>}` (the fixture's variables)."""
    document = copy.deepcopy(document)

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if value == {"set": True}:
                    node[key] = {"env": key if key in SECRET_VALUES else "AUTH_HEADER"}
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)
    walk(document)
    return document


def row_counts() -> dict[str, int]:
    return {section.name: section.model._default_manager.count() for section in SECTIONS}


def test_the_export_has_every_section_with_natural_keys_and_no_secret_values(rich):
    text = export_text()
    document = yaml.safe_load(text)
    assert list(document) == ["version", *[s.name for s in SECTIONS]]
    assert all(document[s.name] for s in SECTIONS), {s.name: len(document[s.name]) for s in SECTIONS}
    for value in SECRET_VALUES.values():
        assert value not in text
    alpha = next(a for a in document["agents"] if a["key"] == "alpha")
    assert alpha["sandbox_profile"] == "strict" and "id" not in alpha and "tokens" not in alpha
    tool = next(t for t in document["custom_tools"] if t["name"] == "deploy_site")
    assert tool["env"] == {"DEPLOY_TOKEN": {"set": True}} and tool["agent"] is None
    grant = next(g for g in document["mcp_agent_grants"] if g["server"] == "files")
    assert grant["agent"] == "alpha" and grant["config_overrides"] == {"timeout": 30, "env": {"GRANT_KEY": {"set": True}}}
    team = document["teams"][0]
    assert team["lead"] == "alpha" and team["members"] == [{"agent": "beta", "role": "member"},
                                                           {"agent": "gamma", "role": "reviewer"}]
    assert export_text() == text  # stable: two exports of one configuration are byte-identical


def test_a_round_trip_into_an_empty_database_reproduces_the_configuration_exactly(rich, secret_env, monkeypatch):
    monkeypatch.setenv("AUTH_HEADER", SECRET_VALUES["WEB_AUTH"])
    config_import(with_env_refs(config_export()), dry_run=False, prune=False, actor=None)
    before = export_text()
    assert "{set: true}" not in before and "env: DEPLOY_TOKEN" in before

    wipe_configuration()
    assert Agent.objects.count() == 0
    plan = config_import(document_load(before), dry_run=False, prune=False, actor=None)

    assert export_text() == before
    assert plan["applied"] and not plan["changed"] and not plan["removed"]
    assert len(plan["created"]) == sum(len(entries) for key, entries in yaml.safe_load(before).items() if key != "version")
    files = MCPServer.objects.get(name="files")
    assert server_secrets(files)[1] == {"FILES_KEY": SECRET_VALUES["FILES_KEY"]}
    assert agent_grant_overrides(MCPAgentGrant.objects.get(server=files))["env"] == {"GRANT_KEY": SECRET_VALUES["GRANT_KEY"]}
    assert cli_binary_env(Agent.objects.get(key="beta").cli_binaries.get()) == {"GIT_TOKEN": SECRET_VALUES["GIT_TOKEN"]}
    # and importing the same document again changes nothing
    again = config_import(document_load(before), dry_run=False, prune=False, actor=None)
    assert again["created"] == again["changed"] == again["removed"] == []


def test_a_dry_run_reports_the_plan_and_changes_nothing(rich):
    before, counts = export_text(), row_counts()
    document = config_export()
    next(a for a in document["agents"] if a["key"] == "beta")["provider"] = "mistral"
    document["agents"].append({"key": "delta", "display_name": "Delta"})
    document["teams"] = []

    plan = config_import(document, dry_run=True, prune=True, actor=None)

    assert plan["dry_run"] and not plan["applied"]
    assert {"section": "agents", "key": "delta"} in plan["created"]
    assert {"section": "teams", "key": "core"} in plan["removed"]
    change = next(c for c in plan["changed"] if c["key"] == "beta")
    assert change["fields"]["provider"] == {"old": "openai", "new": "mistral"}
    assert export_text() == before and row_counts() == counts


def test_a_broken_document_changes_nothing_and_reports_every_problem_with_its_path(rich):
    before, counts = export_text(), row_counts()
    document = config_export()
    document["agents"].append({"key": "delta", "sandbox_profile": "nowhere"})
    document["agents"][0]["provider"] = "changed-before-the-problems"
    document["custom_tools"].append({"name": "Bad Name", "description": "", "command": "x",
                                     "parameters": {"type": "object"}})
    document["tool_policies"][0]["allow"] = "not-a-list"
    document["teams"][0]["colour"] = "blue"
    document["mcp_servers"].append({"name": "evil", "transport": "stdio", "command": "bash", "args": ["-c", "id"]})

    with pytest.raises(ConfigInvalid) as caught:
        config_import(document, dry_run=False, prune=False, actor=None)

    paths = {p["path"] for p in caught.value.problems}
    n_agents, n_tools, n_servers = (len(document[k]) - 1 for k in ("agents", "custom_tools", "mcp_servers"))
    assert f"agents[{n_agents}].sandbox_profile" in paths
    assert f"custom_tools[{n_tools}].name" in paths and f"custom_tools[{n_tools}].description" in paths
    assert any(p.startswith("tool_policies[0]") for p in paths)
    assert "teams[0].colour" in paths
    assert any(p.startswith(f"mcp_servers[{n_servers}]") for p in paths)
    message = next(p["message"] for p in caught.value.problems if p["path"] == f"agents[{n_agents}].sandbox_profile")
    assert message == "no sandbox profile named 'nowhere'"
    assert export_text() == before and row_counts() == counts


def test_without_prune_missing_entities_stay_and_with_prune_they_go(rich):
    document = config_export()
    document["custom_tools"] = [t for t in document["custom_tools"] if t["name"] != "greet"]
    del document["teams"]  # an absent section is never pruned

    kept = config_import(document, dry_run=False, prune=False, actor=None)
    assert kept["removed"] == [] and CustomTool.objects.filter(name="greet").exists()

    pruned = config_import(document, dry_run=False, prune=True, actor=None)
    assert pruned["removed"] == [{"section": "custom_tools", "key": "name=greet, agent=alpha"}]
    assert not CustomTool.objects.filter(name="greet").exists()
    assert "core" in [t["name"] for t in config_export()["teams"]]


def test_prune_refuses_a_reference_to_an_entity_it_would_remove(rich):
    document = config_export()
    document["agents"] = [a for a in document["agents"] if a["key"] != "beta"]
    with pytest.raises(ConfigInvalid) as caught:
        config_import(document, dry_run=True, prune=True, actor=None)
    assert any(p["path"].startswith("teams[0]") or p["path"].startswith("agent_links[0]")
               for p in caught.value.problems)
    assert Agent.objects.filter(key="beta").exists()


def test_set_true_keeps_a_secret_and_env_takes_it_from_the_environment(rich, monkeypatch):
    document = config_export()
    tool = next(t for t in document["custom_tools"] if t["name"] == "deploy_site")
    tool["description"] = "Deploy the site (v2)"
    plan = config_import(document, dry_run=False, prune=False, actor=None)
    fields = next(c for c in plan["changed"] if c["key"].startswith("name=deploy_site"))["fields"]
    assert fields["env.DEPLOY_TOKEN"]["new"] == "(kept)"
    row = CustomTool.objects.get(name="deploy_site")
    from tools_app.custom_tools import env_seal_context
    from goclaw import crypto
    assert crypto.decrypt_json(row.env_sealed, associated_data=env_seal_context(row.pk)) == {
        "DEPLOY_TOKEN": SECRET_VALUES["DEPLOY_TOKEN"]}

    monkeypatch.setenv("NEW_DEPLOY_TOKEN", "rotated-token-value")
    tool["env"] = {"DEPLOY_TOKEN": {"env": "NEW_DEPLOY_TOKEN"}}
    plan = config_import(document, dry_run=False, prune=False, actor=None)
    fields = next(c for c in plan["changed"] if c["key"].startswith("name=deploy_site"))["fields"]
    assert fields == {"env.DEPLOY_TOKEN": {"old": "(set)", "new": "(changed)"}}
    row.refresh_from_db()
    assert crypto.decrypt_json(row.env_sealed, associated_data=env_seal_context(row.pk)) == {
        "DEPLOY_TOKEN": "rotated-token-value"}
    exported = export_text()
    assert "rotated-token-value" not in exported and "env: NEW_DEPLOY_TOKEN" in exported


def test_a_secret_needs_a_value_source_on_a_new_entity_and_literals_need_consent(rich):
    document = {"version": 1, "custom_tools": [
        {"name": "fresh", "description": "d", "parameters": {"type": "object"}, "command": "true",
         "env": {"A": {"set": True}, "B": {"env": "GOCLAW_TEST_SURELY_UNSET"}, "C": "literal-value"}}]}
    with pytest.raises(ConfigInvalid) as caught:
        config_import(document, dry_run=False, prune=False, actor=None)
    assert {p["path"] for p in caught.value.problems} == {"custom_tools[0].env.A", "custom_tools[0].env.B",
                                                          "custom_tools[0].env.C"}
    document["literal_secrets"] = True
    document["custom_tools"][0]["env"] = {"C": "literal-value"}
    config_import(document, dry_run=False, prune=False, actor=None)
    assert "literal-value" not in export_text()


def test_goclaw_json_shapes_import_as_the_same_sections(rich):
    tools = [{"name": "gc_tool", "description": "from GoClaw", "parameters": {"type": "object", "properties": {}},
              "command": "echo hi", "timeout_seconds": 30, "enabled": True, "env": {"GC_KEY": "gc-value"}}]
    import json
    plan = config_import(document_load(json.dumps(tools, indent="\t")), dry_run=False, prune=False, actor=None)
    assert plan["created"] == [{"section": "custom_tools", "key": "name=gc_tool"}]
    servers = {"servers": [{"id": "5d1c", "name": "gc-web", "transport": "streamable-http",
                            "url": "http://127.0.0.1:9/gc", "timeout_sec": 45, "enabled": True,
                            "created_at": "2025-01-01T00:00:00Z", "allow_private_network": True}],
               "grants": [{"server_name": "gc-web", "agent_key": "beta", "tool_allow": ["x"], "tool_deny": [],
                           "enabled": True, "granted_by": "someone"}]}
    config_import(servers, dry_run=False, prune=False, actor=None)
    server = MCPServer.objects.get(name="gc-web")
    assert server.timeout_seconds == 45
    assert MCPAgentGrant.objects.get(server=server).tool_allow == ["x"]
    # a partial (GoClaw) entry leaves what it does not carry as it was
    config_import([{**tools[0], "description": "changed"}], dry_run=False, prune=False, actor=None)
    assert CustomTool.objects.get(name="gc_tool").env_names == ["GC_KEY"]


def test_policies_are_keyed_by_scope_and_target(rich):
    document = config_export()
    policy = next(p for p in document["tool_policies"] if p["scope"] == "agent")
    assert policy["agent"] == "alpha" and policy["profile"] == "reviewers"
    policy["deny"] = ["web_fetch"]
    plan = config_import(document, dry_run=False, prune=False, actor=None)
    assert [c["key"] for c in plan["changed"]] == ["scope=agent, agent=alpha"]
    assert ToolPolicy.objects.get(scope="agent").deny == ["web_fetch"]


def test_an_unreadable_document_is_one_problem_not_a_traceback():
    with pytest.raises(ConfigInvalid) as caught:
        document_load("version: 1\nagents: [unclosed")
    assert caught.value.problems[0]["path"] == "(document)"
    with pytest.raises(ConfigInvalid):
        document_load("a: &x [1]\nb: *x\n")  # aliases are refused
    for depth in (40, 5000):
        with pytest.raises(ConfigInvalid, match="nested deeper"):
            document_load("version: 1\nagents: " + "[" * depth + "]" * depth)
    with pytest.raises(ConfigInvalid) as caught:
        config_import({"version": 2, "robots": []}, dry_run=True, prune=False, actor=None)
    assert {p["path"] for p in caught.value.problems} == {"version", "robots"}
    assert connection.in_atomic_block  # the test's own transaction is intact


def test_a_document_may_move_the_default_sandbox_profile(rich):
    document = config_export()
    for profile in document["sandbox_profiles"]:
        profile["is_default"] = profile["name"] == "strict"
    config_import(document, dry_run=False, prune=False, actor=None)
    from sandbox_app.models import SandboxProfile
    assert list(SandboxProfile.objects.filter(is_default=True).values_list("name", flat=True)) == ["strict"]


def test_hostile_values_are_problems_never_errors(rich):
    document = {"version": 1, "agents": [{"key": "nul", "display_name": "a\x00b"}, {"key": ["a", "list"]},
                                         "not-a-mapping", {"key": "typed", "enabled": "perhaps"}],
                "teams": [{"name": "t", "lead": "alpha", "members": "everyone"}]}
    with pytest.raises(ConfigInvalid) as caught:
        config_import(document, dry_run=False, prune=False, actor=None)
    paths = [p["path"] for p in caught.value.problems]
    assert all(any(p.startswith(prefix) for p in paths)
               for prefix in ("agents[0]", "agents[1]", "agents[2]", "agents[3]", "teams[0]")), paths
    assert not Agent.objects.filter(key__in=["nul", "typed"]).exists()


def test_an_applied_import_publishes_config_imported_and_a_dry_run_does_not(rich, monkeypatch):
    published = []
    monkeypatch.setattr("config_app.services.publish", lambda event, payload, groups: published.append(
        (event, payload, list(groups))))
    document = config_export()
    document["agents"].append({"key": "delta"})
    config_import(document, dry_run=True, prune=False, actor=None)
    assert published == []
    config_import(document, dry_run=False, prune=False, actor=None)
    assert published == [("config.imported", {"created": 1, "changed": 0, "removed": 0, "prune": False,
                                               "actor": "system"}, ["config"])]


def test_every_model_of_the_apps_is_either_a_section_or_named_as_not_configuration():
    from django.apps import apps

    from config_app.sections import NOT_EXPORTED

    exported = {section.model._meta.label for section in SECTIONS}
    for app in ("tools_app", "mcp_app", "sandbox_app", "teams_app"):
        for model in apps.get_app_config(app).get_models():
            assert model._meta.label in exported or model._meta.label in NOT_EXPORTED, model._meta.label


def test_a_grant_change_keeps_the_secrets_it_does_not_change_and_removes_the_ones_left_out(rich):
    from mcp_app.models import MCPUserGrant
    from mcp_app.services.grants import user_grant_credentials

    document = config_export()
    grant = next(g for g in document["mcp_agent_grants"] if g["server"] == "files")
    grant["config_overrides"]["timeout"] = 45
    user_grant = document["mcp_user_grants"][0]
    del user_grant["credentials"]
    plan = config_import(document, dry_run=False, prune=False, actor=None)

    changed = {c["section"]: c["fields"] for c in plan["changed"]}
    assert changed["mcp_agent_grants"]["config_overrides"] == {"old": {"timeout": 30}, "new": {"timeout": 45}}
    assert changed["mcp_agent_grants"]["config_overrides.env.GRANT_KEY"]["new"] == "(kept)"
    assert changed["mcp_user_grants"] == {"credentials.env.USER_KEY": {"old": "(set)", "new": "(removed)"}}
    overrides = agent_grant_overrides(MCPAgentGrant.objects.get(server__name="files"))
    assert overrides == {"timeout": 45, "env": {"GRANT_KEY": SECRET_VALUES["GRANT_KEY"]}}
    assert user_grant_credentials(MCPUserGrant.objects.get()) == {}


def test_a_team_may_change_its_lead_and_members(rich):
    from teams_app.models import Team

    document = config_export()
    team = document["teams"][0]
    team["lead"] = "beta"
    team["members"] = [{"agent": "alpha", "role": "reviewer"}]
    team["lock_minutes"] = 90
    config_import(document, dry_run=False, prune=False, actor=None)
    core = Team.objects.get(name="core")
    assert core.lead.key == "beta" and core.lock_minutes == 90
    assert sorted((m.agent.key, m.role) for m in core.members.select_related("agent")) == [
        ("alpha", "reviewer"), ("beta", "lead")]
    assert config_export()["teams"][0]["members"] == [{"agent": "alpha", "role": "reviewer"}]


def test_a_binary_that_can_reveal_its_credentials_imports_only_with_its_risk_acknowledged(rich):
    """P15: /usr/bin/git can run programs (aliases, hooks): the export carries the acknowledgement, and a document
    without it is refused with the reason and the field to set, changing nothing."""
    document = config_export()
    entry = next(e for e in document["cli_binaries"] if e["name"] == "git")
    assert entry["risk_acknowledged"] is True
    entry["risk_acknowledged"] = False
    before = export_text()
    with pytest.raises(ConfigInvalid) as caught:
        config_import(document, dry_run=False, prune=False, actor=None)
    messages = [p["message"] for p in caught.value.problems if p["path"].startswith("cli_binaries")]
    assert messages and "risk_acknowledged: true" in messages[0] and "version control" in messages[0], \
        caught.value.problems
    assert export_text() == before
