"""The issue's six attacks by a staff account with no permission (each refused, nothing done), and the three groups
the migration creates: each can do exactly its list (docs/permissions.md)."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from tests.factories import make_agent, make_person, people_group
from tests.goclaw.test_permissions_matrix import API, QUERY, _client, _send
from tools_app import pipeline
from tools_app.services.agents import agent_update

pytestmark = pytest.mark.django_db


def _post(client, url, body=None):
    return client.post(url, json.dumps(body or {}), content_type="application/json")


def _refused(response) -> bool:
    return response.status_code == 403 and response.json()["error"]["code"] == "permission_denied"


@pytest.fixture
def nobody() -> Client:
    """Logged in through the login form, like the attacker: active staff, no permission."""
    make_person(username="nobody", password="pw-nobody-12345")
    client = Client()
    assert client.login(username="nobody", password="pw-nobody-12345")
    return client


def _pending_approval(agent=None) -> str:
    """A real pending approval request of an agent (manual mode: every call waits for a person)."""
    agent = agent_update(agent=agent or make_agent(), mode="manual")
    return pipeline.execute(pipeline.ToolCall(agent=agent, tool="datetime", arguments={})).extra["approval_id"]


# --- the six attacks of the issue ----------------------------------------------------------------------------------
def test_a_staff_account_without_permissions_cannot_list_every_agents_audit_rows(nobody):
    pipeline.execute(pipeline.ToolCall(agent=make_agent(), tool="datetime", arguments={}))
    assert _refused(nobody.get("/api/v1/invocations"))


def test_a_staff_account_without_permissions_cannot_approve_another_agents_pending_call(nobody):
    from tools_app.models import ApprovalRequest

    approval_id = _pending_approval()
    assert _refused(_post(nobody, f"/api/v1/approvals/{approval_id}/decision", {"decision": "allow_once"}))
    assert ApprovalRequest.objects.get(pk=approval_id).status == "pending"


def test_a_staff_account_without_permissions_cannot_run_exec_as_an_agent(nobody):
    from tools_app.models import ToolInvocation

    agent = make_agent()
    response = _post(nobody, "/api/v1/tools/execute", {"tool": "exec", "agent": agent.key,
                                                       "arguments": {"command": "id"}})
    assert _refused(response) and not ToolInvocation.objects.filter(agent_key=agent.key).exists()


def test_a_staff_account_without_permissions_cannot_create_a_custom_tool(nobody):
    from tools_app.models import CustomTool

    tool = {"name": "backdoor", "description": "runs without approval", "parameters": {"type": "object"},
            "command": "id", "requires_approval": False}
    assert _refused(_post(nobody, "/api/v1/custom-tools/", tool)) and not CustomTool.objects.exists()


def test_a_staff_account_without_permissions_cannot_add_a_shell_as_mcp_launcher(nobody):
    from mcp_app.models import MCPLauncher

    assert _refused(_post(nobody, "/api/v1/mcp/launchers", {"command": "/bin/sh"}))
    assert not MCPLauncher.objects.filter(command="/bin/sh").exists()


def test_a_staff_account_without_permissions_cannot_export_the_configuration(nobody):
    for response in (nobody.get("/api/v1/config/export"), nobody.get("/api/v1/config/export?format=json"),
                     nobody.post("/api/v1/config/import?dry_run=1", "{}", content_type="application/json")):
        assert _refused(response)
    assert nobody.get("/admin/config/export.yaml").status_code == 403


# --- each group can do exactly its list ------------------------------------------------------------------------------
def _held(group_name: str) -> set[str]:
    return {f"{p.content_type.app_label}.{p.codename}" for p in people_group(group_name).permissions.select_related(
        "content_type")}


def _operations():
    """Every (route, method, declared permissions) of the API that staff may use."""
    for url, view_class, route in API:
        for method, permissions in (getattr(view_class, "staff_permissions", None) or {}).items():
            yield url, route, method, tuple(permissions)


def _allowed_writes(group_name: str) -> set[tuple[str, str]]:
    held = _held(group_name)
    return {(route, method) for _, route, method, needed in _operations() if method != "GET" and set(needed) <= held}


def test_operators_decide_approvals_held_changes_and_access_requests_and_change_nothing_else():
    assert _allowed_writes("Operators") == {
        ("api/v1/approvals/<uuid:pk>/decision", "POST"), ("api/v1/approvals/<uuid:pk>/cancel", "POST"),
        ("api/v1/pending-changes/<uuid:pk>/decision", "POST"), ("api/v1/mcp/access-requests/<str:id>/review", "POST"),
        # hosted agents: run_session (runtime_app/migrations/0002_people_groups.py)
        ("api/v1/sessions", "POST"), ("api/v1/sessions/<uuid:id>/messages", "POST"),
        ("api/v1/sessions/<uuid:id>/cancel", "POST")}
    held = _held("Operators")
    assert "tools_app.view_toolinvocation" in held and "tools_app.view_payload" not in held
    assert {"teams_app.view_teamtask", "tools_app.view_approvalrequest", "tools_app.view_pendingchange",
            "mcp_app.view_mcpaccessrequest", "tools_app.view_agent", "teams_app.view_team"} <= held


def test_auditors_read_everything_and_write_nothing():
    # The only non-GET operations an Auditor may use are reads sent as POST: a dry run, a search, a check.
    assert _allowed_writes("Auditors") == {
        ("api/v1/security/check-command", "POST"), ("api/v1/security/scrub", "POST"),
        ("api/v1/agents/<str:key>/memory/search", "POST"), ("api/v1/config/import", "POST")}
    held = _held("Auditors")
    assert {"tools_app.view_payload", "tools_app.export_audit", "config_app.export_configuration"} <= held
    assert not {p for p in held if p.split(".")[1].startswith(("add_", "change_", "delete_", "decide_", "review_",
                                                               "manage_", "execute_", "apply_"))}
    reads = [(route, method) for _, route, method, needed in _operations() if method == "GET"]
    assert reads and all(set(needed) <= held for _, _, method, needed in _operations() if method == "GET")


def test_administrators_hold_every_permission():
    from django.contrib.auth.models import Permission

    assert len(_held("Administrators")) == Permission.objects.count()


@pytest.mark.parametrize("group_name", ["Operators", "Auditors", "Administrators"])
def test_each_group_is_refused_exactly_where_its_permissions_end(group_name):
    client = _client(make_person(groups=[group_name]))
    held = _held(group_name)
    for url, route, method, needed in _operations():
        response = _send(client, method, url + QUERY.get((route, method), ""))
        assert (response.status_code == 403) == (not set(needed) <= held), (group_name, method, route, response.status_code)


def test_an_operator_decides_an_approval_but_cannot_build_tools_launchers_exports_or_act_as_an_agent():
    from tools_app.models import ApprovalRequest

    operator = _client(make_person(groups=["Operators"]))
    approval_id = _pending_approval()
    decided = _post(operator, f"/api/v1/approvals/{approval_id}/decision", {"decision": "allow_once"})
    assert decided.status_code == 200 and ApprovalRequest.objects.get(pk=approval_id).status == "approved"
    agent = make_agent()
    assert _refused(_post(operator, "/api/v1/custom-tools/", {"name": "t", "description": "d",
                                                             "parameters": {"type": "object"}, "command": "true"}))
    assert _refused(_post(operator, "/api/v1/mcp/launchers", {"command": "/opt/x/bin/x-mcp"}))
    assert _refused(operator.get("/api/v1/config/export"))
    assert _refused(_post(operator, "/api/v1/tools/execute", {"tool": "datetime", "agent": agent.key, "arguments": {}}))
    assert operator.get("/api/v1/invocations").status_code == 200


def test_an_auditor_reads_and_exports_but_decides_and_changes_nothing():
    from tools_app.models import ApprovalRequest

    auditor = _client(make_person(groups=["Auditors"]))
    approval_id = _pending_approval()
    assert _refused(_post(auditor, f"/api/v1/approvals/{approval_id}/decision", {"decision": "allow_once"}))
    assert ApprovalRequest.objects.get(pk=approval_id).status == "pending"
    assert auditor.get("/api/v1/config/export").status_code == 200
    applied = auditor.post("/api/v1/config/import", "{}", content_type="application/json")
    assert applied.status_code == 403 and applied.json()["error"]["code"] == "config_apply_denied"
    assert auditor.get("/admin/console/audit/export.csv").status_code == 200
    assert auditor.get("/admin/mcp_app/mcplauncher/add/").status_code == 403
    assert auditor.get("/admin/tools_app/approvalrequest/queue/").status_code == 200


def test_an_administrator_does_all_of_it():
    admin = _client(make_person(groups=["Administrators"]))
    agent = make_agent()
    created = _post(admin, "/api/v1/custom-tools/", {"name": "greet", "description": "d",
                                                     "parameters": {"type": "object"}, "command": "echo hi"})
    assert created.status_code == 201, created.content
    assert _post(admin, "/api/v1/mcp/launchers", {"command": "/opt/x/bin/x-mcp"}).status_code == 200
    assert admin.get("/api/v1/config/export").status_code == 200
    ran = _post(admin, "/api/v1/tools/execute", {"tool": "datetime", "agent": agent.key, "arguments": {}})
    assert ran.status_code == 200 and ran.json()["status"] == "ok"
    decided = _post(admin, f"/api/v1/approvals/{_pending_approval()}/decision", {"decision": "deny"})
    assert decided.status_code == 200


def test_the_groups_migration_adds_what_is_missing_and_never_removes(django_user_model):
    from importlib import import_module

    from django.apps import apps
    from django.contrib.auth.models import Permission

    operators = people_group("Operators")
    extra = Permission.objects.get(content_type__app_label="tools_app", codename="view_toolpolicy")
    operators.permissions.add(extra)  # given by hand
    dropped = Permission.objects.get(content_type__app_label="tools_app", codename="decide_approvalrequest")
    operators.permissions.remove(dropped)
    import_module("console_app.migrations.0002_people_groups").people_groups_ensure(apps)
    held = set(operators.permissions.all())
    assert extra in held and dropped in held


# --- admin actions follow the same permissions ------------------------------------------------------------------------
def test_an_admin_action_is_neither_offered_nor_run_without_its_permission():
    from tools_app.models import AgentToken

    agent = make_agent()
    viewer = _client(make_person("tools_app.view_agent"))
    page = viewer.get("/admin/tools_app/agent/")
    assert page.status_code == 200 and 'value="issue_token"' not in page.content.decode()
    viewer.post("/admin/tools_app/agent/", {"action": "issue_token", "_selected_action": [agent.pk]})
    assert not AgentToken.objects.filter(agent=agent).exists()
    issuer = _client(make_person("tools_app.view_agent", "tools_app.add_agenttoken"))
    assert 'value="issue_token"' in issuer.get("/admin/tools_app/agent/").content.decode()
    issued = issuer.post("/admin/tools_app/agent/", {"action": "issue_token", "_selected_action": [agent.pk]})
    assert issued.status_code == 200 and AgentToken.objects.filter(agent=agent).count() == 1


def test_an_operator_accepts_held_changes_in_the_admin_but_an_auditor_cannot(tmp_path):
    from tools_app.models import PendingChange

    agent = agent_update(agent=make_agent(workspace=str(tmp_path)), mode="review")
    held = pipeline.execute(pipeline.ToolCall(agent, "write_file", {"path": "notes.txt", "content": "hello"}))
    change_id = held.extra["pending_change_id"]
    auditor = _client(make_person(groups=["Auditors"]))
    assert 'value="accept"' not in auditor.get("/admin/tools_app/pendingchange/").content.decode()
    auditor.post("/admin/tools_app/pendingchange/", {"action": "accept", "_selected_action": [change_id]})
    assert PendingChange.objects.get(pk=change_id).status == "pending"
    operator = _client(make_person(groups=["Operators"]))
    operator.post("/admin/tools_app/pendingchange/", {"action": "accept", "_selected_action": [change_id]})
    assert PendingChange.objects.get(pk=change_id).status == "accepted"
    assert (tmp_path / "notes.txt").read_text() == "hello"


def test_launchers_and_credentialed_binaries_need_their_manage_permission_on_top_of_the_model_permission():
    plain = _client(make_person("mcp_app.view_mcplauncher", "mcp_app.add_mcplauncher", "mcp_app.change_mcplauncher",
                                "tools_app.view_secureclibinary", "tools_app.add_secureclibinary"))
    assert plain.get("/admin/mcp_app/mcplauncher/add/").status_code == 403
    assert plain.get("/admin/tools_app/secureclibinary/add/").status_code == 403
    manager = _client(make_person("mcp_app.view_mcplauncher", "mcp_app.add_mcplauncher", "mcp_app.manage_mcplauncher",
                                  "tools_app.view_secureclibinary", "tools_app.add_secureclibinary",
                                  "tools_app.manage_credentialed_binaries"))
    assert manager.get("/admin/mcp_app/mcplauncher/add/").status_code == 200
    assert manager.get("/admin/tools_app/secureclibinary/add/").status_code == 200


def test_access_requests_are_reviewed_in_the_admin_only_with_the_review_permission():
    from mcp_app.models import MCPAccessRequest, MCPAgentGrant
    from mcp_app.services.grants import access_request_create
    from mcp_app.services.servers import server_create

    server = server_create(actor="test", name="docs", transport="streamable-http", url="http://127.0.0.1:9/mcp",
                           allow_private_network=True)
    agent = make_agent()
    asked = access_request_create(requested_by=f"agent:{agent.key}", scope="agent", server=server, agent=agent)
    approve = {"action": "approve_selected", "_selected_action": [asked.pk], "confirm": "1", "note": "ok"}
    viewer = _client(make_person("mcp_app.view_mcpaccessrequest"))
    assert 'value="approve_selected"' not in viewer.get("/admin/mcp_app/mcpaccessrequest/").content.decode()
    viewer.post("/admin/mcp_app/mcpaccessrequest/", approve)
    assert viewer.get(f"/admin/mcp_app/mcpaccessrequest/{asked.pk}/change/").status_code == 200  # may look
    assert MCPAccessRequest.objects.get(pk=asked.pk).status == "pending" and not MCPAgentGrant.objects.exists()
    reviewer = _client(make_person("mcp_app.view_mcpaccessrequest", "mcp_app.review_mcpaccessrequest"))
    assert 'value="approve_selected"' in reviewer.get("/admin/mcp_app/mcpaccessrequest/").content.decode()
    reviewer.post("/admin/mcp_app/mcpaccessrequest/", approve)
    assert MCPAccessRequest.objects.get(pk=asked.pk).status == "approved" and MCPAgentGrant.objects.exists()


def test_the_playground_runs_a_tool_only_with_execute_as_agent():
    from tools_app.models import ToolInvocation

    agent = make_agent()
    form = {"agent": agent.key, "tool": "datetime", "user_id": "", "session_key": "", "mode": "raw",
            "arguments": "{}", "wait_seconds": "0"}
    looker = _client(make_person("tools_app.view_agent", "tools_app.change_agent"))  # changing an agent is not acting as it
    assert looker.get("/admin/console/playground/").status_code == 200
    assert looker.post("/admin/console/playground/", form).status_code == 403
    runner = _client(make_person("tools_app.view_agent", "tools_app.execute_as_agent"))
    assert runner.post("/admin/console/playground/", form).status_code == 200
    assert ToolInvocation.objects.filter(agent_key=agent.key, tool_name="datetime").count() == 1


# --- masked payloads cannot be read back through a filter -------------------------------------------------------------
def _listed(response) -> int:
    """How many rows an admin changelist shows (its `result_list` table rows)."""
    return response.content.decode().count('<tr><td class="field-') + response.content.decode().count('<tr><th class="field-')


def test_an_operator_cannot_read_a_masked_payload_back_through_admin_changelist_lookups():
    # Django's changelist accepts a lookup on any local field from the query string; whether the row comes back
    # would read the masked payload (arguments, error, observe reasons, a stored output) a character at a time.
    agent = make_agent()
    pipeline.execute(pipeline.ToolCall(agent, "datetime", {"timezone": "an argument far longer than the preview SECRET"}))
    operator = _client(make_person(groups=["Operators"]))
    assert operator.get("/admin/tools_app/toolinvocation/").status_code == 200
    for lookup in ("arguments__icontains=SECRET", "arguments__timezone__endswith=SECRET", "error__startswith=u",
                   "error__regex=.", "observe_reasons__isnull=False", "arguments=1"):
        assert operator.get(f"/admin/tools_app/toolinvocation/?{lookup}").status_code == 400, lookup
    assert operator.get("/admin/tools_app/storedtooloutput/?content__startswith=a").status_code == 400
    assert operator.get("/admin/tools_app/storedtooloutput/?content__contains=a").status_code == 400
    # the filters offered on the page still work, and people who may read payloads may filter on them
    assert operator.get("/admin/tools_app/toolinvocation/?status__exact=error").status_code == 200
    auditor = _client(make_person(groups=["Auditors"]))
    response = auditor.get("/admin/tools_app/toolinvocation/?arguments__timezone__endswith=SECRET")
    assert response.status_code == 200 and _listed(response) == 1
