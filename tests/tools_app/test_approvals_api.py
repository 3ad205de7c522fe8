"""The approval HTTP contract: 202 pending, long-poll, staff decision, exactly-once resume, wait_seconds."""
import json
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from tests.factories import make_agent
from tools_app.models import ApprovalRequest, ApprovalRule
from tools_app.services import approvals as svc
from tools_app.services.agents import agent_update, token_issue

pytestmark = pytest.mark.django_db


def post(client, url, body=None):
    return client.post(url, data=json.dumps(body or {}), content_type="application/json")


def cautious(agent):
    return agent_update(agent=agent, mode="cautious")


def ask(api, command="echo approved-run", **extra):
    response = post(api, "/api/v1/tools/execute", {"tool": "exec", "arguments": {"command": command}, **extra})
    assert response.status_code == 202, response.content
    return response.json()


def test_an_ask_answers_202_with_the_approval_id_and_deadline(api, agent):
    cautious(agent)
    body = ask(api)
    assert body["status"] == "pending_approval" and body["is_error"] is False
    req = ApprovalRequest.objects.get(pk=body["approval_id"])
    assert body["expires_at"] == req.expires_at.isoformat()
    detail = api.get(f"/api/v1/approvals/{req.pk}").json()
    assert (detail["status"], detail["tool_name"], detail["agent"]) == ("pending", "exec", agent.key)
    assert "$ echo approved-run" in detail["summary"] and detail["details"]["simple_commands"] == ["echo approved-run"]


def test_staff_decide_and_the_agent_runs_it_exactly_once(api, staff_api, agent):
    cautious(agent)
    approval_id = ask(api)["approval_id"]
    assert post(api, f"/api/v1/approvals/{approval_id}/execute").status_code == 409  # not approved yet
    decided = post(staff_api, f"/api/v1/approvals/{approval_id}/decision", {"decision": "allow_once", "note": "ok"})
    assert decided.status_code == 200 and decided.json()["status"] == "approved" and decided.json()["decided_by"] == "staff"
    again = post(staff_api, f"/api/v1/approvals/{approval_id}/decision", {"decision": "deny"})
    assert again.status_code == 409 and again.json()["error"]["code"] == "approval_already_decided"

    result = post(api, f"/api/v1/approvals/{approval_id}/execute")
    assert result.status_code == 200
    assert result.json()["status"] == "ok" and "approved-run" in result.json()["for_llm"]
    replay = post(api, f"/api/v1/approvals/{approval_id}/execute")
    assert replay.status_code == 409 and replay.json()["error"]["code"] == "approval_already_used"


def test_substituted_arguments_are_refused(api, staff_api, agent):
    cautious(agent)
    approval_id = ask(api)["approval_id"]
    post(staff_api, f"/api/v1/approvals/{approval_id}/decision", {"decision": "allow_once"})
    swapped = post(api, f"/api/v1/approvals/{approval_id}/execute", {"arguments": {"command": "touch pwned"}})
    assert swapped.status_code == 409 and swapped.json()["error"]["code"] == "arguments_mismatch"
    assert not (agent.workspace_path / "pwned").exists()


def test_agents_cannot_decide_nor_see_other_agents_approvals(api, agent):
    cautious(agent)
    approval_id = ask(api)["approval_id"]
    assert post(api, f"/api/v1/approvals/{approval_id}/decision", {"decision": "allow_once"}).status_code == 403
    other = cautious(make_agent())
    other_api = APIClient()
    other_api.credentials(HTTP_AUTHORIZATION=f"Bearer {token_issue(agent=other)[1]}")
    assert other_api.get(f"/api/v1/approvals/{approval_id}").status_code == 404
    assert post(other_api, f"/api/v1/approvals/{approval_id}/execute").status_code == 404
    assert other_api.get("/api/v1/approvals").json()["results"] == []
    assert [a["id"] for a in api.get("/api/v1/approvals?status=pending").json()["results"]] == [approval_id]


def test_a_decision_after_expiry_is_410(api, staff_api, agent):
    cautious(agent)
    approval_id = ask(api)["approval_id"]
    ApprovalRequest.objects.filter(pk=approval_id).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = post(staff_api, f"/api/v1/approvals/{approval_id}/decision", {"decision": "allow_once"})
    assert response.status_code == 410 and response.json()["error"]["code"] == "approval_expired"
    assert api.get(f"/api/v1/approvals/{approval_id}").json()["status"] == "expired"


def test_allow_always_with_an_explicit_prefix_over_the_api(api, staff_api, agent):
    cautious(agent)
    approval_id = ask(api, "echo release v1")["approval_id"]
    body = {"decision": "allow_always", "rule": {"match": "prefix", "pattern": "echo release ", "expires_in_seconds": 3600}}
    assert post(staff_api, f"/api/v1/approvals/{approval_id}/decision", body).status_code == 200
    rule = ApprovalRule.objects.get()
    assert rule.expires_at is not None and rule.pattern == "echo release "
    ran = post(api, "/api/v1/tools/execute", {"tool": "exec", "arguments": {"command": "echo release v2"}})
    assert ran.status_code == 200 and ran.json()["status"] == "ok"


def test_invalid_decisions_and_wait_values_are_400(api, staff_api, agent):
    cautious(agent)
    approval_id = ask(api)["approval_id"]
    assert post(staff_api, f"/api/v1/approvals/{approval_id}/decision", {"decision": "maybe"}).status_code == 400
    too_long = post(api, "/api/v1/tools/execute", {"tool": "datetime", "wait_seconds": 600})
    assert too_long.status_code == 400 and "wait_seconds" in too_long.json()["error"]["details"]


def test_the_agent_cancels_its_request(api, agent):
    cautious(agent)
    approval_id = ask(api)["approval_id"]
    assert post(api, f"/api/v1/approvals/{approval_id}/cancel").json()["status"] == "cancelled"
    assert post(api, f"/api/v1/approvals/{approval_id}/cancel").status_code == 409


def test_held_changes_are_listed_and_accepted_by_staff(api, staff_api, agent):
    agent_update(agent=agent, mode="review")
    held = post(api, "/api/v1/tools/execute", {"tool": "write_file", "arguments": {"path": "r.txt", "content": "hi"}})
    assert held.status_code == 202
    change_id = held.json()["pending_change_id"]
    assert [c["id"] for c in api.get("/api/v1/pending-changes").json()["results"]] == [change_id]
    assert post(api, f"/api/v1/pending-changes/{change_id}/decision", {"decision": "accept"}).status_code == 403
    accepted = post(staff_api, f"/api/v1/pending-changes/{change_id}/decision", {"decision": "accept"})
    assert accepted.json()["status"] == "accepted" and (agent.workspace_path / "r.txt").read_text() == "hi"


# --- with threads: committed rows, real waiting ---------------------------------------------------
def _clients():
    from django.contrib.auth import get_user_model

    agent = cautious(make_agent())
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token_issue(agent=agent)[1]}")
    staff = get_user_model().objects.create_user("ops", password="pw-ops-12345", is_staff=True)
    return agent, api, staff


def _decide_when_requested(staff, decision, delay=0.3):
    """A person somewhere else: waits for the request to appear, then decides it."""
    def person():
        try:
            for _ in range(100):
                req = ApprovalRequest.objects.filter(status="pending").first()
                if req:
                    time.sleep(delay)
                    svc.approval_decide(approval_id=req.pk, decision=decision, actor=staff)
                    return
                time.sleep(0.05)
        finally:
            connection.close()

    thread = threading.Thread(target=person)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_the_long_poll_returns_when_a_person_decides():
    agent, api, staff = _clients()
    approval_id = ask(api)["approval_id"]
    thread = _decide_when_requested(staff, "allow_once")
    body = api.get(f"/api/v1/approvals/{approval_id}?wait=30").json()
    thread.join()
    assert body["status"] == "approved"  # the poll answered with the decision, not with the 30 s deadline's "pending"


@pytest.mark.django_db(transaction=True)
def test_wait_seconds_runs_the_call_once_approved_within_the_wait():
    agent, api, staff = _clients()
    thread = _decide_when_requested(staff, "allow_once")
    response = post(api, "/api/v1/tools/execute", {"tool": "exec", "arguments": {"command": "echo waited"}, "wait_seconds": 30})
    thread.join()
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok" and "waited" in body["for_llm"] and body["approval_id"]
    assert ApprovalRequest.objects.get(pk=body["approval_id"]).consumed_at is not None


@pytest.mark.django_db(transaction=True)
def test_wait_seconds_reports_a_denial_as_denied():
    agent, api, staff = _clients()
    thread = _decide_when_requested(staff, "deny")
    response = post(api, "/api/v1/tools/execute", {"tool": "exec", "arguments": {"command": "touch nope"}, "wait_seconds": 30})
    thread.join()
    assert response.status_code == 200 and response.json()["status"] == "denied"
    assert not (agent.workspace_path / "nope").exists()


@pytest.mark.django_db(transaction=True)
def test_wait_seconds_still_pending_answers_202():
    agent, api, staff = _clients()
    response = post(api, "/api/v1/tools/execute", {"tool": "exec", "arguments": {"command": "echo slow"}, "wait_seconds": 1})
    assert response.status_code == 202 and response.json()["status"] == "pending_approval"
