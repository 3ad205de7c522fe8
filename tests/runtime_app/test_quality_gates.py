"""Quality gates on delegations to hosted agents: the source agent's `quality_gates` judge the target's result (a
command in the source's sandbox with the result on stdin, or a hosted reviewer answering APPROVED / REJECTED); a
failing blocking gate sends the target a revision prompt and judges again, then fails the delegation when the
retries are spent; a non-blocking one lets it pass with a note; a gate's reviewer delegates without gates."""
from __future__ import annotations


import pytest

from goclaw.errors import ValidationError
from runtime_app.choices import MessageRole, SessionOrigin, SessionStatus
from runtime_app.models import Session
from teams_app.actors import Actor
from teams_app.models import Delegation
from teams_app.services.delegation import agent_link_create, delegation_create
from tests.factories import make_agent
from tests.runtime_app.conftest import delegation_finished as finished, messages_of
from tests.runtime_app.llm_server import call, text
from tools_app.agent_config import agent_config_validate
from tools_app.models import ToolInvocation

S = SessionStatus
REVISE = "Your result was rejected by a quality gate:"
# reads the result on stdin: passes when it says PASS, else explains on stderr
NEEDS_PASS = "grep -q PASS || { echo 'the result must say PASS' >&2; exit 1; }"


def gate(**fields):
    return {"event": "delegation.completed", **fields}


def link(source, target):
    return agent_link_create(actor=Actor.system("test"), source=source, target=target)


def delegate(source, target, request="Check the build."):
    link(source, target)
    return delegation_create(source=source, target=target, request=request, user_id="u")


def session_of(delegation) -> Session:
    return Session.objects.get(origin=SessionOrigin.DELEGATION, ref=f"delegation:{delegation.pk}")


def revisions(session) -> list[str]:
    return [m.content for m in messages_of(session) if m.role == MessageRole.USER and REVISE in m.content]


def reworks(done: str, first: str):
    """A target that answers `first`, and `done` once a gate asked for a revision."""
    return lambda body: text(done if REVISE in body["messages"][-1]["content"] else first)


def test_the_schema_accepts_gates_and_refuses_incomplete_ones():
    agent_config_validate({"quality_gates": [gate(type="command", command="make test", max_retries=5),
                                             gate(type="agent", agent="qa", block_on_failure=False)]})
    for wrong in (gate(type="command"), gate(type="agent", command="x"),
                  gate(type="command", command="x", max_retries=6),
                  {"type": "command", "command": "x"}, gate(type="command", command="x", event="task.completed")):
        with pytest.raises(ValidationError):
            agent_config_validate({"quality_gates": [wrong]})


def test_a_command_gate_blocks_a_result_until_the_revision_passes(provider, llm, runner):
    source = make_agent(other_config={"quality_gates": [gate(type="command", command=NEEDS_PASS)]})
    target = make_agent(provider=provider.name, model="target")
    llm.responder = reworks("build is PASS", "build looks fine")
    delegation = finished(delegate(source, target))
    assert (delegation.status, delegation.result) == ("completed", "build is PASS")
    session = session_of(delegation)
    assert revisions(session) == ["[quality gate 1 (command), revision 1 of 1]\n"
                                  f"{REVISE} the result must say PASS. Revise it."]
    assert [m.content for m in messages_of(session) if m.role == MessageRole.ASSISTANT] == [
        "build looks fine", "build is PASS"]
    audit = list(ToolInvocation.objects.filter(agent_key=source.key, tool_name="quality_gate").order_by("created_at"))
    assert [row.status for row in audit] == ["error", "ok"]  # each gate run is audited as the source agent's
    assert audit[0].arguments["command"] == NEEDS_PASS and audit[0].sandbox_backend


def test_an_agent_gate_blocks_a_result_until_the_reviewer_approves_the_revision(provider, llm, runner):
    reviewer = make_agent(provider=provider.name, model="reviewer")
    source = make_agent(other_config={"quality_gates": [
        gate(type="agent", agent=reviewer.key, criteria="The report has a title.", max_retries=2)]})
    target = make_agent(provider=provider.name, model="target")
    rework = reworks("Title: Build\nall green", "all green")

    def respond(body):
        said = body["messages"][-1]["content"]
        if body["model"] == "reviewer":
            return text("APPROVED" if "Title: Build" in said else "REJECTED: add a title")
        return rework(body)

    llm.responder = respond
    delegation = finished(delegate(source, target))
    assert (delegation.status, delegation.result) == ("completed", "Title: Build\nall green")
    session = session_of(delegation)
    assert revisions(session) == ["[quality gate 1 (agent), revision 1 of 2]\n"
                                  f"{REVISE} add a title. Revise it."]
    reviews = list(Session.objects.filter(parent=session, origin=SessionOrigin.GATE).order_by("created_at"))
    assert [(r.agent_id, r.status, r.result) for r in reviews] == [
        (reviewer.pk, S.COMPLETED, "REJECTED: add a title"), (reviewer.pk, S.COMPLETED, "APPROVED")]
    assert all(r.skip_gates and r.ref == f"delegation:{delegation.pk}" for r in reviews)
    assert "The report has a title." in messages_of(reviews[0])[0].content


def test_a_blocking_gate_fails_the_delegation_once_the_retries_are_spent(provider, llm, runner):
    source = make_agent(other_config={"quality_gates": [gate(type="command", command="echo 'too short' >&2; exit 1")]})
    target = make_agent(provider=provider.name, model="target")
    llm.responder = reworks("still short", "short")
    delegation = finished(delegate(source, target))
    assert delegation.status == "failed"
    assert delegation.result == "Rejected by quality gate 1 (command) after 1 revision: too short"
    assert len(revisions(session_of(delegation))) == 1


def test_a_non_blocking_gate_lets_the_result_pass_with_a_note(provider, llm, runner):
    source = make_agent(other_config={"quality_gates": [
        gate(type="command", command=NEEDS_PASS, block_on_failure=False)]})
    target = make_agent(provider=provider.name, model="target")
    llm.responder = lambda body: text("done")
    delegation = finished(delegate(source, target))
    assert delegation.status == "completed"
    assert delegation.result == ("done\n\n[Note: quality gate 1 (command) did not pass (not blocking): "
                                 "the result must say PASS]")
    assert not revisions(session_of(delegation))


def test_a_reviewers_own_delegations_are_not_gated(provider, llm, runner):
    """The reviewer delegates (sync) to a helper; the reviewer's own gate would refuse anything, but a gate's
    reviewer runs with gates off, and so does what it delegates."""
    reviewer = make_agent(provider=provider.name, model="reviewer",
                          other_config={"quality_gates": [gate(type="command", command="exit 1")]})
    helper = make_agent(provider=provider.name, model="helper")
    link(reviewer, helper)
    source = make_agent(other_config={"quality_gates": [gate(type="agent", agent=reviewer.key)]})
    target = make_agent(provider=provider.name, model="target")

    def respond(body):
        last = body["messages"][-1]
        if body["model"] == "reviewer":
            if last["role"] == "tool":
                return text("APPROVED" if "the fact is 42" in last["content"] else "REJECTED: could not check")
            return call("delegate", action="delegate", agent=helper.key, task="Look the fact up.", mode="sync")
        return text("the fact is 42" if body["model"] == "helper" else "the answer is 42")

    llm.responder = respond
    delegation = finished(delegate(source, target))
    assert (delegation.status, delegation.result) == ("completed", "the answer is 42")
    review = Session.objects.get(origin=SessionOrigin.GATE)
    assert review.skip_gates and review.result == "APPROVED"
    inner = Delegation.objects.get(source=reviewer)
    assert (inner.status, inner.result) == ("completed", "the fact is 42")
    helper_session = session_of(inner)
    assert helper_session.parent_id == review.pk and helper_session.skip_gates and helper_session.sync
    assert not revisions(helper_session)
    assert not ToolInvocation.objects.filter(agent_key=reviewer.key, tool_name="quality_gate").exists()
    assert not revisions(session_of(delegation))
