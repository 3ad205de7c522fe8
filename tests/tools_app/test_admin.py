"""The admin screens people use: agents and tokens, the invocation audit, policies and permissions."""
import json
import re

import pytest
from rest_framework.test import APIClient

from goclaw.errors import ValidationError
from tests.factories import make_agent
from tools_app import pipeline
from tools_app.models import AgentToken, ToolPermission, ToolPolicy, ToolProfile
from tools_app.services.agents import token_issue
from tools_app.services.policy import tool_policy_save, tool_profile_save

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("url", ["/admin/", "/admin/tools_app/agent/", "/admin/tools_app/agenttoken/", "/admin/tools_app/toolinvocation/",
                                 "/admin/tools_app/storedtooloutput/", "/admin/tools_app/toolpolicy/", "/admin/tools_app/toolprofile/",
                                 "/admin/tools_app/agent/add/", "/admin/tools_app/toolpolicy/add/", "/admin/goclaw/workerheartbeat/"])
def test_admin_pages_render(admin_client, agent, url):
    assert admin_client.get(url).status_code == 200


def test_issue_token_action_shows_a_working_token_once(admin_client, agent):
    response = admin_client.post("/admin/tools_app/agent/", {"action": "issue_token", "_selected_action": [agent.pk]})
    assert response.status_code == 200
    token = re.search(r'<code class="goclaw-token">(gclw_[^<]+)</code>', response.content.decode()).group(1)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.get("/api/v1/agents/me").json()["key"] == agent.key
    change_page = admin_client.get(f"/admin/tools_app/agent/{agent.pk}/change/").content.decode()
    assert token not in change_page and token.split("_", 2)[2] not in change_page


def test_revoke_action_stops_the_token(admin_client, agent):
    token, plain = token_issue(agent=agent)
    admin_client.post("/admin/tools_app/agenttoken/", {"action": "revoke", "_selected_action": [token.pk]})
    assert AgentToken.objects.get(pk=token.pk).revoked
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert client.get("/api/v1/agents/me").status_code == 401


def test_agent_form_rejects_bad_other_config_with_a_clear_message(admin_client):
    response = admin_client.post("/admin/tools_app/agent/add/", {
        "key": "bad-config", "agent_type": "predefined", "other_config": '{"rate_limit_per_hour": -1, "nope": 1}', "enabled": "on",
        "mode": "autonomous", "tokens-TOTAL_FORMS": "0", "tokens-INITIAL_FORMS": "0"})
    page = response.content.decode()
    assert response.status_code == 200
    assert "rate_limit_per_hour: -1 is less than the minimum of 0" in page
    assert "Additional properties are not allowed" in page


def test_invocation_list_filters_by_status_and_tool(admin_client):
    agent = make_agent()
    pipeline.execute(pipeline.ToolCall(agent=agent, tool="datetime", arguments={}))
    pipeline.execute(pipeline.ToolCall(agent=agent, tool="nope", arguments={}))
    ok = admin_client.get("/admin/tools_app/toolinvocation/?status__exact=ok").content.decode()
    denied = admin_client.get("/admin/tools_app/toolinvocation/?status__exact=denied").content.decode()
    cell = '<td class="field-tool_name">{}</td>'
    assert cell.format("datetime") in ok and cell.format("nope") not in ok
    assert cell.format("nope") in denied and cell.format("datetime") not in denied
    assert admin_client.get("/admin/tools_app/toolinvocation/add/").status_code == 403


# --- admin saves go through the services: every catalog and permission check sees them at once ----------
def _catalog(client, agent=None) -> set[str]:
    url = f"/api/v1/tools?agent={agent.key}" if agent is not None else "/api/v1/tools"
    return {tool["name"] for tool in client.get(url).json()["tools"]}


def _run(api, tool="datetime") -> str:
    return api.post("/api/v1/tools/execute", data=json.dumps({"tool": tool}), content_type="application/json").json()["status"]


def test_an_agent_saved_in_the_admin_is_what_its_catalog_follows_at_once(admin_client):
    # (A catalog is also keyed by the agent's updated_at; the policies' and profiles' tests below need the service.)
    agent = make_agent(provider="openai")
    tool_policy_save(actor=None, policy=ToolPolicy(scope="provider", provider="anthropic", deny=["exec"]))
    assert "exec" in _catalog(admin_client, agent)
    response = admin_client.post(f"/admin/tools_app/agent/{agent.pk}/change/", {
        "key": agent.key, "display_name": agent.display_name, "agent_type": agent.agent_type, "provider": "anthropic",
        "model": agent.model, "workspace": agent.workspace, "mode": agent.mode, "other_config": "{}", "enabled": "on",
        "tokens-TOTAL_FORMS": "0", "tokens-INITIAL_FORMS": "0"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert "exec" not in _catalog(admin_client, agent)


def test_an_agent_deleted_in_the_admin_takes_its_tokens_and_policies_with_it(admin_client, api, agent):
    tool_policy_save(actor=None, policy=ToolPolicy(scope="agent", agent=agent, deny=["exec"]))
    assert admin_client.post(f"/admin/tools_app/agent/{agent.pk}/delete/", {"post": "yes"}).status_code == 302
    assert api.get("/api/v1/tools").status_code == 401
    assert not ToolPolicy.objects.filter(scope="agent").exists() and not AgentToken.objects.exists()


def test_a_policy_added_and_deleted_in_the_admin_changes_the_catalog_at_once(admin_client, api, agent):
    assert "exec" in _catalog(api)  # now cached in this process
    added = admin_client.post("/admin/tools_app/toolpolicy/add/", {
        "scope": "agent", "agent": agent.pk, "allow": "[]", "deny": '["exec"]', "also_allow": "[]", "enabled": "on"})
    assert added.status_code == 302
    assert "exec" not in _catalog(api)
    spec = ToolPolicy.objects.get(scope="agent", agent=agent)
    assert admin_client.post(f"/admin/tools_app/toolpolicy/{spec.pk}/delete/", {"post": "yes"}).status_code == 302
    assert "exec" in _catalog(api)


def test_a_profile_edited_in_the_admin_changes_the_catalog_of_every_policy_using_it(admin_client, api, agent):
    narrow = tool_profile_save(actor=None, profile=ToolProfile(name="narrow", tools=["datetime", "read_file"]))[0]
    tool_policy_save(actor=None, policy=ToolPolicy(scope="agent", agent=agent, profile=narrow))
    assert _catalog(api) == {"datetime", "read_file"}
    response = admin_client.post(f"/admin/tools_app/toolprofile/{narrow.pk}/change/",
                                 {"name": "narrow", "description": "", "tools": '["datetime"]'})
    assert response.status_code == 302
    assert _catalog(api) == {"datetime"}


def test_a_permission_added_and_bulk_deleted_in_the_admin_applies_to_the_next_call(admin_client, api, agent):
    # Permissions decide execution, not the catalog: the cached permission rows are what must be dropped.
    assert _run(api) == "ok"
    added = admin_client.post("/admin/tools_app/toolpermission/add/", {
        "scope": "agent", "agent": agent.pk, "tool": "datetime", "permission": "deny", "note": ""})
    assert added.status_code == 302
    assert _run(api) == "denied"
    deleted = admin_client.post("/admin/tools_app/toolpermission/", {
        "action": "delete_selected", "_selected_action": [ToolPermission.objects.get().pk], "post": "yes"})
    assert deleted.status_code == 302 and not ToolPermission.objects.exists()
    assert _run(api) == "ok"


def test_a_malformed_permission_name_is_a_form_error(admin_client, agent):
    response = admin_client.post("/admin/tools_app/toolpermission/add/", {
        "scope": "global", "tool": "bad name!", "permission": "deny", "note": ""})
    assert response.status_code == 200
    assert "tool: &#x27;bad name!&#x27; is not a valid tool name" in response.content.decode()
    assert not ToolPermission.objects.exists()


def test_policy_services_reject_malformed_specs_with_a_coded_error():
    with pytest.raises(ValidationError) as exc:
        tool_policy_save(actor=None, policy=ToolPolicy(scope="global", deny="exec"))
    assert exc.value.code == "invalid_tool_policy" and exc.value.details == ["deny: must be a list of tool names or group:<name> entries"]
    with pytest.raises(ValidationError) as exc:
        tool_policy_save(actor=None, policy=ToolPolicy(scope="agent"))  # an agent policy without an agent
    assert exc.value.code == "invalid_tool_policy"
    assert not ToolPolicy.objects.filter(scope__in=["global", "agent"]).exists()
