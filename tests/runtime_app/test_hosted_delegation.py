"""Delegating to a hosted agent: the runtime runs the target in a session of its own (origin delegation); in mode
sync the `delegate` call returns the result, in mode async the result is announced into the source's session,
which runs again; cancelling the delegation cancels the session; an external target answers through its tools as
before."""
from __future__ import annotations

import time

from runtime_app.choices import MessageRole, SessionOrigin, SessionStatus
from runtime_app.models import Session
from runtime_app.services.sessions import session_create
from teams_app.actors import Actor
from teams_app.models import Delegation
from teams_app.services.delegation import agent_link_create, delegation_cancel, delegation_create
from tests.factories import make_agent
from tests.runtime_app.conftest import delegation_finished as finished, messages_of, settle
from tests.runtime_app.llm_server import Reply, call, text
from tools_app.calls import ToolCall
from tools_app.pipeline import execute

S = SessionStatus


def pair(provider, target=None):
    source = make_agent(provider=provider.name, model="source")
    target = target or make_agent(provider=provider.name, model="target")
    agent_link_create(actor=Actor.system("test"), source=source, target=target)
    return source, target


def of_role(session, role):
    return [m for m in messages_of(session) if m.role == role]


def test_in_mode_sync_the_delegate_call_returns_the_hosted_targets_answer(provider, llm, runner):
    source, target = pair(provider)

    def respond(body):
        last = body["messages"][-1]
        if body["model"] == "target":
            return text("The capital is Paris.")
        if last["role"] == "tool":
            return text("Paris, says my colleague")
        return call("delegate", action="delegate", agent=target.key, task="What is the capital of France?",
                    mode="sync")

    llm.responder = respond
    session = settle(session_create(agent=source, created_by="test", message="go", user_id="u"))
    assert (session.status, session.result) == (S.COMPLETED, "Paris, says my colleague")
    result = of_role(session, MessageRole.TOOL)[0]
    delegation = Delegation.objects.get(source=source)
    assert not result.is_error
    assert result.content == f"D-{delegation.pk} completed by {target.key}:\nThe capital is Paris."
    assert (delegation.status, delegation.result) == ("completed", "The capital is Paris.")
    child = Session.objects.get(agent=target)
    assert (child.origin, child.ref, child.parent_id, child.sync) == (
        SessionOrigin.DELEGATION, f"delegation:{delegation.pk}", session.pk, True)
    assert of_role(child, MessageRole.USER)[0].content == (
        f"[Delegation D-{delegation.pk} from {source.key}]: What is the capital of France?")
    assert not of_role(session, MessageRole.ANNOUNCE)  # the caller had the result already


def test_in_mode_async_the_result_is_announced_into_the_source_session_which_runs_again(provider, llm, runner):
    source, target = pair(provider)

    def respond(body):
        last = body["messages"][-1]
        if body["model"] == "target":
            return text("42")
        if last["role"] == "tool":
            return text("asked; waiting")
        if last["content"].startswith("[Delegation D-"):
            return text("my colleague says 42")
        return call("delegate", action="delegate", agent=target.key, task="The answer?")

    llm.responder = respond
    session = session_create(agent=source, created_by="test", message="go", user_id="u")
    delegation = finished(_delegation_of(source))
    assert (delegation.status, delegation.result) == ("completed", "42")
    session = settle(session)
    assert (session.status, session.result) == (S.COMPLETED, "my colleague says 42")
    assert "(running)" in of_role(session, MessageRole.TOOL)[0].content
    child = Session.objects.get(agent=target)
    assert (child.parent_id, child.sync, child.status) == (session.pk, False, S.COMPLETED)
    announced = of_role(session, MessageRole.ANNOUNCE)
    assert [(m.child_id, m.content) for m in announced] == [
        (child.pk, f"[Delegation D-{delegation.pk} result from {target.key} (completed)]\n42")]


def _delegation_of(source, seconds: float = 30) -> Delegation:
    deadline = time.monotonic() + seconds
    while not Delegation.objects.filter(source=source).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return Delegation.objects.get(source=source)


def test_cancelling_a_delegation_cancels_its_hosted_session(provider, llm, runner):
    source = make_agent()  # an external agent delegating through the API
    target = make_agent(provider=provider.name, model="target")
    agent_link_create(actor=Actor.system("test"), source=source, target=target)
    llm.script(Reply(content="thinking", stall=True))
    delegation = delegation_create(source=source, target=target, request="Think hard.")
    assert llm.stalled.wait(30)
    session = Session.objects.get(agent=target)
    assert session.parent_id is None  # an external source has no session to announce into
    delegation_cancel(actor=Actor.for_agent(source), delegation=delegation, reason="no longer needed")
    session = settle(session)
    assert (session.status, session.end_reason) == (S.CANCELLED, "delegation_cancelled")
    assert Delegation.objects.get(pk=delegation.pk).status == "cancelled"


def test_an_external_target_answers_through_its_tools_as_before(provider, llm, runner):
    external = make_agent()  # its provider names no LLM provider of goclaw's
    source, _ = pair(provider, target=external)

    def respond(body):
        if body["messages"][-1]["role"] == "tool":
            return text("asked; waiting")
        return call("delegate", action="delegate", agent=external.key, task="Do it.")

    llm.responder = respond
    session = settle(session_create(agent=source, created_by="test", message="go", user_id="u"))
    delegation = Delegation.objects.get(source=source)
    assert delegation.status == "running" and not Session.objects.filter(agent=external).exists()
    answer = execute(ToolCall(external, "delegate", {"action": "complete", "id": f"D-{delegation.pk}",
                                                     "result": "done"}))
    assert not answer.is_error
    assert Delegation.objects.get(pk=delegation.pk).status == "completed"
    session = settle(session)
    assert session.status == S.COMPLETED and not of_role(session, MessageRole.ANNOUNCE)
    assert [r["model"] for r in llm.requests] == ["source", "source"]
