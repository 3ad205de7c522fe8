"""Audit payloads (arguments, errors, observe reasons, stored outputs): people who may read audit rows but not
payloads (Operators) see them masked everywhere (API, admin, console, export); with tools_app.view_payload (Auditors)
they see them as stored, and every such read is itself recorded as an AuditEvent `audit.payload_viewed`. Agents
reading their own rows are unaffected (docs/permissions.md)."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from tests.console_app.test_audit import EchoTool  # the same echoing tool the audit search tests use
from tests.factories import make_agent, make_person
from tools_app import pipeline
from tools_app.models import AuditEvent
from tools_app.registry import registry
from tools_app.selectors_audit import PAYLOAD_PREVIEW_CHARS, payload_masked

pytestmark = pytest.mark.django_db

SECRET_TAIL = "the-tail-only-auditors-read-" + "q" * 30
LONG = "plan: " + "x" * 60 + SECRET_TAIL  # longer than the preview: its tail is what masking hides


@pytest.fixture
def call():
    """One real audit row with a long argument and a stored output (the output budget cut the result)."""
    tools = registry.clone()
    tools.register(EchoTool())
    agent = make_agent(other_config={"output_budget_chars": 1000})
    outcome = pipeline.execute(pipeline.ToolCall(agent, "echo_back", {"text": LONG + "\n", "count": 40}), tools)
    assert outcome.output_id
    return agent, outcome


def _person(*groups) -> tuple[Client, object]:
    user = make_person(groups=groups)
    client = Client()
    client.force_login(user)
    return client, user


def _events(user) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(kind="audit.payload_viewed", actor=f"staff:{user.username}").order_by("created_at"))


# --- the masking function ------------------------------------------------------------------------------------------
def test_masking_keeps_keys_and_shape_and_cuts_every_string_to_a_scrubbed_preview():
    token = "ghp_" + "R8mK2pQ7vX4nL9sT3wY6zA1bC5dE0fG2hJ4k"
    masked = payload_masked({"command": LONG, "n": 3, "flag": True, "none": None, "list": ["short", LONG],
                             "nested": {"token": token}})
    assert masked["command"] == LONG[:PAYLOAD_PREVIEW_CHARS] + f"…({len(LONG)} chars)"
    assert (masked["n"], masked["flag"], masked["none"]) == (3, True, None)
    assert masked["list"][0] == "short" and SECRET_TAIL not in json.dumps(masked)
    assert token not in json.dumps(masked)  # scrubbed before it is cut: a token's head is not left behind


def test_masking_survives_whatever_nesting_an_agent_chose():
    deep: object = "bottom " + LONG
    for _ in range(5000):
        deep = {"k": [deep]}
    assert SECRET_TAIL not in json.dumps(payload_masked(deep))


# --- API -------------------------------------------------------------------------------------------------------------
def test_the_api_masks_payloads_for_operators_and_records_the_reads_of_auditors(call):
    agent, outcome = call
    operator, operator_user = _person("Operators")
    auditor, auditor_user = _person("Auditors")
    url = f"/api/v1/invocations/{outcome.invocation_id}"

    masked = operator.get(url).json()
    assert masked["arguments"]["text"].startswith(LONG[:20]) and SECRET_TAIL not in json.dumps(masked)
    assert SECRET_TAIL not in json.dumps(operator.get("/api/v1/invocations").json())
    assert _events(operator_user) == []

    full = auditor.get(url).json()
    assert full["arguments"]["text"] == LONG + "\n"
    listed = auditor.get("/api/v1/invocations").json()["results"]
    assert SECRET_TAIL in json.dumps(listed)
    detail_read, list_read = _events(auditor_user)
    assert (detail_read.target, detail_read.details) == (str(outcome.invocation_id),
                                                         {"invocations": [str(outcome.invocation_id)], "where": "api"})
    assert list_read.target == "list" and list_read.details["invocations"] == [row["id"] for row in listed]


def test_an_agent_reads_its_own_payloads_as_stored_and_no_read_is_recorded(call):
    from rest_framework.test import APIClient

    from tools_app.services.agents import token_issue

    agent, outcome = call
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_issue(agent=agent)[1]}")
    assert client.get(f"/api/v1/invocations/{outcome.invocation_id}").json()["arguments"]["text"] == LONG + "\n"
    assert not AuditEvent.objects.filter(kind="audit.payload_viewed").exists()


# --- admin -----------------------------------------------------------------------------------------------------------
def test_the_admin_masks_invocation_and_output_pages_for_operators(call):
    agent, outcome = call
    operator, operator_user = _person("Operators")
    page = operator.get(f"/admin/tools_app/toolinvocation/{outcome.invocation_id}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert LONG[:20] in html and SECRET_TAIL not in html
    output = operator.get(f"/admin/tools_app/storedtooloutput/{outcome.output_id}/change/")
    assert output.status_code == 200 and SECRET_TAIL not in output.content.decode()
    assert "needs tools_app.view_payload" in output.content.decode()
    assert _events(operator_user) == []


def test_the_admin_lets_only_payload_readers_search_the_error_text():
    from tools_app.models import ToolInvocation

    failed = ToolInvocation.objects.create(agent_key="alpha", tool_name="exec", status="error", arguments={},
                                           error=LONG)
    operator, _ = _person("Operators")
    auditor, _ = _person("Auditors")
    # a search would otherwise reveal the masked part of the error a guess at a time
    found = operator.get("/admin/tools_app/toolinvocation/", {"q": SECRET_TAIL}).content.decode()
    assert str(failed.pk) not in found
    assert str(failed.pk) in auditor.get("/admin/tools_app/toolinvocation/", {"q": SECRET_TAIL}).content.decode()


def test_the_admin_shows_payloads_to_auditors_and_records_each_read(call):
    agent, outcome = call
    auditor, auditor_user = _person("Auditors")
    assert SECRET_TAIL in auditor.get(f"/admin/tools_app/toolinvocation/{outcome.invocation_id}/change/").content.decode()
    assert SECRET_TAIL in auditor.get(f"/admin/tools_app/storedtooloutput/{outcome.output_id}/change/").content.decode()
    invocation_read, output_read = _events(auditor_user)
    assert invocation_read.details == {"invocations": [str(outcome.invocation_id)], "where": "admin"}
    assert output_read.details == {"invocations": [str(outcome.invocation_id)], "outputs": [str(outcome.output_id)],
                                   "where": "admin"}


# --- console ---------------------------------------------------------------------------------------------------------
def test_the_console_masks_payloads_for_operators(call):
    agent, outcome = call
    operator, operator_user = _person("Operators")
    detail = operator.get(f"/admin/console/audit/{outcome.invocation_id}/").content.decode()
    assert LONG[:20] in detail and SECRET_TAIL not in detail and 'id="audit-output-head"' in detail
    search = operator.get("/admin/console/audit/")
    assert search.status_code == 200 and SECRET_TAIL not in search.content.decode()
    assert str(outcome.invocation_id) in search.content.decode()
    refused = operator.get("/admin/console/audit/", {"q": "tail"})  # full text search reads the payloads
    assert refused.status_code == 400 and "view_payload" in refused.content.decode()
    assert operator.get("/admin/console/audit/export.csv").status_code == 403  # no export_audit
    assert _events(operator_user) == []


def test_the_console_shows_payloads_to_auditors_and_records_each_read(call):
    agent, outcome = call
    auditor, auditor_user = _person("Auditors")
    detail = auditor.get(f"/admin/console/audit/{outcome.invocation_id}/").content.decode()
    assert SECRET_TAIL in detail
    search = auditor.get("/admin/console/audit/", {"q": "plan"})
    assert search.status_code == 200 and str(outcome.invocation_id) in search.content.decode()
    detail_read, search_read = _events(auditor_user)
    assert detail_read.details == {"invocations": [str(outcome.invocation_id)], "outputs": [str(outcome.output_id)],
                                   "where": "console"}
    assert search_read.details == {"invocations": [str(outcome.invocation_id)], "where": "console"}


def test_an_export_is_recorded_and_carries_payloads_only_for_those_who_may_read_them(call):
    agent, outcome = call
    auditor, auditor_user = _person("Auditors")
    full = b"".join(auditor.get("/admin/console/audit/export.jsonl", {"agent": agent.key}).streaming_content)
    assert SECRET_TAIL in full.decode()
    exporter = make_person("tools_app.view_toolinvocation", "tools_app.export_audit")
    client = Client()
    client.force_login(exporter)
    masked = b"".join(client.get("/admin/console/audit/export.csv").streaming_content).decode()
    assert str(outcome.invocation_id) in masked and SECRET_TAIL not in masked
    exports = list(AuditEvent.objects.filter(kind="audit.exported").order_by("created_at"))
    assert [(e.actor, e.details["rows"], e.details["payloads"], e.details["format"]) for e in exports] == [
        (f"staff:{auditor_user.username}", 1, True, "jsonl"), (f"staff:{exporter.username}", 1, False, "csv")]
    assert exports[0].details["filters"] == {"agent": agent.key}
