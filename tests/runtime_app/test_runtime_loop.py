"""The hosted agent loop against a local OpenAI-compatible / Anthropic server: every tool call through the pipeline,
hostile model output answered as results, parking on approvals and resuming (also in another runner), cancel,
iteration limits, the system prompt."""
from __future__ import annotations

import json

from runtime_app.choices import MessageRole, SessionStatus
from runtime_app.services.sessions import session_cancel, session_create, session_message_post
from tests.runtime_app.conftest import make_provider, messages_of, settle
from tests.runtime_app.llm_server import Reply, call, text
from tools_app.models import ToolInvocation
from tools_app.services.agents import agent_update

S = SessionStatus


def start(agent, message="hello", **kw):
    return session_create(agent=agent, created_by="test", message=message, user_id=kw.pop("user_id", "u1"), **kw)


def tool_names(request: dict) -> set[str]:
    if "tools" not in request:
        return set()
    return {t["function"]["name"] if "function" in t else t["name"] for t in request["tools"]}


def test_a_tool_call_runs_through_the_pipeline_and_its_result_goes_back_to_the_model(hosted, llm, runner):
    llm.script(call("datetime"), text("It is now."))
    session = settle(start(hosted))
    assert session.status == S.COMPLETED and session.result == "It is now."
    user, reply, result, final = messages_of(session)
    assert (user.role, reply.role, result.role, final.role) == ("user", "assistant", "tool", "assistant")
    assert reply.tool_calls[0]["name"] == "datetime" and result.verdict == "ok" and not result.is_error
    audit = ToolInvocation.objects.get(pk=result.invocation_id)  # the pipeline's audit row, in this session
    assert audit.tool_name == "datetime" and audit.agent_key == hosted.key and audit.session_key
    first, second = llm.requests
    assert "datetime" in tool_names(first)  # the agent's catalog, as tool definitions
    tool_message = [m for m in second["messages"] if m["role"] == "tool"][0]
    assert tool_message["tool_call_id"] == reply.tool_calls[0]["id"] and tool_message["content"] == result.content
    assert session.iterations == 2 and session.tokens_in > 0 and session.tokens_out > 0


def test_malformed_arguments_and_unknown_tools_are_refused_results_the_model_reads_and_both_are_audited(hosted, llm, runner):
    llm.script(Reply(tool_calls=[("read_file", '{"path": "a.txt"'), ("no_such_tool", "{}")]), text("sorry"))
    session = settle(start(hosted))
    assert session.status == S.COMPLETED
    results = [m for m in messages_of(session) if m.role == MessageRole.TOOL]
    assert [r.verdict for r in results] == ["invalid_arguments", "denied"]
    assert all(r.is_error for r in results)
    assert "no_such_tool" in results[1].content and "not available" in results[1].content
    assert ToolInvocation.objects.filter(pk__in=[r.invocation_id for r in results]).count() == 2


def test_parallel_tool_calls_each_get_a_result_in_order(hosted, llm, runner):
    llm.script(Reply(tool_calls=[("datetime", "{}"), ("workspace_dir", "{}")]), text("done"))
    session = settle(start(hosted))
    tools = [m.tool_name for m in messages_of(session) if m.role == MessageRole.TOOL]
    assert tools == ["datetime", "workspace_dir"]
    second = llm.requests[1]["messages"]
    assert [m["role"] for m in second][-3:] == ["assistant", "tool", "tool"]


def test_a_run_stops_at_max_iterations_with_a_clear_status(hosted, llm, runner):
    agent_update(agent=hosted, other_config={"max_iterations": 3})
    llm.responder = lambda body: call("datetime")
    session = settle(start(hosted))
    assert (session.status, session.end_reason) == (S.FAILED, "max_iterations")
    assert "max_iterations" in session.error and session.iterations == 3


def test_a_provider_error_fails_the_run_with_its_reason(hosted, llm, runner):
    llm.script(Reply(status=401))
    session = settle(start(hosted))
    assert session.status == S.FAILED and session.end_reason == "provider_unauthorized"
    assert "sk-test-key" not in session.error


def test_a_tool_that_needs_approval_parks_the_session_and_the_decision_resumes_it(hosted, llm, runner):
    from tools_app.services.approvals import approval_decide

    hosted.mode = "manual"  # every call asks a person
    hosted.save()
    llm.script(call("datetime"), text("approved and done"))
    session = settle(start(hosted))
    assert session.status == S.WAITING_APPROVAL and session.waiting_approval_id
    assert not [m for m in messages_of(session) if m.role == MessageRole.TOOL]  # nothing ran yet
    approval_decide(approval_id=session.waiting_approval_id, decision="allow_once", actor=None)
    session = settle(session, past_approval=session.waiting_approval_id)
    assert session.status == S.COMPLETED and session.result == "approved and done"
    result = [m for m in messages_of(session) if m.role == MessageRole.TOOL][0]
    assert result.verdict == "ok" and str(result.approval_id) and result.invocation_id


def test_a_denied_call_is_told_to_the_model_and_the_run_goes_on(hosted, llm, runner):
    from tools_app.services.approvals import approval_decide

    hosted.mode = "manual"
    hosted.save()
    llm.script(call("datetime"), text("ok, I will not"))
    session = settle(start(hosted))
    approval_decide(approval_id=session.waiting_approval_id, decision="deny", actor=None)
    session = settle(session, past_approval=session.waiting_approval_id)
    assert session.status == S.COMPLETED
    result = [m for m in messages_of(session) if m.role == MessageRole.TOOL][0]
    assert result.verdict == "denied" and "denied" in result.content
    assert "denied" in [m for m in llm.requests[1]["messages"] if m["role"] == "tool"][0]["content"]


def test_a_parked_session_resumes_in_a_new_runner_after_every_runner_stopped(hosted, llm, transactional_db):
    from runtime_app.runner import Runner
    from tools_app.services.approvals import approval_decide

    hosted.mode = "manual"
    hosted.save()
    llm.script(call("datetime"), text("resumed elsewhere"))
    first = Runner(threads=2, poll=0.02, owner="runner-before-restart").start()
    session = settle(start(hosted))
    first.stop()
    assert session.status == S.WAITING_APPROVAL
    approval_decide(approval_id=session.waiting_approval_id, decision="allow_once", actor=None)
    second = Runner(threads=2, poll=0.02, owner="runner-after-restart").start()
    try:
        session = settle(session, past_approval=session.waiting_approval_id)
    finally:
        second.stop()
    assert session.status == S.COMPLETED and session.result == "resumed elsewhere"


def test_cancel_stops_the_in_flight_model_request(hosted, llm, runner):
    llm.script(Reply(content="thinking", stall=True))
    session = start(hosted)
    assert llm.stalled.wait(30)  # the model request is in flight
    session_cancel(session=session, actor="staff:tester")
    session = settle(session)
    assert session.status == S.CANCELLED
    assert runner.wait_idle(30)  # the run let go of the session: the stalled request was abandoned
    assert not [m for m in messages_of(session) if m.role == MessageRole.ASSISTANT]


def test_a_message_to_an_ended_session_starts_a_new_run_that_sees_the_history(hosted, llm, runner):
    llm.script(text("first answer"), text("second answer"))
    session = settle(start(hosted, message="one"))
    session_message_post(session=session, content="two")
    session = settle(session)
    assert session.result == "second answer" and session.iterations == 1
    contents = [m["content"] for m in llm.requests[1]["messages"] if m["role"] in ("user", "assistant")]
    assert contents == ["one", "first answer", "two"]


def test_the_system_prompt_is_assembled_from_the_agents_context_files(hosted, llm, runner):
    from tools_app.services.context_files import ContextActor, context_file_write

    context_file_write(agent=hosted, name="SOUL.md", content="You are a careful auditor.", actor=ContextActor.of_agent(hosted))
    llm.script(text("hi"))
    settle(start(hosted))
    system = llm.requests[0]["messages"][0]
    assert system["role"] == "system" and "# SOUL.md" in system["content"] and "careful auditor" in system["content"]


def test_the_anthropic_messages_protocol_runs_the_same_loop(llm, runner):
    from tests.factories import make_agent

    provider = make_provider(llm, kind="anthropic", name="local-claude")
    agent = make_agent(provider=provider.name, model="claude-test")
    llm.script(call("datetime"), text("done via messages"))
    session = settle(start(agent))
    assert session.status == S.COMPLETED and session.result == "done via messages"
    assert llm.requests[0]["path"].endswith("/v1/messages")
    blocks = llm.requests[1]["messages"][-1]["content"]
    assert blocks[0]["type"] == "tool_result"
    assert json.loads(json.dumps(blocks[0]))["tool_use_id"].startswith(("toolu", "call"))


def test_a_provider_allows_at_most_max_concurrent_requests_across_runs(llm, runner):
    from tests.factories import make_agent

    provider = make_provider(llm, name="narrow", max_concurrent=1)
    agent = make_agent(provider=provider.name, model="m")
    llm.responder = lambda body: text("ok")
    sessions = [start(agent, message=f"m{i}") for i in range(4)]
    assert all(settle(s).status == S.COMPLETED for s in sessions)
    assert llm.max_in_flight == 1


def test_cancelling_a_parked_session_withdraws_its_approval_request(hosted, llm, runner):
    from tools_app.models import ApprovalRequest

    hosted.mode = "manual"
    hosted.save()
    llm.script(call("datetime"))
    session = settle(start(hosted))
    approval_id = session.waiting_approval_id
    session_cancel(session=session, actor="staff:tester")
    assert ApprovalRequest.objects.get(pk=approval_id).status == "cancelled"


def test_cancel_stops_the_tool_call_in_flight_and_its_processes(hosted, llm, runner):
    from tests.sandbox_app.procs import cancel_once_running, sleep_marker, wait_no_leftovers

    marker = sleep_marker()
    llm.script(call("exec", command=f"sleep {marker}"))
    session = start(hosted)
    with cancel_once_running("sleep", marker) as running:  # set once the sandboxed sleep is alive
        assert running.wait(60), "the tool call never started its process"
    session_cancel(session=session, actor="staff:tester")
    assert runner.wait_idle(30)
    assert wait_no_leftovers("sleep", marker, seconds=15) == []
    session.refresh_from_db()
    assert session.status == S.CANCELLED
    assert not [m for m in messages_of(session) if m.role == MessageRole.TOOL]  # the interrupted call left no result

