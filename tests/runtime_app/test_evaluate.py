"""evaluate_loop: a generator drafts, an evaluator judges against the criteria, the generator revises with the
feedback until APPROVED or the rounds run out; both agents need a delegation link from the caller and must be hosted.
Each agent has a model of its own, so the local LLM server answers each by the request's `model`."""
from __future__ import annotations

from runtime_app.choices import MessageRole, SessionOrigin, SessionStatus
from runtime_app.models import Session
from runtime_app.services.sessions import session_create
from teams_app.actors import Actor
from teams_app.services.delegation import agent_link_create
from tests.factories import make_agent
from tests.runtime_app.conftest import messages_of, settle
from tests.runtime_app.llm_server import call, text

S = SessionStatus


def agents(provider, *models):
    return [make_agent(provider=provider.name, model=model) for model in models]


def link(source, target):
    return agent_link_create(actor=Actor.system("test"), source=source, target=target)


def last(body) -> dict:
    return body["messages"][-1]


def tool_result(session):
    return [m for m in messages_of(session) if m.role == MessageRole.TOOL][0]


def rounds_of(session, agent):
    return list(Session.objects.filter(parent=session, agent=agent, origin=SessionOrigin.EVALUATION)
                .order_by("created_at"))


def caller_replies(**loop):
    """The calling agent: starts the loop, then repeats what the tool said."""
    def reply(body):
        if last(body)["role"] == "tool":
            return text("done")
        return call("evaluate_loop", **loop)
    return reply


def test_a_draft_rejected_once_is_revised_with_the_feedback_and_approved_in_round_two(provider, llm, runner):
    caller, generator, evaluator = agents(provider, "caller", "generator", "evaluator")
    link(caller, generator), link(caller, evaluator)
    loop = caller_replies(generator=generator.key, evaluator=evaluator.key, task="Write a slogan for our tea.",
                          criteria="It must mention the price.")

    def respond(body):
        said = last(body)["content"]
        if body["model"] == "generator":
            return text("Fresh tea, only $5." if "Feedback from the evaluator: the price is missing" in said
                        else "Fresh tea for everyone.")
        if body["model"] == "evaluator":
            return text("  approved - nice" if "$5" in said else "REJECTED: the price is missing")
        return loop(body)

    llm.responder = respond
    session = settle(session_create(agent=caller, created_by="test", message="go", user_id="u"))
    assert session.status == S.COMPLETED
    result = tool_result(session)
    assert not result.is_error and result.verdict == "ok"
    assert result.content.startswith("APPROVED in round 2 of 3")
    assert result.content.endswith("Fresh tea, only $5.")
    drafts, verdicts = rounds_of(session, generator), rounds_of(session, evaluator)
    assert [d.result for d in drafts] == ["Fresh tea for everyone.", "Fresh tea, only $5."]
    assert [v.result for v in verdicts] == ["REJECTED: the price is missing", "  approved - nice"]
    assert all(s.skip_gates and s.sync and s.status == S.COMPLETED for s in drafts + verdicts)
    second = messages_of(drafts[1])[0].content  # the revision prompt carries the feedback and the last draft
    assert "Feedback from the evaluator: the price is missing" in second and "Fresh tea for everyone." in second
    assert "It must mention the price." in messages_of(verdicts[0])[0].content
    assert not [m for m in messages_of(session) if m.role == MessageRole.ANNOUNCE]  # synchronous: not announced


def test_without_approval_the_last_draft_and_feedback_come_back_marked_not_approved(provider, llm, runner):
    caller, generator, evaluator = agents(provider, "caller", "generator", "evaluator")
    link(caller, generator), link(caller, evaluator)
    loop = caller_replies(generator=generator.key, evaluator=evaluator.key, task="Name the product.",
                          criteria="Short.", max_rounds=9)
    drafted = []

    def respond(body):
        if body["model"] == "generator":
            drafted.append(1)
            return text(f"draft {len(drafted)}")
        if body["model"] == "evaluator":
            return text("REJECTED: needs more zing")
        return loop(body)

    llm.responder = respond
    session = settle(session_create(agent=caller, created_by="test", message="go", user_id="u"))
    result = tool_result(session)
    assert not result.is_error, result.content  # the loop worked; the draft simply was not approved
    assert result.content.startswith("NOT APPROVED after 5 rounds (capped at 5)")
    assert "Its last feedback: needs more zing" in result.content and result.content.endswith("draft 5")
    assert len(rounds_of(session, generator)) == len(rounds_of(session, evaluator)) == 5


def test_the_loop_is_refused_without_a_link_to_each_agent_or_with_an_external_one(provider, llm, runner):
    caller, generator, evaluator = agents(provider, "caller", "generator", "evaluator")
    external = make_agent()  # runs elsewhere: its provider names no LLM provider of goclaw's
    link(caller, generator), link(caller, external)
    llm.script(call("evaluate_loop", generator=generator.key, evaluator=evaluator.key, task="t", criteria="c"),
               call("evaluate_loop", generator=generator.key, evaluator=external.key, task="t", criteria="c"),
               text("gave up"))
    session = settle(session_create(agent=caller, created_by="test", message="go", user_id="u"))
    no_link, not_hosted = [m for m in messages_of(session) if m.role == MessageRole.TOOL]
    assert no_link.is_error and f"no delegation link to agent {evaluator.key} (the evaluator)" in no_link.content
    assert not_hosted.is_error and f"Agent {external.key} (the evaluator) is not a hosted agent" in not_hosted.content
    assert not Session.objects.filter(parent=session).exists()  # nothing ran
    assert [r["model"] for r in llm.requests] == ["caller"] * 3
