"""The team tools as agents use them: `team_tasks` and `team_message` through POST /api/v1/tools/execute, each
agent with its own token. The board's rules live in the services (tested there); these tests hold the tool
contract: the argument shapes, T-001 identifiers in every answer, the services' sentences as error results, and
that no agent reaches a team it is not in."""
from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from rest_framework.test import APIClient

from teams_app.actors import Actor
from teams_app.errors import TeamPermissionDenied
from teams_app.models import TaskAttachment, TaskComment, TeamEvent, TeamMessage, TeamTask
from teams_app.services.teams import team_create
from tests.factories import make_agent
from tools_app.services.agents import token_issue

pytestmark = pytest.mark.django_db


def client_for(agent) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_issue(agent=agent, name='test')[1]}")
    return client


def execute(client: APIClient, tool: str, arguments: dict, context: dict | None = None) -> dict:
    body = {"tool": tool, "arguments": arguments,
            "context": context or {"user_id": "u-1", "session_key": "s-1", "channel": "cli", "chat_id": "c-1"}}
    response = client.post("/api/v1/tools/execute", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.content
    return response.json()


def ok(client: APIClient, tool: str = "team_tasks", **arguments) -> dict:
    """Call a tool that must succeed; its JSON answer."""
    body = execute(client, tool, arguments)
    assert body["status"] == "ok" and body["is_error"] is False, body["for_llm"]
    return json.loads(body["for_llm"])


def refused(client: APIClient, tool: str = "team_tasks", **arguments) -> str:
    """Call a tool that must fail as a result for the model (not an HTTP error); its sentence."""
    body = execute(client, tool, arguments)
    assert body["is_error"] is True and body["status"] == "error", body
    assert "Traceback" not in body["for_llm"]
    return body["for_llm"]


def make_team(name: str, *, members=(), reviewers=(), lead=None, description: str = ""):
    lead = lead or make_agent()
    pairs = [(m, "member") for m in members] + [(r, "reviewer") for r in reviewers]
    return team_create(actor=Actor.system("test"), name=name, lead=lead, members=pairs, description=description)


@pytest.fixture
def crew(db):
    """Team "crew": a lead, two members (alice, bob) and a reviewer, each with an API client."""
    lead, alice, bob, rev = make_agent(), make_agent(), make_agent(), make_agent()
    team = make_team("crew", lead=lead, members=[alice, bob], reviewers=[rev], description="Ship the docs")
    return SimpleNamespace(team=team, lead_agent=lead, alice_agent=alice, bob_agent=bob, rev_agent=rev,
                           lead=client_for(lead), alice=client_for(alice), bob=client_for(bob), rev=client_for(rev))


def test_both_team_tools_are_in_every_agents_catalog_in_group_teams(crew):
    tools = {t["name"]: t for t in crew.alice.get("/api/v1/tools").json()["tools"]}
    assert tools["team_tasks"]["group"] == "teams" and tools["team_message"]["group"] == "teams"
    schema = tools["team_tasks"]["parameters"]
    assert schema["additionalProperties"] is False and "claim" in schema["properties"]["action"]["enum"]


def test_full_lifecycle_lead_creates_member_claims_progresses_submits_and_reviewer_approves(crew):
    created = ok(crew.lead, action="create", subject="Write the install guide", description="Linux and macOS",
                 priority=2)
    assert created["ok"] is True and created["action"] == "create"
    assert created["task"]["id"] == "T-001" and created["task"]["status"] == "pending"
    assert created["task"]["owner"] is None
    assert "T-001" in created["message"] and "open for any member to claim" in created["message"]
    task = TeamTask.objects.get(team=crew.team, number=1)
    assert (task.user_id, task.channel, task.chat_id) == ("u-1", "cli", "c-1")

    claimed = ok(crew.alice, action="claim")  # no task_id: the best open task
    assert claimed["task"]["id"] == "T-001" and claimed["task"]["status"] == "in_progress"
    assert claimed["task"]["owner"] == crew.alice_agent.key and "T-001" in claimed["message"]

    progressed = ok(crew.alice, action="progress", task_id="T-001", percent=60, step="macOS section")
    assert progressed["task"]["progress"] == {"percent": 60, "step": "macOS section"}

    submitted = ok(crew.alice, action="review", task_id="T-001", result="Guide in docs/install.md")
    assert submitted["task"]["status"] == "in_review" and "T-001" in submitted["message"]

    approved = ok(crew.rev, action="approve", task_id="T-001", text="Clear and complete")
    assert approved["task"]["status"] == "completed" and approved["task"]["id"] == "T-001"

    task.refresh_from_db()
    assert task.status == "completed" and task.owner == crew.alice_agent and task.completed_at is not None
    kinds = set(TeamEvent.objects.filter(task=task).values_list("event_type", flat=True))
    assert {"created", "claimed", "progress", "reviewed", "approved"} <= kinds
    detail = ok(crew.bob, action="get", task_id="t-1")  # any teammate may read it, in any spelling of its id
    assert detail["task"]["id"] == "T-001" and detail["task"]["result"] == "Guide in docs/install.md"
    assert [e["type"] for e in detail["task"]["events"]][:2] == ["created", "claimed"]


def test_a_member_claims_several_tasks_at_once_and_completes_them_in_one_call(crew):
    for n in range(3):
        ok(crew.lead, action="create", subject=f"Chapter {n + 1}")
    taken = ok(crew.alice, action="claim", count=2)
    assert [t["id"] for t in taken["tasks"]] == ["T-001", "T-002"] and "2 task(s)" in taken["message"]
    assert {t["owner"] for t in taken["tasks"]} == {crew.alice_agent.key}
    assert "not both" in refused(crew.alice, action="claim", task_id="T-003", count=2)
    ok(crew.bob, action="claim", task_id="T-003")
    done = ok(crew.alice, action="complete", results=[{"task_id": "T-001", "result": "one"},
                                                      {"task_id": "t-3", "result": "not mine"},
                                                      {"task_id": "T-002", "result": "two"}])
    assert done["ok"] is False and done["message"] == "Completed 2 of 3 task(s)."
    assert [(r["task_id"], r["ok"]) for r in done["results"]] == [("T-001", True), ("T-003", False), ("T-002", True)]
    assert "only its owner" in done["results"][1]["error"]
    assert dict(TeamTask.objects.filter(team=crew.team).values_list("number", "status")) == {
        1: "completed", 2: "completed", 3: "in_progress"}
    assert "not both" in refused(crew.alice, action="complete", task_id="T-001", result="x",
                                 results=[{"task_id": "T-002", "result": "y"}])


def test_a_task_created_with_an_assignee_is_claimed_by_that_member_only(crew):
    created = ok(crew.lead, action="create", subject="Fix the footer", assignee=crew.bob_agent.key)
    assert created["task"]["owner"] == crew.bob_agent.key and crew.bob_agent.key in created["message"]
    refused(crew.alice, action="claim", task_id="T-001")
    assert ok(crew.bob, action="claim", task_id="T-001")["task"]["status"] == "in_progress"


def test_blocked_by_chain_unblocks_step_by_step_as_blockers_complete(crew):
    ok(crew.lead, action="create", subject="Schema")
    second = ok(crew.lead, action="create", subject="API", blocked_by=["T-001"])
    third = ok(crew.lead, action="create", subject="Client", blocked_by=["T-002"])
    assert second["task"]["status"] == "blocked" and second["task"]["blocked_by"] == ["T-001"]
    assert "T-001" in second["message"] and third["task"]["status"] == "blocked"

    refused(crew.alice, action="claim", task_id="T-002")  # blocked: not claimable yet
    assert ok(crew.alice, action="claim")["task"]["id"] == "T-001"
    ok(crew.alice, action="complete", task_id="T-001", result="schema.sql")
    statuses = dict(TeamTask.objects.filter(team=crew.team).values_list("number", "status"))
    assert statuses == {1: "completed", 2: "pending", 3: "blocked"}

    assert ok(crew.bob, action="claim")["task"]["id"] == "T-002"
    ok(crew.bob, action="complete", task_id="T-002", result="api.py")
    assert ok(crew.alice, action="get", task_id="T-003")["task"]["status"] == "pending"


def test_role_refusals_are_error_results_carrying_the_services_sentence(crew):
    with pytest.raises(TeamPermissionDenied) as expected:
        from teams_app.services.tasks import task_create

        task_create(actor=Actor.for_agent(crew.alice_agent), team=crew.team, subject="Sneaky")
    assert refused(crew.alice, action="create", subject="Sneaky") == expected.value.message
    assert not TeamTask.objects.filter(subject="Sneaky").exists()

    ok(crew.lead, action="create", subject="Draft")
    assert refused(crew.lead, action="claim", task_id="T-001")  # the lead never claims
    ok(crew.alice, action="claim", task_id="T-001")
    for client, arguments in [
        (crew.bob, {"action": "approve", "task_id": "T-001"}),           # members do not approve
        (crew.alice, {"action": "cancel", "task_id": "T-001"}),          # only the lead cancels
        (crew.rev, {"action": "claim", "task_id": "T-001"}),             # already claimed
        (crew.bob, {"action": "complete", "task_id": "T-001", "result": "x"}),  # not the owner
        (crew.alice, {"action": "broadcast_everything"}),                # not an action at all
    ]:
        body = execute(client, "team_tasks", arguments)
        assert body["is_error"] is True and body["for_llm"].strip(), arguments
    assert TeamTask.objects.get(team=crew.team, number=1).status == "in_progress"


def test_illegal_transitions_explain_themselves(crew):
    ok(crew.lead, action="create", subject="Draft")
    message = refused(crew.rev, action="approve", task_id="T-001")  # pending: nothing to approve yet
    assert "T-001" in message
    assert "T-009" in refused(crew.alice, action="get", task_id="T-009")
    assert "subject" in refused(crew.lead, action="create")
    assert "result" in refused(crew.alice, action="complete", task_id="T-001")


def test_reject_sends_the_work_back_with_feedback_and_retry_reopens_a_completed_task(crew):
    ok(crew.lead, action="create", subject="Logo")
    ok(crew.alice, action="claim", task_id="T-001")
    ok(crew.alice, action="review", task_id="T-001", result="logo.svg")
    rejected = ok(crew.lead, action="reject", task_id="T-001", text="Use the brand colours")
    assert rejected["task"]["status"] == "in_progress" and rejected["task"]["owner"] == crew.alice_agent.key
    assert TaskComment.objects.filter(task__team=crew.team, content__contains="brand colours").exists()
    assert "text" in refused(crew.lead, action="reject", task_id="T-001")

    ok(crew.alice, action="complete", task_id="T-001", result="logo-v2.svg")
    retried = ok(crew.lead, action="retry", task_id="T-001")
    assert retried["task"]["status"] == "pending" and "T-001" in retried["message"]


def test_lead_cancels_updates_and_assigns_and_cycles_are_refused(crew):
    ok(crew.lead, action="create", subject="One")
    ok(crew.lead, action="create", subject="Two", blocked_by=["T-001"])
    cycle = refused(crew.lead, action="update", task_id="T-001", blocked_by=["T-002"])
    assert "T-001" in cycle and "T-002" in cycle
    updated = ok(crew.lead, action="update", task_id="T-002", subject="Two, renamed", priority=5)
    assert updated["task"]["subject"] == "Two, renamed" and updated["task"]["priority"] == 5
    assigned = ok(crew.lead, action="assign", task_id="T-001", assignee=crew.bob_agent.key)
    assert assigned["task"]["owner"] == crew.bob_agent.key
    outsider = make_agent()
    assert crew.team.name in refused(crew.lead, action="assign", task_id="T-001", assignee=outsider.key)
    cancelled = ok(crew.lead, action="cancel", task_id="T-002", text="Not needed")
    assert cancelled["task"]["status"] == "cancelled"


def test_comments_blockers_and_ask_user(crew):
    ok(crew.lead, action="create", subject="Benchmarks")
    ok(crew.alice, action="claim", task_id="T-001")
    ok(crew.alice, action="comment", task_id="T-001", text="Halfway there")
    asked = ok(crew.alice, action="ask_user", task_id="T-001", text="Which machine should I use?")
    assert asked["task"]["question"] == "Which machine should I use?"
    blocked = ok(crew.alice, action="comment", task_id="T-001", text="No machine available", kind="blocker")
    assert blocked["task"]["status"] == "failed" and "T-001" in blocked["message"]
    kinds = list(TaskComment.objects.filter(task__team=crew.team).order_by("id").values_list("kind", flat=True))
    assert kinds == ["note", "blocker"]


def test_list_shows_active_tasks_first_by_priority_and_at_most_thirty(crew):
    for n in range(33):
        ok(crew.lead, action="create", subject=f"Chore {n}", priority=1 if n == 32 else 0)
    listing = ok(crew.alice, action="list")
    assert listing["count"] == 30 and len(listing["tasks"]) == 30 and "more" in listing
    assert listing["tasks"][0]["id"] == "T-033"  # the highest priority first
    assert all(t["id"].startswith("T-") for t in listing["tasks"])

    ok(crew.alice, action="claim", task_id="T-001")
    ok(crew.alice, action="complete", task_id="T-001", result="done")
    done = ok(crew.alice, action="list", status="completed")
    assert [t["id"] for t in done["tasks"]] == ["T-001"] and done["count"] == 1
    assert "T-001" not in [t["id"] for t in ok(crew.alice, action="list", status="active")["tasks"]]


def test_search_finds_tasks_by_words_of_subject_and_description(crew):
    ok(crew.lead, action="create", subject="Rotate credentials", description="the staging database password")
    ok(crew.lead, action="create", subject="Translate the README")
    found = ok(crew.bob, action="search", query="database")
    assert [t["id"] for t in found["tasks"]] == ["T-001"] and found["count"] == 1
    assert ok(crew.bob, action="search", query="zebra")["count"] == 0


def test_an_agent_of_team_a_can_neither_see_nor_touch_team_b_tasks(crew):
    other_lead = make_agent()
    outsider_team = make_team("vault", lead=other_lead, members=[make_agent()])
    b_lead = client_for(other_lead)
    ok(b_lead, action="create", subject="Secret launch plan", description="codename aurora")

    for arguments in [
        {"action": "get", "task_id": "T-001"},
        {"action": "claim", "task_id": "T-001"},
        {"action": "claim"},
        {"action": "comment", "task_id": "T-001", "text": "mine now"},
        {"action": "list", "team": "vault"},
        {"action": "get", "task_id": "T-001", "team": "vault"},
        {"action": "search", "query": "aurora"},
        {"action": "search", "query": "aurora", "team": str(outsider_team.pk)},
    ]:
        body = execute(crew.alice, "team_tasks", arguments)
        assert "Secret launch plan" not in body["for_llm"] and "codename" not in body["for_llm"], arguments
        if arguments["action"] in ("get", "claim", "comment") or "team" in arguments:
            assert body["is_error"] is True, arguments
    assert ok(crew.alice, action="list")["tasks"] == []  # crew's own board is empty
    b_task = TeamTask.objects.get(team=outsider_team)
    assert b_task.status == "pending" and b_task.owner is None and not b_task.comments.exists()
    assert refused(crew.alice, "team_message", action="send", to=other_lead.key, text="hi")
    assert not TeamMessage.objects.filter(recipient=other_lead).exists()


def test_an_agent_in_several_teams_must_name_the_team(crew):
    make_team("second", members=[crew.alice_agent])
    message = refused(crew.alice, action="list")
    assert "crew" in message and "second" in message
    assert ok(crew.alice, action="list", team="crew")["team"] == "crew"
    assert ok(crew.alice, action="list", team="second")["team"] == "second"
    assert refused(crew.alice, "team_message", action="send", to=crew.bob_agent.key, text="hi")
    assert ok(crew.alice, "team_message", action="send", to=crew.bob_agent.key, text="hi", team="crew")


def test_an_agent_in_no_team_is_told_so(db):
    loner = make_agent()
    client = client_for(loner)
    assert f"agent {loner.key} is not a member of any team" in refused(client, action="list")
    assert f"agent {loner.key} is not a member of any team" in refused(client, "team_message", action="read")


def test_mailbox_send_broadcast_and_read_with_receipts(crew):
    ok(crew.lead, action="create", subject="Review the roadmap")
    sent = ok(crew.lead, "team_message", action="send", to=crew.alice_agent.key, text="Start with T-001",
              task_id="T-001")
    assert sent["to"] == crew.alice_agent.key and "T-001" in sent["message"]
    broadcast = ok(crew.lead, "team_message", action="broadcast", text="Standup at 10")
    assert broadcast["count"] == 3  # alice, bob and the reviewer; never the sender

    inbox = ok(crew.alice, "team_message", action="read")
    assert inbox["count"] == 2
    first, second = inbox["messages"]
    assert first["from"] == f"agent:{crew.lead_agent.key}" and first["kind"] == "direct"
    assert first["text"] == "Start with T-001" and first["task"] == "T-001" and first["sent_at"]
    assert second["kind"] == "broadcast" and second["text"] == "Standup at 10" and second["task"] is None
    assert ok(crew.alice, "team_message", action="read")["count"] == 0  # read receipts: nothing new
    assert not TeamMessage.objects.filter(recipient=crew.alice_agent, read_at__isnull=True).exists()
    assert TeamMessage.objects.filter(recipient=crew.bob_agent, read_at__isnull=True).count() == 1

    assert refused(crew.alice, "team_message", action="broadcast", text="Everyone, listen")  # lead only
    assert refused(crew.alice, "team_message", action="send", to=crew.alice_agent.key, text="me")
    assert "argument to" in refused(crew.alice, "team_message", action="send", text="nobody")
    assert ok(crew.alice, "team_message", action="send", to=crew.lead_agent.key, text="On it")
    assert ok(crew.lead, "team_message", action="read")["messages"][0]["text"] == "On it"


def test_attach_stores_a_workspace_file_and_refuses_paths_outside_it(crew):
    ok(crew.lead, action="create", subject="Report")
    ok(crew.alice, action="claim", task_id="T-001")
    report = crew.alice_agent.workspace_path / "out" / "report.md"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("# Findings\n")
    attached = ok(crew.alice, action="attach", task_id="T-001", path="out/report.md")
    assert "out/report.md" in attached["message"]
    row = TaskAttachment.objects.get(task__team=crew.team)
    assert (row.path, row.size, row.created_by) == ("out/report.md", 11, f"agent:{crew.alice_agent.key}")

    for path in ("../x", "../../etc/passwd", "/etc/passwd", str(report), "out/missing.md", "out"):
        assert refused(crew.alice, action="attach", task_id="T-001", path=path), path
    assert TaskAttachment.objects.filter(task__team=crew.team).count() == 1


def test_hostile_arguments_are_refused_before_the_board(crew):
    for arguments in [
        {"action": "create", "subject": "x" * 501},
        {"action": "create", "subject": "ok", "description": "d" * 20_001},
        {"action": "create", "subject": "ok", "owner": "me"},  # not an argument
        {"action": "create", "subject": 5},
        {"action": "progress", "task_id": "T-001", "percent": 101},
        {"action": "list", "status": "everything"},
        {"action": "create", "subject": "ok", "blocked_by": "T-001"},
    ]:
        body = execute(crew.lead, "team_tasks", arguments)
        assert body["status"] == "invalid_arguments" and body["is_error"] is True, arguments
    assert "store" in refused(crew.lead, action="create", subject="nul\x00byte")
    assert not TeamTask.objects.filter(team=crew.team).exists()
