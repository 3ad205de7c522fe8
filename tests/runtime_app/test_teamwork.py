"""Hosted teammates: a task assigned or a mailbox message wakes a hosted member in its team session, it works the board
through the pipeline, and its result reaches the lead's session (`teammate:`); the lead's answer is the run's result.
External members are left alone; a handoff's first message reaches a hosted target; stalls are escalated once; a
person stops a member from the board; TEAM.md only for the lead."""
from __future__ import annotations

import json
import re
import time
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from runtime_app.choices import MessageRole, SessionOrigin, SessionStatus
from runtime_app.models import Session, SessionMessage
from runtime_app.prompt import system_prompt
from runtime_app.services.sessions import (run_end, run_record_reply, session_claim, session_create,
                                           session_message_post)
from runtime_app.teamwork import members_stuck_sweep
from teams_app.actors import Actor
from teams_app.choices import TaskStatus, TeamEventType
from teams_app.models import TeamEvent, TeamMessage, TeamTask
from teams_app.services.delegation import agent_link_create
from teams_app.services.handoff import handoff_set
from teams_app.services.mailbox import message_broadcast, message_send
from teams_app.services.tasks import task_claim, task_complete, task_create
from teams_app.services.teams import team_create
from tests.factories import make_agent, make_person
from tests.runtime_app.conftest import make_provider, messages_of, settle
from tests.runtime_app.llm_server import Reply, call, text

S = SessionStatus
SYSTEM = Actor.system("test")
TASK_ID = re.compile(r"\[Team task (T-[0-9]+) assigned to you by ")


def wait_until(check, seconds: float = 60, about=lambda: ""):
    """The first truthy value of `check()` (polled), or the test fails naming what it waited for (and `about()`)."""
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            assert value, f"still waiting for {check.__doc__ or check} {about()}"
            return value
        time.sleep(0.05)


def said(body: dict) -> str:
    return "\n".join(m["content"] for m in body["messages"] if m["role"] == "user" and isinstance(m["content"], str))


def member_turn(body: dict, result: str) -> Reply:
    """A member's model: claim the task it was told about, complete it with `result`, then say the result."""
    task_id = TASK_ID.search(said(body)).group(1)
    last = body["messages"][-1]
    if last["role"] == "user":
        return call("team_tasks", action="claim", task_id=task_id)
    if last["role"] == "tool" and '"action":"claim"' in last["content"]:
        return call("team_tasks", action="complete", task_id=task_id, result=result)
    return text(result)


def team_of(lead, *members, name="research"):
    return team_create(actor=SYSTEM, name=name, lead=lead, members=[(m, "member") for m in members])


def team_sessions(agent):
    return list(Session.objects.filter(agent=agent, origin=SessionOrigin.TEAM).order_by("created_at"))


def first_message(session) -> str:
    return SessionMessage.objects.filter(session=session).order_by("seq").first().content


# --- the whole round: a hosted lead, two hosted members -------------------------------------------------------------
def test_a_lead_posts_two_tasks_that_two_hosted_members_claim_and_complete_and_answers_from_their_results(
        llm, provider, runner):
    lead = make_agent(provider=provider.name, model="lead")
    alice = make_agent(provider=provider.name, model="alice")
    bob = make_agent(provider=provider.name, model="bob")
    team = team_of(lead, alice, bob)
    findings = {"alice": "Alice found that A holds", "bob": "Bob found that B fails"}

    def lead_turn(body):
        heard = said(body)
        got = [f for f in findings.values() if f in heard]
        if len(got) == 2:
            return text("Final answer: " + " / ".join(sorted(got)))
        if "teammate:" in heard:
            return text("One result is in; waiting for the other.")
        if body["messages"][-1]["role"] == "tool":
            return text("I posted T-001 and T-002; my teammates are on it.")
        return Reply(tool_calls=[
            ("team_tasks", json.dumps({"action": "create", "subject": "Research A", "description": "Does A hold?",
                                       "assignee": alice.key})),
            ("team_tasks", json.dumps({"action": "create", "subject": "Research B", "description": "Does B hold?",
                                       "assignee": bob.key}))])

    llm.responder = lambda body: {"lead": lead_turn, "alice": lambda b: member_turn(b, findings["alice"]),
                                  "bob": lambda b: member_turn(b, findings["bob"])}[body["model"]](body)
    asked = session_create(agent=lead, created_by="test", message="Do A and B hold?", user_id="u-1",
                           channel="web", chat_id="c-1")

    def final():
        """the lead's final answer"""
        current = Session.objects.get(pk=asked.pk)
        return current if current.status == S.COMPLETED and current.result.startswith("Final answer") else None

    answered = wait_until(final, about=lambda: [(m.seq, m.role, m.content[:60]) for m in messages_of(asked)])
    assert answered.result == "Final answer: Alice found that A holds / Bob found that B fails"

    tasks = list(TeamTask.objects.filter(team=team).select_related("owner").order_by("number"))
    assert [(t.identifier, t.status, t.owner.key, t.result) for t in tasks] == [
        ("T-001", TaskStatus.COMPLETED, alice.key, findings["alice"]),
        ("T-002", TaskStatus.COMPLETED, bob.key, findings["bob"])]
    for member, task in ((alice, tasks[0]), (bob, tasks[1])):
        [session] = team_sessions(member)
        session = settle(session)
        assert (session.status, session.ref, session.parent_id, session.user_id, session.channel, session.chat_id) == (
            S.COMPLETED, f"team:{team.pk}", asked.pk, "u-1", "web", "c-1")
        assert first_message(session) == (f"[Team task {task.identifier} assigned to you by {lead.key}]: "
                                          f"{task.subject}\n\n{task.description}\n"
                                          "Claim it with team_tasks and complete it with your result.")
        # every board call went through the pipeline: a verdict and an audit row each
        calls = [m for m in messages_of(session) if m.role == MessageRole.TOOL]
        assert [(m.tool_name, m.verdict) for m in calls] == [("team_tasks", "ok"), ("team_tasks", "ok")]
        assert all(m.invocation_id for m in calls)
    # the members' results reached the lead's session as teammates' announcements
    announced = sorted(m.content for m in messages_of(asked) if m.role == MessageRole.ANNOUNCE)
    assert announced == sorted([f"teammate: {alice.key} (completed)\n{findings['alice']}",
                                f"teammate: {bob.key} (completed)\n{findings['bob']}"])
    member_requests = [r for r in llm.requests if r["model"] == "alice"]
    assert f"a member of team {team.name} (lead: {lead.key})" in member_requests[0]["messages"][0]["content"]

    # the board shows both tasks completed by the right members
    staff = Client()
    staff.force_login(make_person("teams_app.view_teamtask"))
    board = staff.get(f"/teams/{team.pk}/board/?terminal=1")
    assert board.status_code == 200
    completed = next(c for c in board.context["columns"] if c["status"] == TaskStatus.COMPLETED)
    assert sorted((t.identifier, t.owner.key) for t in completed["tasks"]) == [("T-001", alice.key),
                                                                             ("T-002", bob.key)]


def test_two_members_on_a_provider_with_one_request_slot_both_finish(llm, runner):
    narrow = make_provider(llm, name="one-slot", max_concurrent=1)
    lead = make_agent()  # external: it calls goclaw's API itself
    alice = make_agent(provider=narrow.name, model="alice")
    bob = make_agent(provider=narrow.name, model="bob")
    team = team_of(lead, alice, bob, name="narrow")
    llm.responder = lambda body: member_turn(body, f"{body['model']} is done")
    for member in (alice, bob):
        task_create(actor=Actor.for_agent(lead), team=team, subject=f"Work for {member.key}", assignee=member)

    def both_done():
        """both tasks completed"""
        return TeamTask.objects.filter(team=team, status=TaskStatus.COMPLETED).count() == 2

    wait_until(both_done)
    assert sorted(TeamTask.objects.filter(team=team).values_list("owner__key", "result")) == sorted(
        [(alice.key, "alice is done"), (bob.key, "bob is done")])
    for member in (alice, bob):
        [session] = team_sessions(member)
        assert settle(session).status == S.COMPLETED and session.parent_id is None  # an external lead has no session
    assert llm.max_in_flight == 1  # the provider's one slot, shared by both members' runs


# --- waking by mail; who is not woken -----------------------------------------------------------------------------
def test_a_mailbox_message_wakes_a_hosted_member_and_leaves_an_external_one_alone(llm, provider, runner):
    lead, carol = make_agent(), make_agent()  # external
    alice = make_agent(provider=provider.name, model="alice")
    team = team_of(lead, alice, carol, name="mail")
    llm.responder = lambda body: text(f"noted ({len(body['messages'])} messages)")
    message = message_send(actor=Actor.for_agent(lead), team=team, to=alice,
                           text="please claim a task from the board.")
    [session] = team_sessions(alice)
    session = settle(session)
    assert session.status == S.COMPLETED and session.result == "noted (2 messages)"
    assert first_message(session) == f"[Team message from {lead.key}]: please claim a task from the board."
    assert TeamMessage.objects.get(pk=message.pk).read_at is not None  # handed over in its session: its receipt

    message_broadcast(actor=Actor.for_agent(lead), team=team, text="stand-up in five minutes")
    # the same team session continues (it ended moments ago) and runs again
    assert [s.pk for s in team_sessions(alice)] == [session.pk]
    again = wait_until(lambda: Session.objects.filter(pk=session.pk, status=S.COMPLETED,
                                                       result="noted (4 messages)").first())
    assert [m.content for m in messages_of(again) if m.role == MessageRole.USER][-1] == (
        f"[Team message from {lead.key}]: stand-up in five minutes")
    # the external member has no session; its copy waits in its mailbox, unread
    assert not Session.objects.filter(agent=carol).exists()
    assert TeamMessage.objects.get(team=team, recipient=carol).read_at is None


def test_a_blocked_assignment_wakes_its_member_only_once_it_can_be_claimed(provider, transactional_db):
    lead, bob = make_agent(), make_agent()
    alice = make_agent(provider=provider.name, model="alice")
    team = team_of(lead, alice, bob, name="chain")
    as_lead, as_bob = Actor.for_agent(lead), Actor.for_agent(bob)
    first = task_create(actor=as_lead, team=team, subject="Collect data", assignee=bob)
    second = task_create(actor=as_lead, team=team, subject="Analyse data", assignee=alice, blocked_by=["T-001"])
    assert second.status == TaskStatus.BLOCKED and team_sessions(alice) == []
    task_claim(actor=as_bob, team=team, task=first)
    task_complete(actor=as_bob, task=first, result="the data")
    [session] = team_sessions(alice)
    assert first_message(session).startswith(f"[Team task T-002 assigned to you by {lead.key}]: Analyse data\n")


def test_messages_between_a_hosted_lead_and_a_member_follow_the_leads_session(provider, transactional_db):
    lead = make_agent(provider=provider.name, model="lead")
    alice = make_agent(provider=provider.name, model="alice")
    mallory = make_agent(provider=provider.name, model="mallory")
    team = team_of(lead, alice, mallory, name="talk")
    lead_session = session_create(agent=lead, created_by="test", user_id="u-2", channel="web", chat_id="c-2")
    message_send(actor=Actor.for_agent(lead), team=team, to=alice, text="check the logs",
                 session_key=lead_session.key)
    [member] = team_sessions(alice)
    assert (member.parent_id, member.user_id, member.chat_id) == (lead_session.pk, "u-2", "c-2")
    # the member's answer by mail goes into the lead's session that works with the team, not a new one
    message_send(actor=Actor.for_agent(alice), team=team, to=lead, text="the logs are clean", session_key=member.key)
    assert team_sessions(lead) == []
    last = messages_of(lead_session)[-1]
    assert (last.role, last.content) == (MessageRole.USER, f"[Team message from {alice.key}]: the logs are clean")
    assert Session.objects.get(pk=lead_session.pk).status == S.RUNNING
    # a key naming another agent's session is not honoured: mallory cannot attach work to the lead's conversation
    message_send(actor=Actor.for_agent(mallory), team=team, to=alice, text="psst", session_key=lead_session.key)
    message_send(actor=Actor.for_agent(mallory), team=team, to=lead, text="psst", session_key=lead_session.key)
    [lead_team_session] = team_sessions(lead)
    assert lead_team_session.parent_id is None and lead_team_session.user_id == ""
    assert [m.content for m in messages_of(lead_session)].count(f"[Team message from {mallory.key}]: psst") == 0


# --- handoff ------------------------------------------------------------------------------------------------------
def test_a_handoffs_first_message_goes_to_the_hosted_targets_session(llm, provider, runner):
    front = make_agent(provider=provider.name, model="front")
    billing = make_agent(provider=provider.name, model="billing")
    llm.responder = lambda body: {"front": text("Let me pass you to billing."),
                                  "billing": text("Hello, billing here: which invoice is it?")}[body["model"]]
    conversation = settle(session_create(agent=front, created_by="test", message="My invoice is wrong",
                                         user_id="u-9", channel="telegram", chat_id="chat-9"))
    assert conversation.result == "Let me pass you to billing."
    agent_link_create(actor=SYSTEM, source=front, target=billing)
    handoff_set(actor=Actor.for_agent(front), source=front, target=billing, channel="telegram", chat_id="chat-9",
                reason="billing question", user_id="u-9")
    [taken] = Session.objects.filter(agent=billing)
    taken = settle(taken)
    assert (taken.origin, taken.user_id, taken.channel, taken.chat_id, taken.status, taken.result) == (
        SessionOrigin.HANDOFF, "u-9", "telegram", "chat-9", S.COMPLETED, "Hello, billing here: which invoice is it?")
    assert first_message(taken) == (
        f"[Handoff from {front.key}]\nReason: billing question\n\nConversation context:\n"
        "user: My invoice is wrong\nassistant: Let me pass you to billing.\n\n"
        "Please greet the user and continue.")


# --- stalls and stopping ------------------------------------------------------------------------------------------
def _stall(session, minutes: int) -> None:
    SessionMessage.objects.filter(session=session).update(created_at=timezone.now() - timedelta(minutes=minutes))


def test_a_stuck_member_is_escalated_to_the_lead_once_per_stall_and_shown_on_the_board(provider, transactional_db,
                                                                                        settings):
    settings.TEAM_STUCK_MINUTES = 10
    lead = make_agent()
    alice = make_agent(provider=provider.name, model="alice")
    team = team_of(lead, alice, name="slow")
    task = task_create(actor=Actor.for_agent(lead), team=team, subject="Long job", assignee=alice)
    task_claim(actor=Actor.for_agent(alice), team=team, task=task)
    [session] = team_sessions(alice)  # no runner here: it stays running, as a stuck run would
    assert members_stuck_sweep() == 0
    _stall(session, 11)
    assert members_stuck_sweep() == 1
    assert members_stuck_sweep() == 0  # the same stall is told once
    notices = list(TeamMessage.objects.filter(team=team, recipient=lead, sender="system:stuck"))
    assert [n.text for n in notices] == [
        f"[Escalation] {alice.key} has made no progress on T-001 (Long job) for 11 minutes. Message it, reassign "
        "its task, or have a person stop it from the team board."]
    [event] = TeamEvent.objects.filter(team=team, event_type=TeamEventType.ESCALATED)
    assert event.task_id == task.pk and event.data["reason"] == "member_stuck" and event.data["member"] == alice.key

    viewer = Client()
    viewer.force_login(make_person("teams_app.view_teamtask"))
    page = viewer.get(f"/teams/{team.pk}/board/")
    row = next(m for m in page.context["members"] if m.agent_id == alice.pk)
    assert row.run["stuck"] and row.run["session"] == str(session.pk) and not page.context["can_stop"]
    assert b'value="Stop"' not in page.content

    session_message_post(session=session, content="any progress?")  # it moves again…
    assert members_stuck_sweep() == 0
    _stall(session, 30)  # …and stalls again: a new stall, told again
    assert members_stuck_sweep() == 1
    assert TeamMessage.objects.filter(team=team, recipient=lead, sender="system:stuck").count() == 2


def test_a_person_stops_a_member_from_the_board_and_the_lead_is_told(provider, transactional_db):
    lead = make_agent(provider=provider.name, model="lead")
    alice = make_agent(provider=provider.name, model="alice")
    team = team_of(lead, alice, name="stoppable")
    lead_session = session_create(agent=lead, created_by="test", user_id="u-3")
    task_create(actor=Actor.for_agent(lead), team=team, subject="Endless job", assignee=alice,
                session_key=lead_session.key)
    [session] = team_sessions(alice)
    assert session.status == S.RUNNING and session.parent_id == lead_session.pk
    url = f"/teams/{team.pk}/members/{alice.key}/stop/"

    viewer = Client()
    viewer.force_login(make_person("teams_app.view_teamtask"))
    assert viewer.post(url).status_code == 403
    assert Session.objects.get(pk=session.pk).status == S.RUNNING

    operator = make_person("teams_app.view_teamtask", "runtime_app.run_session")
    staff = Client()
    staff.force_login(operator)
    board = staff.get(f"/teams/{team.pk}/board/")
    assert board.context["can_stop"] and url.encode() in board.content
    stopped = staff.post(url)
    assert stopped.status_code == 302 and stopped["Location"] == f"/teams/{team.pk}/board/"
    session = Session.objects.get(pk=session.pk)
    assert session.status == S.CANCELLED and session.error == f"cancelled by user:{operator.username}"
    assert TeamEvent.objects.filter(team=team, event_type=TeamEventType.STOPPED, actor=f"user:{operator.username}",
                                    data__member=alice.key).exists()
    told = [m.content for m in messages_of(lead_session) if m.role == MessageRole.ANNOUNCE]
    assert told == [f"teammate: {alice.key} (cancelled)\ncancelled by user:{operator.username}"]
    assert url.encode() not in staff.get(f"/teams/{team.pk}/board/").content  # nothing left to stop


# --- lead-centric context -----------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_only_the_lead_gets_team_md_in_its_system_prompt():
    lead, alice = make_agent(), make_agent()
    team = team_of(lead, alice, name="context")
    lead_prompt = system_prompt(session_create(agent=lead, created_by="test"))
    member_prompt = system_prompt(session_create(agent=alice, created_by="test"))
    assert "# TEAM.md" in lead_prompt and f"You lead the team {team.name}." in lead_prompt
    assert f"{alice.key} (member)" in lead_prompt
    assert "TEAM.md" not in member_prompt and team.name not in member_prompt


# --- what arrives as a run completes -------------------------------------------------------------------------------
def test_a_runs_reply_waiting_for_a_message_being_posted_reads_it_and_comes_after_it(hosted):
    """A teammate's message is being posted (the session's row lock held) as the run writes its reply: the reply
    waits, then reads that message and is appended after it. (It used to read with the snapshot from before the wait:
    the same seq as the posted message, a unique violation, and the run failed.)"""
    import threading

    from django.db import connection, transaction

    session = session_create(agent=hosted, created_by="test", message="hi")
    assert session_claim(owner="runner-x", limit=10) == [session.pk]
    posted, release, replies = threading.Event(), threading.Event(), []

    def post():
        try:
            with transaction.atomic():
                session_message_post(session=session, content="teammate: agent-x (completed)")
                posted.set()
                release.wait(60)
        finally:
            connection.close()

    def reply():
        try:
            replies.append(run_record_reply(session=session, owner="runner-x", after_seq=1, content="hello",
                                            tool_calls=[], tokens_in=1, tokens_out=1))
        finally:
            connection.close()

    poster, replier = threading.Thread(target=post), threading.Thread(target=reply)
    poster.start()
    assert posted.wait(60)
    replier.start()
    deadline = time.monotonic() + 60
    with connection.cursor() as cursor:  # the reply is queued behind the post's lock before the post commits
        while time.monotonic() < deadline:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND wait_event_type = 'Lock'")
            if cursor.fetchone()[0]:
                break
            time.sleep(0.05)
    release.set()
    poster.join(60)
    replier.join(60)
    assert [(m.seq, m.role) for m in replies[0]] == [(2, MessageRole.USER), (3, MessageRole.ASSISTANT)]
    assert list(SessionMessage.objects.filter(session=session).order_by("seq").values_list("seq", flat=True)) == [1, 2, 3]


def test_a_message_that_arrives_between_the_final_reply_and_the_runs_end_is_answered(hosted):
    quiet = session_create(agent=hosted, created_by="test", message="hi")
    busy = session_create(agent=hosted, created_by="test", message="hi")
    assert sorted(session_claim(owner="runner-x", limit=10)) == sorted([quiet.pk, busy.pk])
    for session in (quiet, busy):
        run_record_reply(session=session, owner="runner-x", after_seq=1, content="hello", tool_calls=[],
                         tokens_in=1, tokens_out=1)
    session_message_post(session=busy, content="teammate: agent-x (completed)\nthe result")  # the run never read it
    for session in (quiet, busy):
        run_end(session_id=session.pk, owner="runner-x", status=S.COMPLETED, result="hello")
    assert Session.objects.get(pk=quiet.pk).status == S.COMPLETED
    again = Session.objects.get(pk=busy.pk)
    assert (again.status, again.lease_owner, again.ended_at) == (S.RUNNING, "", None)  # any runner takes it up
