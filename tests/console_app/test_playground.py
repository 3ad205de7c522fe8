"""The tool playground (/admin/console/playground/): a form generated from the tool's JSON Schema, a run through
the normal pipeline with the person recorded as the actor, the scrubbed result as the model sees it, explain for
tools the policy refuses, approvals, bad input shown in the form, and who may use it."""
from __future__ import annotations

import html
import json
import re
import threading
from pathlib import Path

import pytest
from django import forms
from django.contrib.auth.models import Permission

from console_app.playground.schema_form import (
    JSONValueField,
    NumberField,
    RawArgumentsForm,
    ToolArgumentsForm,
)
from tests.factories import make_agent
from tests.servers import wait_until
from tools_app.models import ApprovalRequest, ToolInvocation, ToolPolicy
from tools_app.services.agents import agent_update
from tools_app.services.approvals.requests import approval_decide
from tools_app.services.custom_tools import custom_tool_create
from tools_app.services.policy import tool_policy_save

pytestmark = pytest.mark.django_db

URL = "/admin/console/playground/"
GITHUB_TOKEN = "ghp_" + "Zq7Xw2Lr9Tb4Nc6Vm1Ks8Hd3Fg5Jp0Ya2Ue4B"  # credential-shaped, fake


def page(client, **params):
    response = client.get(URL, params)
    assert response.status_code == 200, response.content.decode()[:2000]
    return response.content.decode()


def run(client, agent, tool, user_id="alice", **fields):
    return client.post(URL, {"agent": agent.key, "user_id": user_id, "session_key": "", "tool": tool, **fields})


# --- the form generated from a schema ------------------------------------------------------------------------------
SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string", "minLength": 1, "maxLength": 4096, "description": "File path."},
        "content": {"type": "string", "description": "The full text."},
        "name": {"type": "string", "maxLength": 40, "default": "ada"},
        "count": {"type": "integer", "minimum": 1, "maximum": 10},
        "ratio": {"type": "number", "default": 0.5},
        "append": {"type": "boolean", "default": False},
        "force": {"type": "boolean"},
        "mode": {"type": "string", "enum": ["fast", "slow"], "default": "slow"},
        "level": {"enum": [1, 2, None]},
        "options": {"type": "object", "properties": {"a": {"type": "string"}}},
        "tags": {"type": "array", "items": {"type": "string"}, "default": ["x"]},
        "either": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        "maybe": {"type": ["string", "null"]},
    },
    "required": ["path", "content", "count"],
}


def test_each_schema_type_gets_a_matching_field_with_its_flags_help_and_default():
    form = ToolArgumentsForm(SCHEMA)
    fields = form.fields
    assert isinstance(fields["path"].widget, forms.Textarea) and fields["path"].required  # minLength 1: blank is wrong
    assert not fields["content"].required and fields["content"].schema_required  # "" is a valid required string
    assert isinstance(fields["name"].widget, forms.TextInput) and fields["name"].initial == "ada"
    assert isinstance(fields["count"], forms.IntegerField) and (fields["count"].min_value, fields["count"].max_value) == (1, 10)
    assert isinstance(fields["ratio"], NumberField) and fields["ratio"].initial == 0.5
    assert isinstance(fields["append"], forms.BooleanField) and fields["append"].initial is False
    assert isinstance(fields["force"], forms.NullBooleanField)  # optional, no default: "not set" must be possible
    assert [c[0] for c in fields["mode"].choices] == ["", "fast", "slow"] and fields["mode"].initial == "slow"
    assert [c[0] for c in fields["level"].choices] == ["", "1", "2", "null"]
    assert all(isinstance(fields[n], JSONValueField) for n in ("options", "tags", "either"))
    assert json.loads(fields["tags"].initial) == ["x"]
    assert fields["maybe"].kind == "string"
    assert str(fields["path"].help_text) == "File path."


def test_typed_values_become_json_arguments_and_blank_optional_ones_are_left_out():
    form = ToolArgumentsForm(SCHEMA, {"arg-path": "notes.txt", "arg-content": "", "arg-count": "3", "arg-ratio": "2",
                                      "arg-append": "on", "arg-force": "false", "arg-mode": "fast", "arg-level": "null",
                                      "arg-options": '{"a": "b"}', "arg-tags": "", "arg-either": "7", "arg-name": ""})
    assert form.is_valid(), form.errors
    assert form.arguments() == {"path": "notes.txt", "content": "", "count": 3, "ratio": 2, "append": True,
                                "force": False, "mode": "fast", "level": None, "options": {"a": "b"}, "either": 7}


def test_bad_values_are_form_errors():
    form = ToolArgumentsForm(SCHEMA, {"arg-path": "", "arg-count": "eleven", "arg-options": "[1]", "arg-tags": "{oops",
                                      "arg-mode": "medium"})
    assert not form.is_valid()
    assert set(form.errors) == {"path", "count", "options", "tags", "mode"}
    assert "must be a JSON object" in str(form.errors["options"]) and "not valid JSON" in str(form.errors["tags"])
    raw = RawArgumentsForm({"arguments": "[1, 2]"})
    assert not raw.is_valid() and "must be a JSON object" in str(raw.errors)


def test_odd_schemas_never_break_the_form():
    for schema in (None, [], {"properties": "nope"}, {"properties": {"x": 5, "y": {"type": 7}}, "required": "x"},
                   {"properties": {f"p{i}": {"type": "string"} for i in range(500)}}):
        form = ToolArgumentsForm(schema, {})
        assert form.is_valid()
        assert isinstance(form.arguments(), dict)
    assert ToolArgumentsForm({"properties": {f"p{i}": {} for i in range(500)}}).too_large


# --- the page -----------------------------------------------------------------------------------------------------
def test_the_page_lists_the_agents_catalog_and_renders_a_tools_form(admin_client):
    agent = make_agent()
    make_agent(key="switched-off", enabled=False)
    first = page(admin_client)
    assert agent.key in first and "switched-off" not in first
    html = page(admin_client, agent=agent.key, user_id="alice", tool="write_file")
    assert '<option value="read_file"' in html and '<option value="exec"' in html
    assert 'name="arg-path"' in html and 'name="arg-content"' in html and 'type="checkbox" name="arg-append"' in html
    assert "Append to the file instead of replacing it." in html and "csrfmiddlewaretoken" in html
    assert "Edit as raw JSON" in html


def test_a_run_shows_the_scrubbed_result_and_the_audit_row_names_the_person(admin_client, admin_user):
    agent = make_agent()
    written = run(admin_client, agent, "write_file", mode="raw", arguments=json.dumps(
        {"path": "creds.txt", "content": f"aws=AKIAQYLPMN5HHHFPZAM2\ngithub={GITHUB_TOKEN}\n"}))
    assert "Result: <span id=\"pg-status\">ok</span>" in written.content.decode()

    response = run(admin_client, agent, "read_file", **{"mode": "form", "arg-path": "creds.txt", "arg-start_line": ""})
    html = response.content.decode()
    assert response.status_code == 200
    assert '<span id="pg-status">ok</span>' in html and "[REDACTED]" in html and "creds.txt" in html
    assert GITHUB_TOKEN not in html and "AKIAQYLPMN5HHHFPZAM2" not in html
    audit = ToolInvocation.objects.get(tool_name="read_file")
    assert audit.actor == f"staff:{admin_user.username}" and audit.channel == "console" and audit.user_id == "alice"
    assert audit.arguments == {"path": "creds.txt"}
    assert f"/admin/tools_app/toolinvocation/{audit.pk}/change/" in html
    assert ToolInvocation.objects.get(tool_name="write_file").actor == f"staff:{admin_user.username}"


def test_a_tool_the_policy_denies_is_explained_and_a_forced_run_is_refused_and_audited(admin_client):
    agent = make_agent()
    tool_policy_save(actor=None, policy=ToolPolicy(scope="agent", agent=agent, deny=["exec"]))
    html = page(admin_client, agent=agent.key, user_id="bob")
    assert '<option value="exec"' not in html and '<option value="read_file"' in html
    explained = page(admin_client, agent=agent.key, user_id="bob", explain="exec")
    assert "not available" in explained and f"agent {agent.key} deny" in explained
    assert "removed by" in explained and f"/admin/tools_app/agent/{agent.pk}/explain/" in explained

    refused = run(admin_client, agent, "exec", user_id="bob", mode="raw", arguments='{"command": "echo hi"}')
    html = refused.content.decode()
    assert '<span id="pg-status">denied</span>' in html and "tool exec is not available to this agent" in html
    assert f"agent {agent.key} deny" in html
    assert ToolInvocation.objects.get(tool_name="exec", status="denied").actor.startswith("staff:")


def test_explain_of_a_name_outside_the_tool_set_says_so(admin_client):
    agent = make_agent()
    html = page(admin_client, agent=agent.key, explain="no_such_tool")
    assert "There is no tool named <code>no_such_tool</code>" in html


def test_bad_input_is_shown_in_the_form_and_nothing_runs(admin_client):
    agent = make_agent()
    bad_number = run(admin_client, agent, "read_file", mode="form", **{"arg-path": "a.txt", "arg-start_line": "one"})
    assert bad_number.status_code == 200 and "Enter a whole number." in bad_number.content.decode()
    bad_json = run(admin_client, agent, "read_file", mode="raw", arguments="{not json")
    assert bad_json.status_code == 200 and "not valid JSON" in bad_json.content.decode()
    not_object = run(admin_client, agent, "read_file", mode="raw", arguments='["a.txt"]')
    assert "must be a JSON object" in not_object.content.decode()
    no_agent = admin_client.post(URL, {"agent": "nobody", "tool": "read_file", "mode": "raw", "arguments": "{}"})
    assert no_agent.status_code == 200 and "Select a valid choice" in no_agent.content.decode()
    too_long = run(admin_client, agent, "read_file", mode="raw", arguments='{"path": "a"}', wait_seconds="600")
    assert too_long.status_code == 200 and "less than or equal to 60" in too_long.content.decode()
    assert not ToolInvocation.objects.exists()
    # Schema problems the form cannot see come back from the pipeline, as the model would get them.
    invalid = run(admin_client, agent, "read_file", mode="raw", arguments='{"path": "a.txt", "extra": 1}').content.decode()
    assert '<span id="pg-status">invalid_arguments</span>' in invalid


def test_a_call_that_needs_approval_links_the_queue_and_runs_once_approved(admin_client, admin_user):
    agent = agent_update(agent=make_agent(), mode="cautious")
    asked = run(admin_client, agent, "write_file", mode="form",
                **{"arg-path": "approved.txt", "arg-content": "after a yes"}).content.decode()
    assert '<span id="pg-status">pending_approval</span>' in asked
    request = ApprovalRequest.objects.get(agent=agent)
    assert str(request.pk) in asked and "/admin/tools_app/approvalrequest/queue/" in asked

    approval_decide(approval_id=request.pk, decision="allow_once", actor=admin_user)
    # The resume form carries back exactly what the person typed (the form sent `append`'s default too).
    typed = html.unescape(re.search(r'<textarea name="arguments" hidden>(.*?)</textarea>', asked, re.DOTALL).group(1))
    assert json.loads(typed) == {"path": "approved.txt", "content": "after a yes", "append": False}
    done = run(admin_client, agent, "write_file", mode="resume", approval_id=str(request.pk), arguments=typed).content.decode()
    assert '<span id="pg-status">ok</span>' in done
    assert [p.read_text() for p in Path(agent.workspace).rglob("approved.txt")] == ["after a yes"]
    replay = run(admin_client, agent, "write_file", mode="resume", approval_id=str(request.pk), arguments=typed)
    assert replay.status_code == 200 and "already used" in replay.content.decode()
    assert ToolInvocation.objects.filter(tool_name="write_file", status="ok").get().actor == f"staff:{admin_user.username}"


def test_hostile_tool_text_is_escaped(admin_client):
    agent = make_agent()
    custom_tool_create(actor=None, name="hostile", description="<script>alert('d')</script>", agent=agent,
                       parameters={"type": "object", "properties": {"who": {
                           "type": "string", "description": "<img src=x onerror=alert(1)>",
                           "enum": ["<b>bold</b>", "plain"]}}},
                       command="echo {{.who}}")
    html = page(admin_client, agent=agent.key, tool="hostile")
    assert "<script>alert" not in html and "&lt;script&gt;alert" in html
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<b>bold</b>" not in html
    ran = run(admin_client, agent, "hostile", mode="form", **{"arg-who": "<b>bold</b>"}).content.decode()
    assert "<b>bold</b>" not in ran and "&lt;b&gt;bold&lt;/b&gt;" in ran


def test_only_staff_with_the_execute_as_agent_permission_may_run(client, django_user_model):
    agent = make_agent()
    viewer = django_user_model.objects.create_user("viewer", password="pw-viewer-1", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_agent", content_type__app_label="tools_app"))
    client.force_login(viewer)
    assert "You may look but not run" in page(client, agent=agent.key, tool="read_file")
    assert run(client, agent, "read_file", mode="raw", arguments='{"path": "x"}').status_code == 403
    plain_staff = django_user_model.objects.create_user("plain", password="pw-plain-1", is_staff=True)
    client.force_login(plain_staff)
    assert client.get(URL).status_code == 403
    outsider = django_user_model.objects.create_user("outsider", password="pw-out-1")
    client.force_login(outsider)
    assert client.get(URL).status_code == 302  # the admin's login
    assert not ToolInvocation.objects.exists()


def test_a_run_needs_the_csrf_token(admin_user):
    from django.test import Client

    agent = make_agent()
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(admin_user)
    response = strict.post(URL, {"agent": agent.key, "tool": "read_file", "mode": "raw", "arguments": '{"path": "x"}'})
    assert response.status_code == 403 and not ToolInvocation.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_run_can_wait_for_the_approval_and_then_shows_the_result(admin_client, admin_user):
    agent = agent_update(agent=make_agent(), mode="cautious")

    def approve_when_asked():
        from django.db import connection

        try:
            request = wait_until(lambda: ApprovalRequest.objects.filter(agent=agent).first(), timeout=30,
                                 message="the approval request")
            approval_decide(approval_id=request.pk, decision="allow_once", actor=admin_user)
        finally:
            connection.close()

    approver = threading.Thread(target=approve_when_asked)
    approver.start()
    html = run(admin_client, agent, "write_file", mode="raw", wait_seconds="30",
               arguments=json.dumps({"path": "waited.txt", "content": "yes"})).content.decode()
    approver.join(35)
    assert '<span id="pg-status">ok</span>' in html and "playground-approval" not in html
    assert [p.read_text() for p in Path(agent.workspace).rglob("waited.txt")] == ["yes"]
