"""The sessions API: a channel gateway with the agent's token, or a person with permission; its contract (paths,
JSON shapes, status codes) is used from outside."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from runtime_app.models import Session
from tests.factories import make_agent, make_person
from tests.runtime_app.conftest import settle
from tests.runtime_app.llm_server import call, text
from tools_app.services.agents import token_issue


def agent_api(agent) -> APIClient:
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token_issue(agent=agent)[1]}")
    return api


def person_api(*permissions) -> APIClient:
    api = APIClient()
    api.force_login(make_person(*permissions))
    return api


def test_a_gateway_starts_a_session_and_waits_for_the_reply(hosted, llm, runner):
    api = agent_api(hosted)
    created = api.post("/api/v1/sessions", {"user_id": "u-7", "channel": "telegram", "chat_id": "42"}, format="json")
    assert created.status_code == 201 and set(created.json()) == {"id", "key", "status"}
    sid = created.json()["id"]
    llm.script(call("datetime"), text("It is late."))
    reply = api.post(f"/api/v1/sessions/{sid}/messages", {"content": "what time is it?", "wait": True}, format="json")
    assert reply.status_code == 200, reply.content
    assert reply.json()["status"] == "completed" and reply.json()["reply"] == "It is late."
    detail = api.get(f"/api/v1/sessions/{sid}").json()
    assert (detail["status"], detail["user_id"], detail["channel"], detail["chat_id"]) == ("completed", "u-7", "telegram", "42")
    assert detail["messages"] == 4 and detail["parent"] is None and detail["children"] == []
    rows = api.get(f"/api/v1/sessions/{sid}/messages").json()["results"]
    assert [m["role"] for m in rows] == ["user", "assistant", "tool", "assistant"]
    assert rows[2]["tool_name"] == "datetime" and rows[2]["verdict"] == "ok" and rows[2]["invocation_id"]


def test_a_message_without_wait_is_accepted_and_runs_in_the_background(hosted, llm, runner):
    api = agent_api(hosted)
    sid = api.post("/api/v1/sessions", {}, format="json").json()["id"]
    llm.script(text("later"))
    accepted = api.post(f"/api/v1/sessions/{sid}/messages", {"content": "hi"}, format="json")
    assert accepted.status_code == 202 and accepted.json()["message_seq"] == 1
    assert settle(Session.objects.get(pk=sid)).result == "later"


def test_a_first_message_in_the_create_call_starts_the_run(hosted, llm, runner):
    llm.script(text("hello there"))
    created = agent_api(hosted).post("/api/v1/sessions", {"message": "hi"}, format="json")
    assert created.json()["status"] == "running"
    assert settle(Session.objects.get(pk=created.json()["id"])).result == "hello there"


def test_cancel_through_the_api(hosted, llm, transactional_db):
    api = agent_api(hosted)
    sid = api.post("/api/v1/sessions", {"message": "hi"}, format="json").json()["id"]  # no runner: it stays running
    cancelled = api.post(f"/api/v1/sessions/{sid}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"


def test_an_agent_sees_only_its_own_sessions(hosted, transactional_db):
    other = make_agent()
    sid = agent_api(hosted).post("/api/v1/sessions", {}, format="json").json()["id"]
    intruder = agent_api(other)
    assert intruder.get(f"/api/v1/sessions/{sid}").status_code == 404
    assert intruder.post(f"/api/v1/sessions/{sid}/messages", {"content": "x"}, format="json").status_code == 404
    assert intruder.post(f"/api/v1/sessions/{sid}/cancel").status_code == 404
    assert intruder.get("/api/v1/sessions").json()["results"] == []
    refused = intruder.post("/api/v1/sessions", {"agent": hosted.key}, format="json")
    assert refused.status_code == 403


def test_people_need_their_permissions(hosted, transactional_db):
    sid = agent_api(hosted).post("/api/v1/sessions", {}, format="json").json()["id"]
    nobody = person_api()
    assert nobody.get("/api/v1/sessions").status_code == 403
    assert nobody.get(f"/api/v1/sessions/{sid}").status_code == 403
    viewer = person_api("runtime_app.view_session", "runtime_app.view_sessionmessage")
    assert viewer.get(f"/api/v1/sessions/{sid}").status_code == 200
    assert viewer.post(f"/api/v1/sessions/{sid}/cancel").status_code == 403
    assert viewer.post("/api/v1/sessions", {"agent": hosted.key}, format="json").status_code == 403
    operator = person_api("runtime_app.view_session", "runtime_app.view_sessionmessage", "runtime_app.run_session")
    created = operator.post("/api/v1/sessions", {"agent": hosted.key, "user_id": "ops"}, format="json")
    assert created.status_code == 201
    assert Session.objects.get(pk=created.json()["id"]).created_by.startswith("staff:")
    assert operator.post("/api/v1/sessions", {}, format="json").json()["error"]["code"] == "agent_required"


@pytest.mark.parametrize("body", [{"content": ""}, {"content": 5}, {"content": "x", "wait": "yes"},
                                  {"content": "x", "extra": 1}, {}])
def test_bad_message_bodies_are_400_with_a_reason(hosted, transactional_db, body):
    api = agent_api(hosted)
    sid = api.post("/api/v1/sessions", {}, format="json").json()["id"]
    response = api.post(f"/api/v1/sessions/{sid}/messages", body, format="json")
    assert response.status_code == 400 and response.json()["error"]["code"]


def test_events_tell_the_agents_group_about_status_messages_and_tool_calls(hosted, llm, runner, published_events):
    llm.script(call("datetime"), text("done"))
    created = agent_api(hosted).post("/api/v1/sessions", {"message": "hi"}, format="json").json()
    settle(Session.objects.get(pk=created["id"]))
    kinds = {(event, tuple(sorted(m["group"] for m in messages))) for event, payload, messages in published_events
             if event.startswith("session.") and payload.get("session", payload.get("id")) == created["id"]}
    groups = ("agent." + hosted.key, "session." + created["id"], "sessions")
    assert {("session.status", tuple(sorted(groups))), ("session.message", tuple(sorted(groups))),
            ("session.tool_call", tuple(sorted(groups)))} <= kinds
