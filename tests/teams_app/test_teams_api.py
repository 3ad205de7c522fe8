"""The teams API (/api/v1/teams/…): the contract shapes outside evaluations rely on, staff against agent visibility
(an agent never learns another team exists), validation errors naming the field, the staff recovery actions
recorded as the person, 409 on illegal transitions, hostile input answered with the error envelope, and list
endpoints whose query count does not grow with their rows."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from teams_app.actors import Actor
from teams_app.models import Team, TeamEvent, TeamMember, TeamTask
from teams_app.services import mailbox
from teams_app.services import tasks as task_services
from teams_app.services.teams import team_create
from tests.factories import make_agent
from tools_app.services.agents import token_issue

pytestmark = pytest.mark.django_db

PEOPLE = Actor.system("test set-up")
TASK_KEYS = {"id", "team", "subject", "description", "status", "priority", "owner", "created_by", "blocked_by",
             "result", "progress", "lock_expires_at", "question", "user_id", "channel", "chat_id", "created_at",
             "updated_at", "completed_at"}


def client_for(agent) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_issue(agent=agent, name='test')[1]}")
    return client


@pytest.fixture
def crew(db):
    """A lead, a worker, a reviewer, and an agent in no team."""
    return {name: make_agent(key=f"{name}-bot") for name in ["lead", "worker", "reviewer", "outsider"]}


@pytest.fixture
def team(crew):
    return team_create(actor=PEOPLE, name="alpha", lead=crew["lead"],
                       members=[(crew["worker"], "member"), (crew["reviewer"], "reviewer")])


@pytest.fixture
def other_team(crew):
    other_lead = make_agent()
    return team_create(actor=PEOPLE, name="bravo", lead=other_lead, members=[(crew["outsider"], "member")])


def url(team, rest: str = "") -> str:
    return f"/api/v1/teams/{team.pk}/{rest}"


def make_task(team, subject="Write the report", **fields):
    return task_services.task_create(actor=PEOPLE, team=team, subject=subject, **fields)


def error(response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}, body
    return body["error"]


# --- teams -------------------------------------------------------------------------------------------------------
def test_staff_create_a_team_and_get_the_contract_shape_with_the_lead_as_a_member(staff_api, crew):
    response = staff_api.post("/api/v1/teams/", {
        "name": "docs", "lead": crew["lead"].key, "description": "writes the docs", "lock_minutes": 30,
        "members": [{"agent": crew["worker"].key, "role": "member"},
                    {"agent": crew["reviewer"].key, "role": "reviewer"}]}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert {"id", "name", "lead", "description", "status", "members", "blocker_escalation", "lock_minutes",
            "stale_after_minutes", "review_stale_after_minutes", "created_at"} <= set(body)
    assert body["name"] == "docs" and body["lead"] == crew["lead"].key and body["status"] == "active"
    assert body["lock_minutes"] == 30 and body["description"] == "writes the docs"
    assert sorted((m["agent"], m["role"]) for m in body["members"]) == sorted([
        (crew["lead"].key, "lead"), (crew["worker"].key, "member"), (crew["reviewer"].key, "reviewer")])
    team = Team.objects.get(pk=body["id"])
    assert TeamMember.objects.get(team=team, agent=crew["lead"]).role == "lead"
    assert team.created_by == "user:staff"


@pytest.mark.parametrize("body, field", [
    ({"name": "x", "lead": "no-such-agent"}, "lead"),
    ({"name": "x", "lead": "LEAD", "members": [{"agent": "no-such-agent", "role": "member"}]}, "members"),
    ({"name": "x", "lead": "LEAD", "members": [{"agent": "LEAD", "role": "member"}]}, "members"),
    ({"name": "x", "lead": "LEAD", "members": [{"agent": "WORKER", "role": "lead"}]}, "members"),
    ({"name": "x", "lead": "LEAD", "members": [{"agent": "WORKER", "role": "boss"}]}, "members"),
    ({"name": "x", "lead": "LEAD", "members": [{"agent": "WORKER"}, {"agent": "WORKER", "role": "reviewer"}]},
     "members"),
    ({"name": "alpha", "lead": "LEAD"}, "name"),
    ({"name": "ALPHA", "lead": "LEAD"}, "name"),
    ({"name": "   ", "lead": "LEAD"}, "name"),
    ({"name": 5, "lead": "LEAD"}, "name"),
    ({"name": "x", "lead": "LEAD", "lock_minutes": 0}, "lock_minutes"),
    ({"name": "x", "lead": "LEAD", "blocker_escalation": "yes"}, "blocker_escalation"),
    ({"name": "x" * 101, "lead": "LEAD"}, "name"),
    ({"lead": "LEAD"}, "name"),
])
def test_a_bad_team_is_refused_with_a_400_naming_the_field(staff_api, crew, team, body, field):
    keys = {"LEAD": crew["lead"].key, "WORKER": crew["worker"].key}
    body = {k: keys.get(v, v) if isinstance(v, str) else v for k, v in body.items()}
    body["members"] = [{k: keys.get(v, v) for k, v in m.items()} for m in body.get("members", [])]
    response = staff_api.post("/api/v1/teams/", body, format="json")
    assert response.status_code == 400, response.content
    assert field in (error(response)["details"] or {}), response.json()
    assert Team.objects.count() == 1


def test_an_agent_cannot_create_teams(crew):
    response = client_for(crew["lead"]).post("/api/v1/teams/", {"name": "mine", "lead": crew["lead"].key},
                                             format="json")
    assert response.status_code == 403 and error(response)["code"] == "permission_denied"
    assert not Team.objects.filter(name="mine").exists()


def test_an_agent_sees_only_its_own_teams_and_another_team_is_a_404(staff_api, crew, team, other_team):
    worker = client_for(crew["worker"])
    listed = worker.get("/api/v1/teams/").json()
    assert [t["name"] for t in listed["results"]] == ["alpha"] and listed["count"] == 1
    assert worker.get(url(team)).json()["name"] == "alpha"
    make_task(other_team, subject="secret plan")
    for path in ("", "tasks/", "tasks/T-001/", "events/"):
        response = worker.get(url(other_team, path))
        assert response.status_code == 404, (path, response.content)
        assert error(response)["code"] == "team_not_found" and "bravo" not in response.content.decode()
    assert worker.get(f"/api/v1/teams/{other_team.pk + 1000}/").status_code == 404  # same answer as a real team
    assert [t["name"] for t in staff_api.get("/api/v1/teams/").json()["results"]] == ["alpha", "bravo"]


def test_staff_change_settings_lead_and_status_and_an_agent_may_not(staff_api, crew, team):
    response = staff_api.patch(url(team), {"lock_minutes": 15, "blocker_escalation": False,
                                           "description": "new", "lead": crew["worker"].key}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["lock_minutes"] == 15 and body["blocker_escalation"] is False and body["lead"] == crew["worker"].key
    roles = dict((m["agent"], m["role"]) for m in body["members"])
    assert roles[crew["worker"].key] == "lead" and roles[crew["lead"].key] == "member"
    archived = staff_api.patch(url(team), {"status": "archived"}, format="json")
    assert archived.json()["status"] == "archived"
    assert staff_api.patch(url(team), {"status": "gone"}, format="json").status_code == 400
    assert staff_api.patch(url(team), {"lead": "nobody"}, format="json").json()["error"]["details"] == {
        "lead": ["unknown agent key"]}
    refused = client_for(crew["worker"]).patch(url(team), {"status": "active"}, format="json")
    assert refused.status_code == 403
    assert Team.objects.get(pk=team.pk).status == "archived"


def test_a_team_without_tasks_is_deleted_and_one_with_tasks_must_be_archived(staff_api, crew, team, other_team):
    make_task(team)
    refused = staff_api.delete(url(team))
    assert refused.status_code == 409 and "archive" in error(refused)["message"]
    assert Team.objects.filter(pk=team.pk).exists()
    assert staff_api.delete(url(other_team)).status_code == 204
    assert not Team.objects.filter(pk=other_team.pk).exists()
    assert client_for(crew["lead"]).delete(url(team)).status_code == 403


def test_staff_add_change_and_remove_teammates(staff_api, crew, team):
    added = staff_api.post(url(team, "members/"), {"agent": crew["outsider"].key, "role": "reviewer"}, format="json")
    assert added.status_code == 200, added.content
    assert {"agent": crew["outsider"].key, "role": "reviewer"} in added.json()["members"]
    staff_api.post(url(team, "members/"), {"agent": crew["outsider"].key, "role": "member"}, format="json")
    assert TeamMember.objects.get(team=team, agent=crew["outsider"]).role == "member"
    assert staff_api.delete(url(team, f"members/{crew['outsider'].key}/")).status_code == 204
    assert not TeamMember.objects.filter(team=team, agent=crew["outsider"]).exists()
    lead = staff_api.delete(url(team, f"members/{crew['lead'].key}/"))
    assert lead.status_code == 400 and "lead" in error(lead)["message"]
    assert staff_api.delete(url(team, "members/nobody/")).status_code == 404
    assert staff_api.post(url(team, "members/"), {"agent": crew["worker"].key, "role": "lead"},
                          format="json").status_code == 400
    assert client_for(crew["lead"]).post(url(team, "members/"), {"agent": crew["outsider"].key},
                                         format="json").status_code == 403


# --- the board -----------------------------------------------------------------------------------------------------
def test_the_lead_creates_tasks_with_its_token_and_a_member_may_not(crew, team):
    lead = client_for(crew["lead"])
    first = lead.post(url(team, "tasks/"), {"subject": "Collect sources", "priority": 2,
                                            "assignee": crew["worker"].key}, format="json")
    assert first.status_code == 201, first.content
    body = first.json()
    assert TASK_KEYS <= set(body) and {"comments", "attachments", "events", "blocks"} <= set(body)
    assert body["id"] == "T-001" and body["owner"] == crew["worker"].key and body["status"] == "pending"
    assert body["created_by"] == f"agent:{crew['lead'].key}" and body["events"][0]["type"] == "created"
    second = lead.post(url(team, "tasks/"), {"subject": "Write it up", "blocked_by": ["T-001"]}, format="json")
    assert second.json()["id"] == "T-002" and second.json()["status"] == "blocked"
    assert second.json()["blocked_by"] == ["T-001"] and second.json()["owner"] is None
    refused = client_for(crew["worker"]).post(url(team, "tasks/"), {"subject": "mine"}, format="json")
    assert refused.status_code == 403 and error(refused)["code"] == "team_permission_denied"
    outsider = client_for(crew["outsider"]).post(url(team, "tasks/"), {"subject": "x"}, format="json")
    assert outsider.status_code == 404
    assert TeamTask.objects.filter(team=team).count() == 2


@pytest.mark.parametrize("body, field", [
    ({"subject": ""}, "subject"),
    ({"subject": "   "}, "subject"),
    ({"subject": "x" * 501}, "subject"),
    ({"subject": "x", "priority": "high"}, "priority"),
    ({"subject": "x", "assignee": "nobody"}, "assignee"),
    ({"subject": "x", "blocked_by": "T-001"}, "blocked_by"),
    ({"description": "no subject"}, "subject"),
])
def test_a_bad_task_is_refused_with_a_400_naming_the_field(staff_api, team, body, field):
    response = staff_api.post(url(team, "tasks/"), body, format="json")
    assert response.status_code == 400, response.content
    assert field in (error(response)["details"] or {})
    assert not TeamTask.objects.exists()


def test_unknown_dependencies_and_the_lead_as_assignee_are_clear_400s(staff_api, crew, team):
    unknown = staff_api.post(url(team, "tasks/"), {"subject": "x", "blocked_by": ["T-404"]}, format="json")
    assert unknown.status_code == 400 and "T-404" in error(unknown)["message"]
    lead = staff_api.post(url(team, "tasks/"), {"subject": "x", "assignee": crew["lead"].key}, format="json")
    assert lead.status_code == 400
    assert not TeamTask.objects.exists()


def test_the_task_list_filters_by_status_owner_and_full_text_and_pages(staff_api, crew, team):
    make_task(team, subject="Translate the manual", description="into German", assignee=crew["worker"])
    make_task(team, subject="Fix the login page", priority=5)
    make_task(team, subject="Review the German glossary")
    worker = client_for(crew["worker"])
    everything = worker.get(url(team, "tasks/")).json()
    assert everything["count"] == 3 and [t["id"] for t in everything["results"]] == ["T-002", "T-001", "T-003"]
    assert set(everything["results"][0]) >= TASK_KEYS
    german = worker.get(url(team, "tasks/"), {"q": "german"}).json()
    assert sorted(t["id"] for t in german["results"]) == ["T-001", "T-003"]
    assert [t["id"] for t in worker.get(url(team, "tasks/"), {"owner": crew["worker"].key}).json()["results"]] == [
        "T-001"]
    task_services.task_cancel(actor=PEOPLE, task=TeamTask.objects.get(team=team, number=2))
    assert [t["id"] for t in staff_api.get(url(team, "tasks/"), {"status": "cancelled"}).json()["results"]] == [
        "T-002"]
    page = staff_api.get(url(team, "tasks/"), {"limit": 1, "offset": 1}).json()
    assert page["count"] == 3 and len(page["results"]) == 1 and page["next"] and page["previous"] is not None
    assert staff_api.get(url(team, "tasks/"), {"status": "done"}).status_code == 400
    assert staff_api.get(url(team, "tasks/"), {"limit": 0}).status_code == 400


def test_a_task_detail_has_comments_attachments_events_and_what_it_blocks(crew, team):
    first = make_task(team, subject="Gather data")
    make_task(team, subject="Chart it", blocked_by=["T-001"])
    task_services.task_comment(actor=Actor.for_agent(crew["worker"]), task=first, content="on it")
    task_services.task_attach(actor=Actor.for_agent(crew["worker"]), task=first, path="data/raw.csv", size=12)
    body = client_for(crew["reviewer"]).get(url(team, "tasks/t-1/")).json()
    assert body["id"] == "T-001" and body["blocks"] == ["T-002"]
    assert [(c["author"], c["content"]) for c in body["comments"]] == [(f"agent:{crew['worker'].key}", "on it")]
    assert body["attachments"][0]["path"] == "data/raw.csv" and body["attachments"][0]["size"] == 12
    assert [e["type"] for e in body["events"]][:1] == ["created"]
    missing = client_for(crew["reviewer"]).get(url(team, "tasks/T-099/"))
    assert missing.status_code == 404 and error(missing)["code"] == "task_not_found"


# --- the staff recovery actions --------------------------------------------------------------------------------
def _in_review(team, worker) -> TeamTask:
    task = make_task(team, subject="Draft", assignee=worker)
    task = task_services.task_claim(actor=Actor.for_agent(worker), team=team, task=task)
    return task_services.task_review(actor=Actor.for_agent(worker), task=task, result="draft v1")


def _last_event(team, number: int) -> TeamEvent:
    return TeamEvent.objects.filter(team=team, task__number=number).order_by("-created_at", "-id").first()


def test_staff_cancel_and_retry_a_task_recorded_as_the_person(staff_api, team):
    make_task(team)
    cancelled = staff_api.post(url(team, "tasks/T-001/cancel/"), {"reason": "not needed"}, format="json")
    assert cancelled.status_code == 200, cancelled.content
    assert cancelled.json()["status"] == "cancelled" and cancelled.json()["id"] == "T-001"
    event = _last_event(team, 1)
    assert (event.event_type, event.actor) == ("cancelled", "user:staff")
    retried = staff_api.post(url(team, "tasks/T-001/retry/"))
    assert retried.status_code == 200 and retried.json()["status"] == "pending"
    assert (_last_event(team, 1).event_type, _last_event(team, 1).actor) == ("retried", "user:staff")


def test_an_illegal_transition_is_a_409_task_conflict_and_changes_nothing(staff_api, team):
    make_task(team)
    for action, body in (("retry", None), ("unblock", None), ("approve", {}), ("reject", {"feedback": "no"})):
        response = staff_api.post(url(team, f"tasks/T-001/{action}/"), body, format="json")
        assert response.status_code == 409, (action, response.content)
        assert error(response)["code"] == "task_conflict" and "T-001" in error(response)["message"]
    assert TeamTask.objects.get(team=team).status == "pending"
    assert list(TeamEvent.objects.filter(team=team, task__isnull=False).values_list("event_type", flat=True)) == [
        "created"]


def test_staff_assign_unblock_and_fail_tasks(staff_api, crew, team):
    make_task(team, subject="First")
    make_task(team, subject="Second", blocked_by=["T-001"])
    assigned = staff_api.post(url(team, "tasks/T-001/assign/"), {"assignee": crew["worker"].key}, format="json")
    assert assigned.json()["owner"] == crew["worker"].key
    assert staff_api.post(url(team, "tasks/T-001/assign/"), {"assignee": "nobody"},
                          format="json").json()["error"]["details"] == {"assignee": ["unknown agent key"]}
    unblocked = staff_api.post(url(team, "tasks/T-002/unblock/"))
    assert unblocked.json()["status"] == "pending" and unblocked.json()["blocked_by"] == []
    failed = staff_api.post(url(team, "tasks/T-002/fail/"), {"reason": "wrong approach"}, format="json")
    assert failed.json()["status"] == "failed"
    assert staff_api.post(url(team, "tasks/T-001/fail/"), {}, format="json").status_code == 400  # reason required
    assert {(e.event_type, e.actor) for e in TeamEvent.objects.filter(team=team, task__isnull=False)} >= {
        ("assigned", "user:staff"), ("unblocked", "user:staff"), ("failed", "user:staff")}


def test_staff_approve_reject_answer_and_comment(staff_api, crew, team):
    _in_review(team, crew["worker"])
    rejected = staff_api.post(url(team, "tasks/T-001/reject/"), {"feedback": "add sources"}, format="json")
    assert rejected.json()["status"] == "in_progress" and rejected.json()["owner"] == crew["worker"].key
    assert "add sources" in [c["content"] for c in rejected.json()["comments"]]
    task_services.task_review(actor=Actor.for_agent(crew["worker"]), task=TeamTask.objects.get(team=team))
    approved = staff_api.post(url(team, "tasks/T-001/approve/"), {"note": "good"}, format="json")
    assert approved.json()["status"] == "completed"
    second = make_task(team, subject="Ask", assignee=crew["worker"])
    second = task_services.task_claim(actor=Actor.for_agent(crew["worker"]), team=team, task=second)
    task_services.task_ask_user(actor=Actor.for_agent(crew["worker"]), task=second, question="Which format?")
    answered = staff_api.post(url(team, "tasks/T-002/answer/"), {"answer": "PDF"}, format="json")
    assert answered.status_code == 200 and answered.json()["question"] == ""
    commented = staff_api.post(url(team, "tasks/T-002/comment/"), {"content": "thanks"}, format="json")
    last = commented.json()["comments"][-1]
    assert (last["author"], last["content"], last["kind"]) == ("user:staff", "thanks", "note")
    assert {e.event_type for e in TeamEvent.objects.filter(team=team, actor="user:staff")} >= {
        "rejected", "approved", "answered", "commented"}


def test_an_agent_token_may_not_use_the_recovery_actions_even_as_the_lead(crew, team):
    make_task(team)
    lead = client_for(crew["lead"])
    for action in ("cancel", "retry", "assign", "unblock", "answer", "approve", "reject", "comment", "fail"):
        response = lead.post(url(team, f"tasks/T-001/{action}/"), {}, format="json")
        assert response.status_code == 403, (action, response.content)
    assert TeamTask.objects.get(team=team).status == "pending"


# --- events and the mailbox --------------------------------------------------------------------------------------
def test_the_event_log_is_newest_first_for_members_and_staff(staff_api, crew, team):
    make_task(team, subject="One")
    task_services.task_cancel(actor=PEOPLE, task=TeamTask.objects.get(team=team), reason="x")
    for client in (staff_api, client_for(crew["worker"])):
        body = client.get(url(team, "events/")).json()
        task_events = [(e["event_type"], e["task"]) for e in body["results"] if e["task"]]
        assert task_events == [("cancelled", "T-001"), ("created", "T-001")]
        assert {"id", "task", "event_type", "actor", "data", "created_at"} <= set(body["results"][0])
    only = staff_api.get(url(team, "events/"), {"task": "T-001"}).json()
    assert only["count"] == 2
    assert client_for(crew["outsider"]).get(url(team, "events/")).status_code == 404


def test_the_mailbox_is_for_staff_with_read_receipts(staff_api, crew, team):
    mailbox.message_send(actor=Actor.for_agent(crew["lead"]), team=team, to=crew["worker"], text="start with T-001")
    mailbox.messages_read(agent=crew["worker"], team=team)
    body = staff_api.get(url(team, "messages/")).json()
    message = body["results"][0]
    assert message["sender"] == f"agent:{crew['lead'].key}" and message["recipient"] == crew["worker"].key
    assert message["text"] == "start with T-001" and message["read_at"] is not None
    assert client_for(crew["worker"]).get(url(team, "messages/")).status_code == 403


# --- hostile input -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [
    "/api/v1/teams/abc/", "/api/v1/teams/-1/", "/api/v1/teams/99999999999999999999999/",
    "/api/v1/teams/{team}/tasks/T-99999999999/", "/api/v1/teams/{team}/tasks/..%2F..%2Fetc/",
    "/api/v1/teams/{team}/tasks/%00/", "/api/v1/teams/{team}/tasks/" + "9" * 300 + "/",
    "/api/v1/teams/{team}/members/%00/",
])
def test_malformed_ids_are_404_envelopes_never_500(staff_api, team, path):
    path = path.replace("{team}", str(team.pk))
    response = staff_api.delete(path) if "/members/" in path else staff_api.get(path)
    assert response.status_code == 404, response.content
    error(response)


def test_wrong_types_and_oversized_bodies_are_400s(staff_api, team):
    for body in ([], "text", {"subject": ["x"]}, {"subject": "x", "blocked_by": ["T-1"] * 51},
                 {"subject": "x", "description": "d" * 20_001}, {"subject": "x", "priority": True}):
        response = staff_api.post(url(team, "tasks/"), body, format="json")
        assert response.status_code == 400, (body, response.content)
        error(response)
    make_task(team)
    assert staff_api.post(url(team, "tasks/T-001/comment/"), {"content": "x" * 10_001},
                          format="json").status_code == 400
    assert staff_api.post(url(team, "tasks/T-001/comment/"), {"content": "x", "kind": "shout"},
                          format="json").status_code == 400
    assert not TeamTask.objects.get(team=team).comments.exists()


def test_options_and_nul_bytes_are_answered_without_a_server_error(staff_api, crew, team):
    make_task(team)
    for path in ("", "tasks/", "tasks/T-001/", "tasks/T-001/cancel/", "events/", "messages/", "members/"):
        response = staff_api.options(url(team, path))
        assert response.status_code == 200, (path, response.content)
    assert staff_api.get(url(team, "tasks/"), {"q": "a\x00b"}).status_code == 400
    assert staff_api.post(url(team, "tasks/"), {"subject": "a\x00b"}, format="json").status_code == 400
    assert staff_api.post(url(team, "members/"), {"agent": "a\x00b"}, format="json").status_code == 400


def test_hostile_text_comes_back_as_data_not_markup(staff_api, team):
    hostile = '<script>alert("x")</script>'
    created = staff_api.post(url(team, "tasks/"), {"subject": hostile}, format="json")
    assert created.json()["subject"] == hostile and created["Content-Type"] == "application/json"


# --- query counts -----------------------------------------------------------------------------------------------
def _count(client, path) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        assert client.get(path).status_code == 200
    # The cache-generation check runs at most every 0.5 s whatever the list holds: a loaded machine may cross that
    # between two requests, so it is not counted.
    return sum("goclaw_cachegeneration" not in q["sql"] for q in queries.captured_queries)


@pytest.mark.parametrize("who", ["agent", "staff"])
def test_the_task_list_runs_the_same_queries_for_3_and_30_tasks(who, staff_api, crew, team):
    client = client_for(crew["worker"]) if who == "agent" else staff_api
    for i in range(3):
        make_task(team, subject=f"task {i}", assignee=crew["worker"], blocked_by=["T-001"] if i else ())
    client.get(url(team, "tasks/"))  # a token's first request stamps its last use
    with_3 = _count(client, url(team, "tasks/"))
    for i in range(27):
        make_task(team, subject=f"more {i}", assignee=crew["worker"], blocked_by=["T-001", "T-002"])
    assert _count(client, url(team, "tasks/")) == with_3
    assert len(client.get(url(team, "tasks/")).json()["results"]) == 30


@pytest.mark.parametrize("who", ["agent", "staff"])
def test_the_team_list_runs_the_same_queries_for_3_and_30_teams(who, staff_api, crew):
    client = client_for(crew["worker"]) if who == "agent" else staff_api

    def add(n, start):
        for i in range(start, start + n):
            team = team_create(actor=PEOPLE, name=f"team-{i:02d}", lead=make_agent(),
                               members=[(crew["worker"], "member"), (make_agent(), "reviewer")])
            make_task(team)

    add(3, 0)
    client.get("/api/v1/teams/")
    with_3 = _count(client, "/api/v1/teams/")
    add(27, 3)
    client.get("/api/v1/teams/")  # creating teams moved cache counters: re-reading them is not part of the count
    assert _count(client, "/api/v1/teams/") == with_3
    body = client.get("/api/v1/teams/").json()
    assert len(body["results"]) == 30 and all(team["open_tasks"] == 1 and len(team["members"]) == 3
                                              for team in body["results"])
