"""The custom tools admin: saves through the service with its checks shown on the form, a preview of the rendered
command, a write-only env (names shown as set), import / export, and the "try it" page running through the pipeline.
A planted env value never appears in any admin HTML."""
from __future__ import annotations

import json

import pytest

from tests.factories import make_agent
from tools_app.models import CustomTool, ToolInvocation
from tools_app.services.custom_tools import custom_tool_create

pytestmark = pytest.mark.django_db

BASE = "/admin/tools_app/customtool/"
SECRET = "admin-planted-secret-5e8f1a"
FORM = {"name": "greet", "description": "says hello",
        "parameters": json.dumps({"type": "object", "properties": {"who": {"type": "string", "examples": ["ada"]}}}),
        "command": "echo hello {{.who}}", "timeout_seconds": "60", "working_dir": "", "agent": "", "enabled": "on",
        "group": "custom", "requires_approval": "on", "env_set": ""}


def test_adding_a_tool_seals_its_env_and_the_change_page_shows_names_and_a_preview_but_never_values(admin_client):
    response = admin_client.post(f"{BASE}add/", {**FORM, "env_set": f"TOKEN={SECRET}\nOTHER=second-value-2"})
    assert response.status_code == 302, response.content.decode()[:2000]
    tool = CustomTool.objects.get(name="greet")
    assert tool.env_names == ["OTHER", "TOKEN"] and SECRET not in tool.env_sealed and tool.created_by is not None
    page = admin_client.get(f"{BASE}{tool.pk}/change/").content.decode()
    assert "TOKEN (set)" in page and "OTHER (set)" in page
    assert "<code>echo hello ada</code>" in page  # the preview renders the sample argument
    assert SECRET not in page and SECRET not in admin_client.get(BASE).content.decode()


def test_a_bad_template_or_a_collision_is_a_form_error_and_typed_env_values_are_not_echoed(admin_client):
    page = admin_client.post(f"{BASE}add/", {**FORM, "command": "echo {{.nobody}}", "env_set": f"TOKEN={SECRET}"})
    assert page.status_code == 200
    html = page.content.decode()
    assert "placeholder {{.nobody}} names no declared parameter" in html and SECRET not in html
    clash = admin_client.post(f"{BASE}add/", {**FORM, "name": "exec"}).content.decode()
    assert "tool name collision: exec is a built-in tool" in clash
    assert not CustomTool.objects.exists()


def test_unsetting_an_env_variable_keeps_the_others(admin_client):
    tool = custom_tool_create(actor=None, name="greet", description="d", command="echo {{.who}}",
                              parameters={"type": "object", "properties": {"who": {"type": "string"}}},
                              env={"A": "first-value-1", "B": "second-value-2"})
    response = admin_client.post(f"{BASE}{tool.pk}/change/", {**FORM, "env_unset": ["A"]})
    assert response.status_code == 302, response.content.decode()[:2000]
    tool.refresh_from_db()
    assert tool.env_names == ["B"] and tool.env_changed_at is not None


def test_the_try_page_runs_through_the_pipeline_and_shows_the_scrubbed_result(admin_client):
    agent = make_agent()
    tool = custom_tool_create(actor=None, name="leaky", description="prints its token", agent=agent,
                              parameters={"type": "object", "properties": {"who": {"type": "string"}}},
                              command='printf "%s: %s" {{.who}} "$TOKEN"', env={"TOKEN": SECRET})
    page = admin_client.get(f"{BASE}{tool.pk}/try/").content.decode()
    assert agent.key in page
    ran = admin_client.post(f"{BASE}{tool.pk}/try/", {"agent": agent.key, "arguments": '{"who": "ada"}'})
    html = ran.content.decode()
    assert "Result: ok" in html and "ada: [REDACTED]" in html and SECRET not in html
    audit = ToolInvocation.objects.get(tool_name="leaky")
    assert audit.agent_key == agent.key and SECRET not in json.dumps(
        [str(value) for value in ToolInvocation.objects.values().get(pk=audit.pk).values()])
    refused = admin_client.post(f"{BASE}{tool.pk}/try/", {"agent": agent.key, "arguments": "[1]"}).content.decode()
    assert "arguments must be a JSON object" in refused


def test_import_page_and_export_action(admin_client):
    entry = {"name": "greet", "description": "says hello", "command": "echo {{.who}}", "timeout_seconds": 10,
             "enabled": True, "parameters": {"type": "object", "properties": {"who": {"type": "string"}}}}
    bad = admin_client.post(f"{BASE}import/", {"json": json.dumps([entry, {**entry, "name": "exec",
                                                                           "env": {"K": SECRET}}])})
    html = bad.content.decode()
    assert "[1].name: tool name collision: exec is a built-in tool" in html and SECRET not in html
    assert not CustomTool.objects.exists()
    done = admin_client.post(f"{BASE}import/", {"json": json.dumps({**entry, "env": {"K": SECRET}})})
    assert done.status_code == 302 and CustomTool.objects.get().env_names == ["K"]
    exported = admin_client.post(BASE, {"action": "export_selected",
                                        "_selected_action": [str(CustomTool.objects.get().pk)]})
    assert json.loads(exported.content) == [{**entry, "working_dir": "", "agent": None}]
    assert SECRET not in exported.content.decode()
