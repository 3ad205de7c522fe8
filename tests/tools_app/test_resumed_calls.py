"""A call a person let go on (an approved request, an accepted held change) runs through the same pipeline as a
first run: every check again, against the agent's tool set and policy of *now*, and the decision is spent only
when every other check passed."""
import pytest
from django.db import transaction

from goclaw.errors import Conflict
from tests.factories import make_agent
from tools_app import pipeline
from tools_app.base import Tool, ToolResult
from tools_app.choices import PolicyScope
from tools_app.hooks import HookResult, PreHook, hooks
from tools_app.models import ApprovalRequest, PendingChange, ToolInvocation, ToolPolicy
from tools_app.policy import policy_changed
from tools_app.services import approvals as svc
from tools_app import execution
from tools_app.services.agents import agent_update
from tools_app.toolsets import ToolSource, tool_source_register, tool_source_unregister, tools_changed

pytestmark = pytest.mark.django_db


class ChangeTool(Tool):
    name = "resume_change"
    description = "changes something"
    parameters = {"type": "object", "properties": {"what": {"type": "string", "maxLength": 10}},
                  "required": ["what"], "additionalProperties": False}
    read_only = False

    def run(self, ctx, args):
        return ToolResult(for_llm="changed " + args["what"])


class Source(ToolSource):
    """A source whose tools the test switches on and off (as an admin edit or an MCP refresh would)."""

    name = "resume-test"
    enabled = True

    def tools_for(self, agent, user_id):
        return [ChangeTool()] if self.enabled else []


@pytest.fixture
def source():
    src = Source()
    tool_source_register(src)
    yield src
    tool_source_unregister(src.name)


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user("resumer", password="pw-resumer-1", is_staff=True)


def agent_in(mode, **config):
    return agent_update(agent=make_agent(other_config=config), mode=mode)


def ask(agent, what="x", **context):
    """A first run that a person must approve; returns the request."""
    outcome = pipeline.execute(pipeline.ToolCall(agent, "resume_change", {"what": what}, session_key="s", **context))
    assert outcome.status == "pending_approval", outcome.for_llm
    return ApprovalRequest.objects.get(pk=outcome.extra["approval_id"])


def approved(agent, staff, **kw):
    req = ask(agent, **kw)
    svc.approval_decide(approval_id=req.pk, decision="allow_once", actor=staff)
    return req


def unused(req) -> bool:
    req.refresh_from_db()
    return req.consumed_at is None and req.status == "approved"


def test_an_approved_call_resumes_against_the_agents_composed_tool_set(source, staff):
    agent = agent_in("cautious")
    req = approved(agent, staff)
    outcome = execution.approval_execute(approval_id=req.pk, agent=agent)
    assert (outcome.status, outcome.for_llm) == ("ok", "changed x")
    assert not unused(req)


def test_a_resumed_call_is_rate_limited_like_a_first_run_and_keeps_its_approval(source, staff):
    agent = agent_in("cautious", rate_limit_per_hour=2)
    req = approved(agent, staff)  # the first run took one of the session's two calls
    assert pipeline.execute(pipeline.ToolCall(agent, "datetime", {}, session_key="s")).status == "ok"  # the second
    outcome = execution.approval_execute(approval_id=req.pk, agent=agent)
    assert outcome.status == "rate_limited"
    assert unused(req)  # refused before the approval step: the person's decision is not spent
    row = ToolInvocation.objects.get(pk=outcome.invocation_id)
    assert (row.tool_name, row.status) == ("resume_change", "rate_limited")


def test_arguments_a_hook_rewrites_on_resumption_are_validated_again(source, staff):
    agent = agent_in("cautious")
    req = approved(agent, staff)

    class Lengthen(PreHook):
        name = "test_lengthen"
        priority = 50

        def before(self, ctx, tool, args):
            return HookResult.modify({**args, "what": "far too long for the schema"})

    hooks.add_pre(Lengthen())
    try:
        outcome = execution.approval_execute(approval_id=req.pk, agent=agent)
    finally:
        hooks.remove("test_lengthen")
    assert outcome.status == "invalid_arguments" and "rewritten by a hook" in outcome.for_llm
    assert unused(req)


def test_a_hook_rewrite_into_other_valid_arguments_is_not_what_the_person_approved(source, staff):
    agent = agent_in("cautious")
    req = approved(agent, staff, what="small")

    class Swap(PreHook):
        name = "test_swap"
        priority = 50

        def before(self, ctx, tool, args):
            return HookResult.modify({"what": "big"})

    hooks.add_pre(Swap())
    try:
        with pytest.raises(Conflict) as refused:
            execution.approval_execute(approval_id=req.pk, agent=agent, arguments={"what": "small"})
    finally:
        hooks.remove("test_swap")
    assert refused.value.code == "arguments_mismatch"
    assert unused(req)


def deny_by_policy(agent, source):
    with transaction.atomic():
        ToolPolicy.objects.create(scope=PolicyScope.AGENT, agent=agent, deny=["resume_change"])
        policy_changed()


def drop_from_its_source(agent, source):
    source.enabled = False
    tools_changed()


@pytest.mark.parametrize("change", [deny_by_policy, drop_from_its_source])
def test_an_approval_does_not_outlive_the_tool_set_and_policy_it_was_given_under(change, source, staff):
    agent = agent_in("cautious")
    req = approved(agent, staff)
    change(agent, source)
    outcome = execution.approval_execute(approval_id=req.pk, agent=agent)
    assert outcome.status == "denied" and "no longer available" in outcome.for_llm
    assert unused(req)


def test_a_held_change_is_applied_through_every_check_of_now(source, staff):
    agent = agent_in("review")
    first = pipeline.execute(pipeline.ToolCall(agent, "write_file", {"path": "a.txt", "content": "one"}, session_key="s"))
    second = pipeline.execute(pipeline.ToolCall(agent, "write_file", {"path": "b.txt", "content": "two"}, session_key="s"))
    assert first.status == second.status == "pending_approval"
    applied = execution.pending_change_decide(change_id=first.extra["pending_change_id"], accept=True, actor=staff)
    assert applied.status == "accepted" and (agent.workspace_path / "a.txt").read_text() == "one"

    with transaction.atomic():  # write_file is denied from now on: accepting the other change must not write
        ToolPolicy.objects.create(scope=PolicyScope.AGENT, agent=agent, deny=["write_file"])
        policy_changed()
    refused = execution.pending_change_decide(change_id=second.extra["pending_change_id"], accept=True, actor=staff)
    assert refused.status == "failed" and "no longer available" in refused.result
    assert not (agent.workspace_path / "b.txt").exists()
    assert PendingChange.objects.get(pk=refused.pk).sealed_arguments == ""
