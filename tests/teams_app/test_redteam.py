"""Red-team findings on the teams code, each pinned by the behaviour users rely on: an agent reaches no team it is
not in (not even a former team's events or messages), a switched-off link stays off, a source can always withdraw
its delegation, and hostile arguments are clear tool errors, never crashes. Attacks go through the real entrypoints
(POST /api/v1/tools/execute with agent tokens) where the finding is about them, else through the services."""
from __future__ import annotations

import json
from unittest import mock

import pytest
from rest_framework.test import APIClient

from teams_app.actors import Actor
from teams_app.choices import DelegationStatus, TaskStatus
from teams_app.errors import DelegationNotAllowed, TaskNotFound
from teams_app.models import Delegation, TeamMessage, TeamTask
from teams_app.selectors_delegation import delegation_md
from teams_app.services import tasks as svc
from teams_app.services.delegation import agent_link_create, delegation_cancel, delegation_create
from teams_app.services.handoff import handoff_set
from teams_app.services.teams import team_create, team_member_remove, team_member_set, team_update
from tests.factories import make_agent
from tools_app.services.agents import token_issue

pytestmark = pytest.mark.django_db
STAFF = Actor.system("test")


def client_for(agent) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_issue(agent=agent, name='test')[1]}")
    return client


def execute(client: APIClient, tool: str, arguments: dict) -> dict:
    body = {"tool": tool, "arguments": arguments,
            "context": {"user_id": "u-1", "session_key": "s-1", "channel": "cli", "chat_id": "c-1"}}
    response = client.post("/api/v1/tools/execute", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.content
    return response.json()


@pytest.fixture
def crew(db):
    lead, alice, bob, rev = make_agent(), make_agent(), make_agent(), make_agent()
    team = team_create(actor=STAFF, name="crew", lead=lead,
                       members=[(alice, "member"), (bob, "member"), (rev, "reviewer")])
    return team, lead, alice, bob, rev


def published_groups(publish_many: mock.Mock) -> set[str]:
    return {group for call in publish_many.call_args_list for _, _, groups in call.args[0] for group in groups}


# --- hostile arguments ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("tool, arguments", [("team_tasks", {"action": "list", "team": "²"}),
                                             ("team_message", {"action": "read", "team": "١²"})])
def test_a_team_named_with_unicode_digits_is_a_clear_tool_error_not_a_crash(crew, tool, arguments):
    alice = crew[2]
    body = execute(client_for(alice), tool, arguments)
    assert body["is_error"] is True and body["status"] == "error"
    assert "not in a team named" in body["for_llm"] and "crew" in body["for_llm"], body["for_llm"]


# --- a former teammate hears nothing more ---------------------------------------------------------------------------
@pytest.mark.parametrize("change", ["removed", "now_reviewer", "now_lead"])
def test_a_retried_task_of_an_owner_who_can_no_longer_claim_opens_to_the_members(crew, change):
    team, lead, alice, bob, rev = crew
    task = svc.task_create(actor=Actor.for_agent(lead), team=team, subject="Write the report")
    svc.task_claim(actor=Actor.for_agent(alice), team=team)
    svc.task_complete(actor=Actor.for_agent(alice), task=task, result="done")
    acting_lead = lead
    if change == "removed":
        team_member_remove(actor=STAFF, team=team, agent=alice)
    elif change == "now_reviewer":
        team_member_set(actor=STAFF, team=team, agent=alice, role="reviewer")
    else:
        team = team_update(actor=STAFF, team=team, lead=alice)
        acting_lead = alice

    retried = svc.task_retry(actor=Actor.for_agent(acting_lead), task=task)
    assert retried.status == TaskStatus.PENDING and retried.owner_id is None
    claimed = svc.task_claim(actor=Actor.for_agent(bob), team=team)
    assert claimed.pk == task.pk and claimed.owner_id == bob.pk


def test_a_retry_keeps_the_previous_owner_while_it_is_still_a_member(crew):
    team, lead, alice, bob, rev = crew
    task = svc.task_create(actor=Actor.for_agent(lead), team=team, subject="Write the report")
    svc.task_claim(actor=Actor.for_agent(alice), team=team)
    svc.task_complete(actor=Actor.for_agent(alice), task=task, result="done")
    assert svc.task_retry(actor=Actor.for_agent(lead), task=task).owner_id == alice.pk
    with pytest.raises(TaskNotFound):
        svc.task_claim(actor=Actor.for_agent(bob), team=team)  # still waiting for alice


def test_a_removed_member_gets_no_events_of_the_tasks_it_once_finished(crew, django_capture_on_commit_callbacks):
    team, lead, alice, bob, rev = crew
    task = svc.task_create(actor=Actor.for_agent(lead), team=team, subject="Write the report")
    svc.task_claim(actor=Actor.for_agent(alice), team=team)
    svc.task_complete(actor=Actor.for_agent(alice), task=task, result="done")
    team_member_remove(actor=STAFF, team=team, agent=alice)
    assert TeamTask.objects.get(pk=task.pk).owner_id == alice.pk  # the board still shows who did it

    with mock.patch("goclaw.events.publish_many") as publish, django_capture_on_commit_callbacks(execute=True):
        svc.task_comment(actor=Actor.for_agent(lead), task=task, content="Customer data: see the CRM export")
    groups = published_groups(publish)
    assert f"agent.{alice.key}" not in groups
    assert f"team.{team.pk}" in groups


def test_an_answer_to_a_removed_owners_question_is_not_mailed_to_it(crew, django_capture_on_commit_callbacks):
    team, lead, alice, bob, rev = crew
    task = svc.task_create(actor=Actor.for_agent(lead), team=team, subject="Migrate billing")
    svc.task_claim(actor=Actor.for_agent(alice), team=team)
    svc.task_ask_user(actor=Actor.for_agent(alice), task=task, question="Which account?")
    svc.task_fail(actor=Actor.for_agent(alice), task=task, reason="no access")
    team_member_remove(actor=STAFF, team=team, agent=alice)

    with mock.patch("goclaw.events.publish_many") as publish, django_capture_on_commit_callbacks(execute=True):
        svc.task_answer(actor=Actor("user", "ops"), task=task, answer="Account 4411, password in the vault")
    assert not TeamMessage.objects.filter(recipient=alice).exists()
    assert f"agent.{alice.key}" not in published_groups(publish)
    assert task.comments.filter(content__startswith="Account 4411").exists()  # the answer stays on the board


# --- links and delegations ------------------------------------------------------------------------------------------
def test_a_switched_off_direct_link_is_not_bypassed_by_a_reverse_bidirectional_link(db):
    boss, worker = make_agent(), make_agent()
    agent_link_create(actor=STAFF, source=boss, target=worker, enabled=False)
    agent_link_create(actor=STAFF, source=worker, target=boss, direction="bidirectional")

    with pytest.raises(DelegationNotAllowed):
        delegation_create(source=boss, target=worker, request="Summarise the papers", user_id="alice")
    with pytest.raises(DelegationNotAllowed):
        handoff_set(actor=Actor.for_agent(boss), source=boss, target=worker, channel="tg", chat_id="42",
                    user_id="alice")
    assert worker.key not in delegation_md(boss, "alice")
    assert not Delegation.objects.exists()
    # The reverse direction is the bidirectional link's own, and still works.
    assert delegation_create(source=worker, target=boss, request="Review this", user_id="alice").status == "running"


def test_a_reverse_bidirectional_link_still_serves_when_there_is_no_direct_link(db):
    boss, worker = make_agent(), make_agent()
    agent_link_create(actor=STAFF, source=worker, target=boss, direction="bidirectional")
    assert delegation_create(source=boss, target=worker, request="Summarise", user_id="alice").status == "running"
    assert worker.key in delegation_md(boss, "alice")


def test_the_source_can_withdraw_a_delegation_whose_board_was_archived(db):
    boss, lead, member = make_agent(), make_agent(), make_agent()
    agent_link_create(actor=STAFF, source=boss, target=lead, max_concurrent=1)
    team = team_create(actor=STAFF, name="content", lead=lead, members=[(member, "member")])
    delegation = delegation_create(source=boss, target=lead, request="Write the launch post", user_id="alice")
    assert delegation.task is not None
    team_update(actor=STAFF, team=team, status="archived")

    cancelled = delegation_cancel(actor=Actor.for_agent(boss), delegation=delegation, reason="not needed")
    assert cancelled.status == DelegationStatus.CANCELLED
    assert Delegation.objects.get(pk=delegation.pk).status == DelegationStatus.CANCELLED
    assert TeamTask.objects.get(pk=delegation.task.pk).status == TaskStatus.PENDING  # the archived board is untouched
    # The link's only slot is free again.
    assert delegation_create(source=boss, target=lead, request="Something else", user_id="alice").status == "running"


@pytest.mark.django_db(transaction=True)
def test_a_source_cancelling_while_a_member_completes_the_board_task_never_deadlocks():
    """Both finish a board delegation: the completion holds the task row and then wants the delegation's, so the
    cancel must take the task row first too (before, it took the delegation's first: a deadlock, one side got a
    database error instead of an answer). The hooks below force exactly that interleaving."""
    import threading

    from django.db import connection

    from goclaw.errors import ApplicationError
    from teams_app.services import delegation as delegation_svc

    boss, lead, member = make_agent(), make_agent(), make_agent()
    agent_link_create(actor=STAFF, source=boss, target=lead)
    team = team_create(actor=STAFF, name="content", lead=lead, members=[(member, "member")])
    delegation = delegation_create(source=boss, target=lead, request="Write the launch post")
    task = svc.task_claim(actor=Actor.for_agent(member), team=team)
    task_locked, cancel_updated = threading.Event(), threading.Event()
    real_finish, real_finished = delegation_svc._finish, delegation_svc.delegation_task_finished

    def finish_then_signal(**kwargs):
        result = real_finish(**kwargs)
        cancel_updated.set()
        return result

    def finished_after_the_cancel(task):
        task_locked.set()  # task_complete holds the task row here
        cancel_updated.wait(timeout=3)  # with the fix the cancel waits for the task row, so this never comes
        return real_finished(task)

    outcomes: dict[str, object] = {}

    def run(name, fn):
        try:
            outcomes[name] = fn()
        except Exception as exc:  # the outcome is what the test asserts
            outcomes[name] = exc
        finally:
            connection.close()

    def cancel():
        task_locked.wait(timeout=10)
        return delegation_cancel(actor=Actor.for_agent(boss), delegation=delegation, reason="not needed")

    with mock.patch.object(delegation_svc, "_finish", finish_then_signal), \
            mock.patch.object(delegation_svc, "delegation_task_finished", finished_after_the_cancel):
        threads = [threading.Thread(target=run, args=("complete", lambda: svc.task_complete(
            actor=Actor.for_agent(member), task=task, result="Posted"))), threading.Thread(target=run, args=(
                "cancel", cancel))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert all(not isinstance(o, Exception) or isinstance(o, ApplicationError) for o in outcomes.values()), outcomes
    final = Delegation.objects.select_related("task").get(pk=delegation.pk)
    assert (final.status, final.task.status) in {(DelegationStatus.COMPLETED, TaskStatus.COMPLETED),
                                                 (DelegationStatus.CANCELLED, TaskStatus.CANCELLED)}


@pytest.mark.django_db(transaction=True)
def test_the_lead_changing_dependencies_while_the_blocker_completes_never_deadlocks():
    """Completing T-001 locks T-001, then the tasks waiting for it (T-003); an update of T-003's blocked_by must lock
    T-001 before T-003 too (before, it held T-003 and waited for T-001: a deadlock, one side got a database error).
    The hooks force that interleaving."""
    import threading

    from django.db import connection

    from goclaw.errors import ApplicationError

    lead, member = make_agent(), make_agent()
    team = team_create(actor=STAFF, name="build", lead=lead, members=[(member, "member")])
    first = svc.task_create(actor=Actor.for_agent(lead), team=team, subject="Schema")
    svc.task_create(actor=Actor.for_agent(lead), team=team, subject="Docs")
    second = svc.task_create(actor=Actor.for_agent(lead), team=team, subject="API", blocked_by=["T-001"])
    svc.task_claim(actor=Actor.for_agent(member), team=team, task=first)
    update_holds_task, complete_holds_blocker = threading.Event(), threading.Event()
    real_resolve, real_unblock = svc._resolve_blockers, svc._unblock_dependents

    def resolve_after_the_completion(*args, **kwargs):
        update_holds_task.set()  # task_update holds T-002 here
        complete_holds_blocker.wait(timeout=3)  # with the fix the completion waits for T-001, so this never comes
        return real_resolve(*args, **kwargs)

    def unblock_after_signal(task, actor):
        complete_holds_blocker.set()  # task_complete holds T-001 here
        return real_unblock(task, actor)

    outcomes: dict[str, object] = {}

    def run(name, fn):
        try:
            outcomes[name] = fn()
        except Exception as exc:  # the outcome is what the test asserts
            outcomes[name] = exc
        finally:
            connection.close()

    def complete():
        update_holds_task.wait(timeout=10)
        return svc.task_complete(actor=Actor.for_agent(member), task=first, result="schema.sql")

    with mock.patch.object(svc, "_resolve_blockers", resolve_after_the_completion), \
            mock.patch.object(svc, "_unblock_dependents", unblock_after_signal):
        threads = [threading.Thread(target=run, args=("update", lambda: svc.task_update(
            actor=Actor.for_agent(lead), task=second, blocked_by=["T-001"], priority=5))),
            threading.Thread(target=run, args=("complete", complete))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert all(not isinstance(o, Exception) or isinstance(o, ApplicationError) for o in outcomes.values()), outcomes
    assert TeamTask.objects.get(pk=first.pk).status == TaskStatus.COMPLETED
    assert TeamTask.objects.get(pk=second.pk).status == TaskStatus.PENDING  # released by its only blocker
