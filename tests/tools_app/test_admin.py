"""The admin screens people use: agents and tokens, the invocation audit."""
import re

import pytest
from rest_framework.test import APIClient

from tests.factories import make_agent
from tools_app import pipeline
from tools_app.models import AgentToken
from tools_app.services.agents import token_issue

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
