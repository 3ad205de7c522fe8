"""Subagents: spawn and run, results announced to the parent (batched), the deny lists through the policy engine,
limits enforced race-safe, cancel and steer, archiving."""
from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from goclaw.errors import Conflict
from runtime_app.choices import MessageRole, SessionStatus
from runtime_app.loop import conversation
from runtime_app.models import Session, SessionMessage
from runtime_app.services.sessions import session_create
from runtime_app.spawn import children_cancel, subagent_spawn, subagent_steer, subagents_archive
from tests.runtime_app.conftest import messages_of, settle
from tests.runtime_app.llm_server import call, text
from tools_app.calls import CallContext
from tools_app.selectors import tool_catalog_explain
from tools_app.services.agents import agent_update

S = SessionStatus


def names(request: dict) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools", [])}


def is_subagent(body: dict) -> bool:
    return "# Task" in body["messages"][0]["content"]


def test_spawn_run_returns_the_subagents_result_and_the_subagent_lacks_the_denied_tools(hosted, llm, runner):
    llm.script(call("spawn", action="run", task="add 2 and 2", label="math"), text("4"), text("the answer is 4"))
    parent = settle(session_create(agent=hosted, created_by="test", message="go", user_id="u"))
    assert parent.status == S.COMPLETED and parent.result == "the answer is 4"
    child = Session.objects.get(parent=parent)
    assert (child.depth, child.label, child.status, child.result) == (1, "math", S.COMPLETED, "4")
    result = [m for m in messages_of(parent) if m.role == MessageRole.TOOL][0]
    assert result.verdict == "ok" and "4" in result.content
    parent_tools, child_tools = names(llm.requests[0]), names(llm.requests[1])
    assert {"spawn", "sessions_list", "sessions_send"} <= parent_tools
    # always denied to subagents, and at the maximum depth (1) the leaf list too
    assert not {"spawn", "sessions_list", "sessions_history", "sessions_send", "session_status"} & child_tools
    assert "datetime" in child_tools
    assert not [m for m in messages_of(parent) if m.role == MessageRole.ANNOUNCE]  # a sync run is not announced


def test_explain_shows_why_a_subagent_at_max_depth_is_refused_spawn(hosted):
    explained = tool_catalog_explain(hosted, CallContext(subagent_depth=1))
    spawn = next(t for t in explained["tools"] if t["name"] == "spawn")
    assert not spawn["allowed"] and "leaf deny" in spawn["decided_by"]


def test_an_async_subagents_result_is_announced_and_the_parent_runs_again(hosted, llm, runner):
    def respond(body):
        if is_subagent(body):
            return text("child says 42")
        last = body["messages"][-1]
        if last["role"] == "tool":
            return text("started it")
        if last["content"].startswith("[Subagent"):
            return text("the child said 42")
        return call("spawn", action="spawn", task="compute", label="calc")

    llm.responder = respond
    parent = settle(session_create(agent=hosted, created_by="test", message="go", user_id="u"))
    child = settle(Session.objects.get(parent=parent))
    assert child.status == S.COMPLETED and child.announced
    parent = settle(parent)
    assert parent.status == S.COMPLETED and parent.result == "the child said 42"
    announce = [m for m in messages_of(parent) if m.role == MessageRole.ANNOUNCE]
    assert len(announce) == 1 and announce[0].child_id == child.pk and "child says 42" in announce[0].content


def test_announcements_that_arrive_together_reach_the_model_as_one_message(hosted, transactional_db):
    parent = session_create(agent=hosted, created_by="test", message="go")
    for n, body in enumerate(["[Subagent a completed]\nA", "[Subagent b completed]\nB"], start=2):
        SessionMessage.objects.create(session=parent, seq=n, role=MessageRole.ANNOUNCE, content=body)
    chat = conversation(messages_of(parent))
    assert [m.role for m in chat] == ["user", "user"]
    assert chat[1].content == "[Subagent a completed]\nA\n\n[Subagent b completed]\nB"


def _parent(agent, **config):
    agent_update(agent=agent, other_config={"subagents": config})  # through the agent configuration's schema
    return session_create(agent=agent, created_by="test", message="go")


def test_spawn_limits_hold_under_concurrent_spawns(hosted):
    parent = _parent(hosted, max_concurrent=3)
    barrier = threading.Barrier(6)
    outcomes = []

    def attempt(i):
        try:
            barrier.wait()
            subagent_spawn(parent=parent, task=f"t{i}")
            outcomes.append("ok")
        except Conflict as exc:
            outcomes.append(exc.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=attempt, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["ok"] * 3 + ["spawn_concurrency_exceeded"] * 3
    assert Session.objects.filter(parent=parent).count() == 3


def test_children_per_parent_and_depth_are_limited(hosted):
    parent = _parent(hosted, max_children_per_agent=2)
    first = subagent_spawn(parent=parent, task="a")
    subagent_spawn(parent=parent, task="b")
    with pytest.raises(Conflict) as exc:
        subagent_spawn(parent=parent, task="c")
    assert exc.value.code == "spawn_children_exceeded"
    with pytest.raises(Conflict) as exc:
        subagent_spawn(parent=first, task="grandchild")
    assert exc.value.code == "spawn_depth_exceeded"


def test_cancel_last_all_and_steer(hosted):
    parent = _parent(hosted)
    a = subagent_spawn(parent=parent, task="a", label="A")
    b = subagent_spawn(parent=parent, task="b", label="B")
    assert [s.pk for s in children_cancel(parent=parent, which="last", actor="agent:x")] == [b.pk]
    steered = subagent_steer(parent=parent, child_id=str(a.pk), message="focus on X", actor="agent:x")
    assert Session.objects.get(pk=a.pk).status == S.CANCELLED
    assert steered.label == "A" and "focus on X" in steered.task and steered.status == S.RUNNING
    assert [s.pk for s in children_cancel(parent=parent, which="all", actor="agent:x")] == [steered.pk]
    # cancelled by their parent: not announced back to it
    assert not SessionMessage.objects.filter(session=parent, role=MessageRole.ANNOUNCE).exists()


def test_cancelling_a_parent_cancels_its_running_subagents(hosted):
    from runtime_app.services.sessions import session_cancel

    parent = _parent(hosted)
    child = subagent_spawn(parent=parent, task="a")
    session_cancel(session=parent, actor="staff:x")
    child.refresh_from_db()
    assert (child.status, child.end_reason) == (S.CANCELLED, "parent_cancelled")


def test_ended_subagents_are_archived_after_their_agents_archive_after(hosted):
    parent = _parent(hosted, archive_after_minutes=5)
    old, recent = subagent_spawn(parent=parent, task="old"), subagent_spawn(parent=parent, task="new")
    Session.objects.filter(pk=old.pk).update(status=S.COMPLETED, ended_at=timezone.now() - timedelta(minutes=6))
    Session.objects.filter(pk=recent.pk).update(status=S.COMPLETED, ended_at=timezone.now() - timedelta(minutes=2))
    assert subagents_archive() == 1
    assert Session.objects.get(pk=old.pk).status == S.ARCHIVED
    assert Session.objects.get(pk=recent.pk).status == S.COMPLETED


def test_a_message_that_arrives_while_the_model_answers_is_answered_next(hosted, transactional_db):
    from runtime_app.loop import needs_model_turn

    parent = session_create(agent=hosted, created_by="test", message="go")  # seq 1
    SessionMessage.objects.create(session=parent, seq=2, role=MessageRole.ANNOUNCE, content="[Subagent a completed]\nA")
    SessionMessage.objects.create(session=parent, seq=3, role=MessageRole.ASSISTANT, content="working", answers_seq=1)
    rows = messages_of(parent)
    assert needs_model_turn(rows)
    assert [(m.role, m.content) for m in conversation(rows)] == [
        ("user", "go"), ("assistant", "working"), ("user", "[Subagent a completed]\nA")]


def test_a_synchronous_subagent_that_parks_is_handed_to_the_runners_and_announced_when_it_ends(hosted, llm, runner):
    from tools_app.models import ToolPermission
    from tools_app.services.approvals import approval_decide

    ToolPermission.objects.create(scope="agent", agent=hosted, tool="datetime", permission="ask")
    llm.script(call("spawn", action="run", task="what time is it", label="clock"), call("datetime"),
               text("waiting for the clock"), text("it is noon"), text("the clock says noon"))
    parent = settle(session_create(agent=hosted, created_by="test", message="go", user_id="u"))
    child = Session.objects.get(parent=parent)
    assert parent.status == S.COMPLETED and child.status == S.WAITING_APPROVAL and not child.sync
    spawn_result = [m for m in messages_of(parent) if m.role == MessageRole.TOOL][0]
    assert "waiting for a person's approval" in spawn_result.content
    approval_decide(approval_id=child.waiting_approval_id, decision="allow_once", actor=None)
    child = settle(child, past_approval=child.waiting_approval_id)
    assert child.status == S.COMPLETED and child.result == "it is noon"
    parent = settle(parent)
    assert parent.result == "the clock says noon"
    assert [m.child_id for m in messages_of(parent) if m.role == MessageRole.ANNOUNCE] == [child.pk]


def test_repeated_or_missing_tool_call_ids_get_unique_ones():
    from runtime_app.loop import tool_calls_of
    from runtime_app.providers.base import ToolCallRequest

    calls = tool_calls_of((ToolCallRequest("x", "a", "{}"), ToolCallRequest("x", "b", "{}"),
                           ToolCallRequest("", "c", "{}")), turn=3)
    assert [c["name"] for c in calls] == ["a", "b", "c"] and calls[0]["id"] == "x"
    assert len({c["id"] for c in calls}) == 3


def test_a_call_id_the_model_reuses_in_a_later_reply_keeps_each_result_with_its_own_call(hosted, transactional_db):
    session = session_create(agent=hosted, created_by="test", message="go")
    rows = [(MessageRole.ASSISTANT, "", [{"id": "c1", "name": "datetime", "arguments": "{}"}], ""),
            (MessageRole.TOOL, "first", [], "c1"),
            (MessageRole.ASSISTANT, "", [{"id": "c1", "name": "datetime", "arguments": "{}"}], ""),
            (MessageRole.TOOL, "second", [], "c1")]
    for seq, (role, content, calls, call_id) in enumerate(rows, start=2):
        SessionMessage.objects.create(session=session, seq=seq, role=role, content=content, tool_calls=calls,
                                      tool_call_id=call_id, answers_seq=seq - 1)
    assert [m.content for m in conversation(messages_of(session)) if m.role == "tool"] == ["first", "second"]
