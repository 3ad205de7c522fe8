"""Hostile or malformed input to every agent endpoint gets a clear 4xx or a model-visible result, never a 500."""
import json

import pytest

pytestmark = pytest.mark.django_db

BODIES = [
    [], "string", 42, None, {"tool": None}, {"tool": ""}, {"tool": " "}, {"tool": ["datetime"]}, {"tool": {"x": 1}},
    {"tool": "x" * 500}, {"tool": "datetime", "arguments": []}, {"tool": "datetime", "arguments": "tz"},
    {"tool": "datetime", "arguments": None}, {"tool": "datetime", "arguments": {"timezone": {"$ne": 1}}},
    {"tool": "datetime", "context": []}, {"tool": "datetime", "context": {"subagent_depth": "1"}},
    {"tool": "datetime", "context": {"subagent_depth": 10**30}}, {"tool": "datetime", "context": {"subagent_depth": True}},
    {"tool": "datetime", "context": {"allow": "datetime"}}, {"tool": "datetime", "context": {"allow": [1, 2]}},
    {"tool": "datetime", "context": {"user_id": {"a": 1}}}, {"tool": "datetime", "context": {"session_key": "s" * 1000}},
    {"tool": "datetime", "context": {"unknown": 1}}, {"tool": "datetime", "agent": 5}, {"tool": "datetime", "wait_seconds": -1},
    {"tool": "datetime", "wait_seconds": "x"}, {"tool": "datetime", "wait_seconds": 10**9},
    {"tool": "read_file", "arguments": {"path": "\x00etc/passwd"}}, {"tool": "read_file", "arguments": {"path": "a" * 10000}},
    {"tool": "write_file", "arguments": {"path": "../x", "content": "y"}}, {"tool": "exec", "arguments": {"command": "\x00"}},
    {"tool": "exec", "arguments": {"command": "echo hi", "timeout": 10**12}}, {"tool": "tool_output_get", "arguments": {"output_id": "not-a-uuid"}},
    {"tool": "search", "arguments": {"pattern": "("}}, {"tool": "glob", "arguments": {"pattern": "/etc/*"}},
    {"tool": "edit", "arguments": {"path": "nope.txt", "old_string": "a", "new_string": "b"}},
    {"tool": "datetime", "arguments": {"timezone": "../../etc/passwd"}}, {"tool": "datetime\u0000"}, {"tool": "\ud800"},
]


@pytest.mark.parametrize("body", BODIES, ids=[f"b{i}" for i in range(len(BODIES))])
def test_execute_never_answers_500(api, body):
    try:
        data = json.dumps(body)
    except (UnicodeEncodeError, ValueError):
        data = '{"tool": "\\ud800"}'
    response = api.post("/api/v1/tools/execute", data=data, content_type="application/json")
    assert response.status_code < 500, response.content[:500]
    payload = response.json()
    assert "error" in payload or payload.get("status") in {"ok", "error", "denied", "invalid_arguments", "rate_limited", "timeout", "pending_approval"}


@pytest.mark.parametrize("url", ["/api/v1/tools?depth=x", "/api/v1/tools?depth=-1", "/api/v1/tools?depth=99", "/api/v1/tools?allow=",
                                 "/api/v1/invocations?limit=abc", "/api/v1/invocations?offset=-5", "/api/v1/invocations/not-a-uuid",
                                 "/api/v1/invocations?status=%00", "/api/v1/approvals/not-a-uuid", "/api/v1/approvals?wait=abc",
                                 "/api/v1/approvals?status=%00", "/api/v1/approvals?tool_name=x%00y",
                                 "/api/v1/pending-changes?session_key=%00"])
def test_query_strings_never_answer_500(api, url):
    response = api.get(url)
    assert response.status_code < 500, response.content[:500]
    assert response["Content-Type"].startswith("application/json")


@pytest.mark.parametrize("body", ["", "null", "[]", '{"command": null}', '{"command": 5}', '{"command": "' + "a" * 200_000 + '"}'])
def test_check_command_bad_bodies(api, body):
    assert api.post("/api/v1/security/check-command", data=body, content_type="application/json").status_code < 500


def test_binary_tool_output_with_nul_bytes_is_returned_and_stored(api, agent):
    from tools_app.models import StoredToolOutput, ToolInvocation

    small = api.post("/api/v1/tools/execute", data=json.dumps({"tool": "exec", "arguments": {"command": "printf 'a\\000b'"}}),
                     content_type="application/json").json()
    assert small["status"] == "ok" and "a\x00b" in small["for_llm"]
    big = api.post("/api/v1/tools/execute", data=json.dumps({"tool": "exec", "arguments": {"command": "head -c 40000 /dev/zero"}}),
                   content_type="application/json").json()
    assert big["status"] == "ok" and "characters cut" in big["for_llm"]
    stored = StoredToolOutput.objects.get(agent_key=agent.key)
    assert len(stored.content) >= 40000 and "\x00" not in stored.content
    assert ToolInvocation.objects.filter(agent_key=agent.key, status="ok").count() == 2


def _asked(agent):
    """A real approval request: the agent in manual mode asks before running datetime."""
    from tools_app import pipeline
    from tools_app.services.agents import agent_update

    agent_update(agent=agent, mode="manual")
    return pipeline.execute(pipeline.ToolCall(agent=agent, tool="datetime", arguments={})).extra["approval_id"]


@pytest.mark.parametrize("body", ["[]", "null", '{"decision": "maybe"}', '{"decision": 5}', '{"decision": "allow_always", "rule": {"match": "glob", "pattern": 7}}',
                                  '{"decision": "allow_always", "rule": "x"}',
                                  '{"decision": "allow_once", "note": "' + "x" * 5000 + '"}', '{"decision": "deny\\u0000"}'])
def test_approval_decision_bad_bodies(staff_api, agent, body):
    approval_id = _asked(agent)
    response = staff_api.post(f"/api/v1/approvals/{approval_id}/decision", data=body, content_type="application/json")
    assert 400 <= response.status_code < 500, response.content[:300]


@pytest.mark.parametrize("body, status, code", [
    ("[]", 400, "invalid_request"), ("null", 400, "invalid_request"), ('{"arguments": []}', 400, "invalid_request"),
    ('{"arguments": "x"}', 400, "invalid_request"),
    ('{"arguments": {"timezone": 5}}', 200, "invalid_arguments"),  # in-band for the model, as on execute
    ('{"arguments": {"timezone": "UTC"}}', 409, "arguments_mismatch"),
])
def test_approval_execute_bad_bodies_leave_the_approval_unused(api, agent, django_user_model, body, status, code):
    from tools_app.models import ApprovalRequest
    from tools_app.services import approvals as svc

    approval_id = _asked(agent)
    svc.approval_decide(approval_id=approval_id, decision="allow_once",
                        actor=django_user_model.objects.create_user("ops", password="pw-ops-12345", is_staff=True))
    response = api.post(f"/api/v1/approvals/{approval_id}/execute", data=body, content_type="application/json")
    answer = response.json()
    assert (response.status_code, answer["error"]["code"] if "error" in answer else answer["status"]) == (status, code), answer
    req = ApprovalRequest.objects.get(pk=approval_id)
    assert (req.status, req.consumed_at) == ("approved", None)
    ran = api.post(f"/api/v1/approvals/{approval_id}/execute", data="{}", content_type="application/json")
    assert ran.status_code == 200 and ran.json()["status"] == "ok"
