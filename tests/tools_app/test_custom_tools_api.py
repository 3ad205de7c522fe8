"""The staff API for custom tools: CRUD, import and export under /api/v1/custom-tools/; agents are refused; the env is
write-only and a planted value never comes back in any response."""
from __future__ import annotations

import json

import pytest

from tests.factories import make_agent
from tools_app.models import CustomTool

pytestmark = pytest.mark.django_db

BASE = "/api/v1/custom-tools/"
SECRET = "api-planted-secret-93ad0c2f"
DEFINITION = {"name": "greet", "description": "says hello",
              "parameters": {"type": "object", "properties": {"who": {"type": "string"}}},
              "command": "echo hello {{.who}}"}


def test_staff_create_read_update_and_delete_a_custom_tool_without_ever_seeing_the_env(staff_api):
    agent = make_agent(key="api-agent")
    created = staff_api.post(BASE, {**DEFINITION, "agent": "api-agent", "env": {"TOKEN": SECRET}}, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["agent"], body["timeout_seconds"], body["group"], body["env_names"]) == \
        ("api-agent", 60, "custom", ["TOKEN"])
    pk = body["id"]
    responses = [created, staff_api.get(BASE), staff_api.get(f"{BASE}{pk}")]
    patched = staff_api.patch(f"{BASE}{pk}", {"timeout_seconds": 5, "env": {"OTHER": "second-value-1"}},
                              format="json")
    assert patched.status_code == 200 and patched.json()["env_names"] == ["OTHER", "TOKEN"]
    put = staff_api.put(f"{BASE}{pk}", {**DEFINITION, "description": "replaced", "agent": "api-agent"}, format="json")
    assert put.status_code == 200 and put.json()["description"] == "replaced"
    assert put.json()["timeout_seconds"] == 5  # PUT names what it replaces; the rest stays
    responses += [patched, put, staff_api.get(f"{BASE}export")]
    for response in responses:
        assert SECRET not in response.content.decode()
    assert staff_api.delete(f"{BASE}{pk}").status_code == 204
    assert not CustomTool.objects.filter(agent=agent).exists()
    assert staff_api.get(f"{BASE}{pk}").status_code == 404


def test_an_invalid_definition_or_a_collision_is_a_clear_error(staff_api):
    bad = staff_api.post(BASE, {**DEFINITION, "command": "echo {{.nobody}}"}, format="json")
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "custom_tool_invalid"
    assert "{{.nobody}} names no declared parameter" in bad.json()["error"]["details"]["command"]
    clash = staff_api.post(BASE, {**DEFINITION, "name": "exec"}, format="json")
    assert clash.status_code == 409 and clash.json()["error"]["code"] == "custom_tool_name_collision"
    unknown = staff_api.post(BASE, {**DEFINITION, "agent": "ghost"}, format="json")
    assert unknown.status_code == 400 and "no agent has the key 'ghost'" in unknown.json()["error"]["message"]


def test_import_is_all_or_nothing_and_export_returns_the_import_format(staff_api):
    good = {**DEFINITION, "timeout_seconds": 10, "enabled": True}
    refused = staff_api.post(f"{BASE}import", [good, {**good, "name": "bad", "parameters": {"type": "array"}}],
                             format="json")
    assert refused.status_code == 400
    assert refused.json()["error"]["details"]["problems"] == ['[1].parameters: must be a JSON Schema of "type": "object"']
    assert not CustomTool.objects.exists()
    done = staff_api.post(f"{BASE}import", {**good, "env": {"K": SECRET}}, format="json")
    assert done.status_code == 200 and done.json() == {"created": ["greet"], "updated": []}
    exported = staff_api.get(f"{BASE}export")
    assert exported.json() == [{**good, "working_dir": "", "agent": None}]
    assert SECRET not in exported.content.decode()


def test_agents_are_refused_and_see_custom_tools_only_in_their_catalog(api, agent, staff_api):
    staff_api.post(BASE, {**DEFINITION, "agent": agent.key}, format="json")
    for method, url in (("get", BASE), ("post", BASE), ("post", f"{BASE}import"), ("get", f"{BASE}export"),
                        ("get", f"{BASE}{CustomTool.objects.get().pk}")):
        assert getattr(api, method)(url, {}, format="json").status_code == 403, url
    catalog = api.get("/api/v1/tools").json()["tools"]
    greet = next(tool for tool in catalog if tool["name"] == "greet")
    assert greet["description"] == "says hello"
    assert "echo hello" not in json.dumps(catalog)  # the template is the operator's, not shown to the model
