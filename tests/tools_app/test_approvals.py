"""The approval system through the real pipeline, services and database: modes, permissions, the exec matrix,
requests bound to the exact call, decisions, expiry, exactly-once execution, rules and held file changes."""
import threading
from datetime import timedelta

import pytest
from django.db import OperationalError, connection
from django.utils import timezone

from goclaw.errors import Conflict, Gone, ValidationError
from tests.factories import make_agent
from tools_app import pipeline
from tools_app.base import Tool, ToolResult
from tools_app.models import ApprovalRequest, ApprovalRule, PendingChange, ToolInvocation, ToolPermission
from tools_app.registry import registry
from tools_app.services import approvals as svc
from tools_app import execution
from tools_app.services.agents import agent_update
from tools_app.services.policy import tool_permission_save, tool_policy_save

pytestmark = pytest.mark.django_db


def permit(**fields):
    """A tool permission, written as the admin writes it (the service drops every process's cached permissions)."""
    return tool_permission_save(actor=None, permission=ToolPermission(**fields))[0]

FAKE_KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0"


class LookTool(Tool):
    name = "look"
    description = "reads"
    parameters = {"type": "object", "properties": {"what": {"type": "string"}}, "additionalProperties": False}
    read_only = True

    def run(self, ctx, args):
        return ToolResult(for_llm="looked")


class ChangeTool(Tool):
    name = "change"
    description = "changes something"
    parameters = {"type": "object", "properties": {"what": {"type": "string"}, "token": {"type": "string"}},
                  "additionalProperties": False}
    read_only = False

    def run(self, ctx, args):
        return ToolResult(for_llm="changed " + args.get("what", ""))


class GatedTool(Tool):
    name = "gated"
    description = "every call needs a person"
    read_only = True
    always_require_approval = True

    def run(self, ctx, args):
        return ToolResult(for_llm="ran gated")


@pytest.fixture
def reg():
    r = registry.clone()
    for tool in (LookTool(), ChangeTool(), GatedTool()):
        r.register(tool)
    return r


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user("approver", password="pw-approver-1", is_staff=True)


def call(agent, tool, arguments=None, **kw):
    return pipeline.ToolCall(agent=agent, tool=tool, arguments=arguments if arguments is not None else {}, **kw)


def run(agent, tool, arguments=None, reg=None, **kw):
    return pipeline.execute(call(agent, tool, arguments, **kw), reg or registry)


def verdict(outcome):
    """ok/error → allow, denied → deny, pending with an approval → ask, pending with a held change → hold."""
    if outcome.status == "pending_approval":
        return "hold" if "pending_change_id" in outcome.extra else "ask"
    return {"ok": "allow", "error": "allow", "denied": "deny"}[outcome.status]


def with_mode(agent, mode, **config):
    return agent_update(agent=agent, mode=mode, other_config={**agent.other_config, **config})


def make_pending(agent, reg, tool="gated", arguments=None, **kw):
    outcome = run(agent, tool, arguments, reg, **kw)
    assert outcome.status == "pending_approval", outcome.for_llm
    return ApprovalRequest.objects.get(pk=outcome.extra["approval_id"])


# --- modes × capabilities ------------------------------------------------------------------------------
CAPABILITIES = {
    "read": ("look", {"what": "x"}),
    "mutating": ("change", {"what": "x"}),
    "always_require_approval": ("gated", {}),
    "fs_write": ("write_file", {"path": "a.txt", "content": "hello"}),
}
EXPECTED = {  # mode: (read, mutating, always_require_approval, fs_write)
    "autonomous": ("allow", "allow", "ask", "allow"),
    "cautious": ("allow", "ask", "ask", "ask"),
    "manual": ("ask", "ask", "ask", "ask"),
    "plan": ("allow", "deny", "ask", "deny"),
    "review": ("allow", "ask", "ask", "hold"),
    "audit": ("allow", "deny", "ask", "hold"),
}


@pytest.mark.parametrize("mode", list(EXPECTED))
@pytest.mark.parametrize("capability", list(CAPABILITIES))
def test_each_mode_resolves_each_tool_capability(agent, reg, mode, capability):
    agent = with_mode(agent, mode)
    tool, arguments = CAPABILITIES[capability]
    outcome = run(agent, tool, arguments, reg)
    assert verdict(outcome) == EXPECTED[mode][list(CAPABILITIES).index(capability)], outcome.for_llm
    written = (agent.workspace_path / "a.txt").exists()
    assert written == (capability == "fs_write" and verdict(outcome) == "allow")


def test_api_agents_default_to_autonomous(agent):
    assert agent.mode == "autonomous"


def test_plan_mode_unlocks_mutating_tools_for_the_approved_session_only(agent, reg, staff):
    agent = with_mode(agent, "plan")
    assert verdict(run(agent, "change", {"what": "x"}, reg, session_key="s1")) == "deny"
    plan = make_pending(agent, reg, "submit_plan", {"plan": "1. change x"}, session_key="s1")
    assert plan.summary.startswith("submit_plan(")
    assert verdict(run(agent, "change", {"what": "x"}, reg, session_key="s1")) == "deny"
    svc.approval_decide(approval_id=plan.pk, decision="allow_once", actor=staff)
    assert run(agent, "change", {"what": "x"}, reg, session_key="s1").for_llm == "changed x"
    assert verdict(run(agent, "change", {"what": "x"}, reg, session_key="s2")) == "deny"
    assert "approved" in execution.approval_execute(approval_id=plan.pk, agent=agent).for_llm


# --- permissions --------------------------------------------------------------------------------------
def test_a_deny_permission_in_any_scope_wins_over_an_allow(agent, reg):
    permit(scope="agent", agent=agent, tool="look", permission="allow")
    permit(scope="global", tool="look", permission="deny")
    outcome = run(agent, "look", {}, reg)
    assert outcome.status == "denied" and "tool permission" in outcome.for_llm


def test_the_most_specific_permission_decides_between_allow_and_ask(agent, reg):
    permit(scope="global", tool="look", permission="ask")
    assert verdict(run(agent, "look", {}, reg)) == "ask"
    permit(scope="agent", agent=agent, tool="look", permission="allow")
    assert verdict(run(agent, "look", {}, reg)) == "allow"


def test_an_allow_permission_relaxes_a_cautious_ask_but_never_always_require_approval(agent, reg):
    agent = with_mode(agent, "cautious")
    permit(scope="mode", mode="cautious", tool="change", permission="allow")
    permit(scope="mode", mode="cautious", tool="gated", permission="allow")
    assert verdict(run(agent, "change", {"what": "x"}, reg)) == "allow"
    assert verdict(run(agent, "gated", {}, reg)) == "ask"


def test_permissions_accept_group_names(agent):
    permit(scope="agent", agent=agent, tool="group:fs", permission="deny")
    assert run(agent, "read_file", {"path": "x"}).status == "denied"
    assert run(agent, "datetime", {}).status == "ok"


def test_a_permission_of_another_agent_or_mode_does_not_apply(agent, reg):
    other = make_agent()
    permit(scope="agent", agent=other, tool="look", permission="deny")
    permit(scope="mode", mode="manual", tool="look", permission="deny")
    assert verdict(run(agent, "look", {}, reg)) == "allow"


# --- the exec matrix --------------------------------------------------------------------------------
@pytest.mark.parametrize("security,ask,hit,miss", [
    ("deny", "off", "deny", "deny"),
    ("deny", "on-miss", "deny", "deny"),
    ("deny", "always", "deny", "deny"),
    ("allowlist", "off", "allow", "deny"),
    ("allowlist", "on-miss", "allow", "ask"),
    ("allowlist", "always", "ask", "ask"),
    ("full", "off", "allow", "allow"),
    ("full", "on-miss", "allow", "ask"),
    ("full", "always", "ask", "ask"),
])
def test_the_exec_security_by_ask_matrix(agent, security, ask, hit, miss):
    agent = with_mode(agent, "autonomous", exec_security=security, exec_ask=ask, exec_allowlist=["echo *", "ls"])
    assert verdict(run(agent, "exec", {"command": "echo allowed"})) == hit
    assert verdict(run(agent, "exec", {"command": "touch missed"})) == miss


@pytest.mark.parametrize("command", [
    "echo ok && touch chained",  # a chain: every simple command must be covered
    "echo ok; touch chained",
    "echo $(touch substituted)",
    "env sh -c 'touch wrapped'",  # wrappers are unwrapped: what runs is `touch`
    "echo ok > redirected.txt",
])
def test_allowlist_hits_cover_every_simple_command_not_the_first_word(agent, command):
    agent = with_mode(agent, "autonomous", exec_security="allowlist", exec_ask="off", exec_allowlist=["echo *"])
    outcome = run(agent, "exec", {"command": command})
    assert outcome.status == "denied" and "allowlist" in outcome.for_llm
    assert not list(agent.workspace_path.iterdir())


def test_a_plain_chain_of_allowlisted_commands_passes(agent):
    agent = with_mode(agent, "autonomous", exec_security="allowlist", exec_ask="off", exec_allowlist=["echo *", "pwd"])
    assert run(agent, "exec", {"command": "echo one && pwd"}).status == "ok"


def test_the_shell_safety_check_runs_before_the_gate(agent):
    agent = with_mode(agent, "manual")
    outcome = run(agent, "exec", {"command": "rm -rf ~"})
    assert outcome.status == "denied" and "safety policy" in outcome.for_llm
    assert not ApprovalRequest.objects.exists()


# --- the request row -----------------------------------------------------------------------------
def test_an_ask_creates_a_durable_request_bound_to_the_exact_call(agent):
    agent = with_mode(agent, "cautious")
    (agent.workspace_path / "sub").mkdir(parents=True)
    command = f"git -C . status && echo {FAKE_KEY}"
    outcome = run(agent, "exec", {"command": command, "working_dir": "sub"}, user_id="u1", session_key="s1")
    req = ApprovalRequest.objects.get(pk=outcome.extra["approval_id"])
    assert outcome.extra["expires_at"] == req.expires_at.isoformat()
    assert (req.agent, req.user_id, req.session_key, req.tool_name, req.status) == (agent, "u1", "s1", "exec", "pending")
    assert timedelta(seconds=119) < req.expires_at - req.requested_at <= timedelta(seconds=120)
    assert req.args_hash == svc.arguments_hash("exec", {"command": command, "working_dir": "sub"})
    assert FAKE_KEY not in str(req.arguments) and FAKE_KEY not in req.summary and FAKE_KEY not in str(req.details)
    assert str(agent.workspace_path / "sub") in req.summary
    assert req.details["simple_commands"][0] == "git -C . status" and req.details["simple_commands"][1].startswith("echo ")
    assert ToolInvocation.objects.get(pk=outcome.invocation_id).status == "pending_approval"


def test_the_timeout_is_configurable_per_agent(agent, reg):
    agent = with_mode(agent, "autonomous", approval_timeout_seconds=600)
    req = make_pending(agent, reg)
    assert req.expires_at - req.requested_at == timedelta(seconds=600)


def test_canonical_arguments_ignore_key_order_but_nothing_else():
    assert svc.arguments_hash("t", {"a": 1, "b": "x"}) == svc.arguments_hash("t", {"b": "x", "a": 1})
    assert svc.arguments_hash("t", {"a": 1}) != svc.arguments_hash("t", {"a": 1.5})
    assert svc.arguments_hash("t", {"a": 1}) != svc.arguments_hash("u", {"a": 1})


# --- decisions ------------------------------------------------------------------------------------
def test_deny_is_final_and_a_second_decision_conflicts(agent, reg, staff):
    req = make_pending(agent, reg)
    assert svc.approval_decide(approval_id=req.pk, decision="deny", actor=staff, note="no").status == "denied"
    with pytest.raises(Conflict) as exc:
        svc.approval_decide(approval_id=req.pk, decision="allow_once", actor=staff)
    assert exc.value.code == "approval_already_decided"
    with pytest.raises(Conflict):
        execution.approval_execute(approval_id=req.pk, agent=agent)
    req.refresh_from_db()
    assert (req.decision, req.decided_by, req.note) == ("deny", staff, "no") and req.decided_at


@pytest.mark.django_db(transaction=True)
def test_concurrent_decisions_exactly_one_wins(staff):
    agent = make_agent()
    reg = registry.clone()
    reg.register(GatedTool())
    req = make_pending(agent, reg)
    barrier, results = threading.Barrier(6), []

    def decide(decision):
        barrier.wait()
        try:
            results.append(svc.approval_decide(approval_id=req.pk, decision=decision, actor=staff).decision)
        except Conflict:
            results.append("conflict")
        finally:
            connection.close()

    threads = [threading.Thread(target=decide, args=(d,)) for d in ["allow_once", "deny"] * 3]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count("conflict") == 5
    req.refresh_from_db()
    assert req.decision in results and req.status in ("approved", "denied")


def test_a_decision_after_expiry_is_refused_without_any_sweeper(agent, reg, staff):
    req = make_pending(agent, reg)
    ApprovalRequest.objects.filter(pk=req.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(Gone) as exc:
        svc.approval_decide(approval_id=req.pk, decision="allow_once", actor=staff)
    assert exc.value.code == "approval_expired"
    req.refresh_from_db()
    assert req.status == "expired" and req.decision == ""
    with pytest.raises(Gone):
        execution.approval_execute(approval_id=req.pk, agent=agent)


def test_an_approval_not_used_before_its_deadline_expires(agent, reg, staff):
    req = make_pending(agent, reg)
    svc.approval_decide(approval_id=req.pk, decision="allow_once", actor=staff)
    ApprovalRequest.objects.filter(pk=req.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(Gone):
        execution.approval_execute(approval_id=req.pk, agent=agent)
    assert ApprovalRequest.objects.get(pk=req.pk).status == "expired"


def test_the_sweeper_expires_overdue_requests_only(agent, reg, staff):
    overdue, fresh, used = make_pending(agent, reg), make_pending(agent, reg), make_pending(agent, reg)
    svc.approval_decide(approval_id=used.pk, decision="allow_once", actor=staff)
    assert execution.approval_execute(approval_id=used.pk, agent=agent, tools=reg).status == "ok"
    past = timezone.now() - timedelta(seconds=1)
    ApprovalRequest.objects.filter(pk__in=[overdue.pk, used.pk]).update(expires_at=past)
    assert svc.approval_sweep_expired() == 1
    statuses = dict(ApprovalRequest.objects.values_list("pk", "status"))
    assert (statuses[overdue.pk], statuses[fresh.pk], statuses[used.pk]) == ("expired", "pending", "approved")
    assert svc.approval_sweep_expired() == 0


def test_the_sweep_is_scheduled_every_30_seconds():
    from goclaw.services import SCHEDULES

    assert ("tools_app.tasks.sweep_expired_approvals", "* * * * * */30") in SCHEDULES.values()


def test_the_agent_can_cancel_its_own_pending_request(agent, reg):
    req = make_pending(agent, reg)
    from goclaw.errors import NotFound

    with pytest.raises(NotFound):
        svc.approval_cancel(approval_id=req.pk, agent=make_agent())
    assert svc.approval_cancel(approval_id=req.pk, agent=agent).status == "cancelled"
    with pytest.raises(Conflict):
        svc.approval_cancel(approval_id=req.pk, agent=agent)


# --- waiting ----------------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_a_long_poll_is_woken_by_a_decision_made_in_this_process(staff, monkeypatch):
    """With the poll interval at a minute, only the wake-up can end the wait early: the waiter's condition wait
    must come back notified (not timed out), with the decided status."""
    import sys

    agent = make_agent()
    reg = registry.clone()
    reg.register(GatedTool())
    req = make_pending(agent, reg)
    waiting = sys.modules[svc.approval_wait.__module__]
    inside, notified, result = threading.Event(), [], {}

    class ObservedCondition(threading.Condition):
        def wait(self, timeout=None):
            inside.set()  # still holding the lock: the decision's notify_all cannot run before this thread waits
            woken = super().wait(timeout)
            notified.append(woken)
            return woken

    monkeypatch.setattr(waiting, "POLL_SECONDS", 60)
    monkeypatch.setattr(waiting, "_decided", ObservedCondition())

    def waiter():
        try:
            result["status"] = svc.approval_wait(approval_id=req.pk, seconds=60).status
        finally:
            connection.close()

    thread = threading.Thread(target=waiter)
    thread.start()
    assert inside.wait(timeout=30), "the waiter never reached its wait"  # a hang guard, not a speed target
    svc.approval_decide(approval_id=req.pk, decision="allow_once", actor=staff)
    thread.join()
    assert result["status"] == "approved"
    assert notified == [True]  # woken by the decision, never by the poll interval running out


@pytest.mark.django_db(transaction=True)
def test_a_long_poll_marks_an_overdue_request_expired():
    agent = make_agent()
    reg = registry.clone()
    reg.register(GatedTool())
    req = make_pending(agent, reg)
    ApprovalRequest.objects.filter(pk=req.pk).update(expires_at=timezone.now() + timedelta(seconds=0.5))
    assert svc.approval_wait(approval_id=req.pk, seconds=10).status == "expired"


# --- executing exactly what was approved -------------------------------------------------------------
def test_an_approved_call_runs_exactly_once(agent, reg, staff):
    agent = with_mode(agent, "cautious")
    req = make_pending(agent, reg, "change", {"what": "the thing"}, session_key="s9")
    svc.approval_decide(approval_id=req.pk, decision="allow_once", actor=staff)
    outcome = execution.approval_execute(approval_id=req.pk, agent=agent, tools=reg)
    assert (outcome.status, outcome.for_llm, outcome.extra["approval_id"]) == ("ok", "changed the thing", str(req.pk))
    row = ToolInvocation.objects.get(pk=outcome.invocation_id)
    assert (row.status, row.session_key, row.arguments) == ("ok", "s9", {"what": "the thing"})
    req.refresh_from_db()
    assert req.consumed_at and str(req.invocation_id) == outcome.invocation_id
    with pytest.raises(Conflict) as exc:
        execution.approval_execute(approval_id=req.pk, agent=agent, tools=reg)
    assert exc.value.code == "approval_already_used"


def test_other_arguments_are_refused_and_do_not_use_up_the_approval(agent, reg, staff):
    agent = with_mode(agent, "cautious")
    req = make_pending(agent, reg, "change", {"what": "small"})
    svc.approval_decide(approval_id=req.pk, decision="allow_once", actor=staff)
    with pytest.raises(Conflict) as exc:
        execution.approval_execute(approval_id=req.pk, agent=agent, arguments={"what": "big"}, tools=reg)
    assert exc.value.code == "arguments_mismatch"
    assert execution.approval_execute(approval_id=req.pk, agent=agent, arguments={"what": "small"}, tools=reg).for_llm == "changed small"


def test_redacted_arguments_must_be_resent_exactly(agent, reg, staff):
    agent = with_mode(agent, "cautious")
    req = make_pending(agent, reg, "change", {"what": "x", "token": FAKE_KEY})
    assert FAKE_KEY not in str(req.arguments)
    svc.approval_decide(approval_id=req.pk, decision="allow_once", actor=staff)
    with pytest.raises(ValidationError) as exc:
        execution.approval_execute(approval_id=req.pk, agent=agent, tools=reg)
    assert exc.value.code == "arguments_required"
    assert execution.approval_execute(approval_id=req.pk, agent=agent, arguments={"what": "x", "token": FAKE_KEY}, tools=reg).status == "ok"


def test_another_agent_cannot_use_an_approval(agent, reg, staff):
    from goclaw.errors import NotFound

    req = make_pending(agent, reg)
    svc.approval_decide(approval_id=req.pk, decision="allow_once", actor=staff)
    with pytest.raises(NotFound):
        execution.approval_execute(approval_id=req.pk, agent=make_agent(), tools=reg)


def test_a_pending_request_cannot_be_executed(agent, reg):
    req = make_pending(agent, reg)
    with pytest.raises(Conflict) as exc:
        execution.approval_execute(approval_id=req.pk, agent=agent, tools=reg)
    assert exc.value.code == "approval_not_approved"


def test_policy_is_checked_again_at_execution(agent, reg, staff):
    agent = with_mode(agent, "cautious")
    req = make_pending(agent, reg, "change", {"what": "x"})
    svc.approval_decide(approval_id=req.pk, decision="allow_once", actor=staff)
    permit(scope="agent", agent=agent, tool="change", permission="deny")
    outcome = execution.approval_execute(approval_id=req.pk, agent=agent, tools=reg)
    assert outcome.status == "denied" and ToolInvocation.objects.get(pk=outcome.invocation_id).status == "denied"
    assert ApprovalRequest.objects.get(pk=req.pk).consumed_at is None


def test_execution_is_vetted_in_the_original_call_context(agent, reg, staff):
    """A subagent's approved call is re-checked as a subagent call (depth, allow list), not as a top-level one."""
    from tools_app.models import ToolPolicy

    req = make_pending(agent, reg, "gated", {}, subagent_depth=1, request_allow=["gated", "look"])
    assert req.call_context["subagent_depth"] == 1 and req.call_context["request_allow"] == ["gated", "look"]
    svc.approval_decide(approval_id=req.pk, decision="allow_once", actor=staff)
    subagent_policy = ToolPolicy.objects.get(scope="subagent")
    subagent_policy.deny = ["gated"]
    tool_policy_save(actor=None, policy=subagent_policy)
    outcome = execution.approval_execute(approval_id=req.pk, agent=agent, tools=reg)
    assert outcome.status == "denied" and "no longer available" in outcome.for_llm


def test_the_gate_fails_closed_on_a_database_error(agent, reg):
    agent = with_mode(agent, "cautious")

    def broken_approval_tables(execute, sql, params, many, context):
        if "tools_app_toolpermission" in sql or "tools_app_approval" in sql:
            raise OperationalError("simulated outage")
        return execute(sql, params, many, context)

    with connection.execute_wrapper(broken_approval_tables):
        outcome = run(agent, "look", {}, reg)
    assert outcome.status == "denied" and outcome.for_llm == "the approval check failed; the call was refused"


# --- allow-always rules ---------------------------------------------------------------------------
def test_allow_always_approves_exactly_the_approved_command_and_no_more(agent, staff):
    agent = with_mode(agent, "cautious")
    req = make_pending(agent, None, "exec", {"command": "git push origin main"})
    svc.approval_decide(approval_id=req.pk, decision="allow_always", actor=staff)
    rule = ApprovalRule.objects.get(created_from=req)
    assert (rule.agent, rule.match, rule.pattern, rule.user_id) == (agent, "exact", "git push origin main", "")

    assert run(agent, "exec", {"command": "git push origin main"}).status != "pending_approval"  # ran (no repo: error)
    for other in ["git push --force origin main", "git push origin main && touch x", "git push origin main2",
                  "git status", "git push origin main; true"]:
        assert verdict(run(agent, "exec", {"command": other})) == "ask", other
    other_agent = with_mode(make_agent(), "cautious")
    assert verdict(run(other_agent, "exec", {"command": "git push origin main"})) == "ask"
    rule.refresh_from_db()
    assert rule.use_count == 1 and rule.last_used_at is not None


def test_a_widened_prefix_rule_matches_plain_commands_only(agent, staff):
    agent = with_mode(agent, "cautious")
    req = make_pending(agent, None, "exec", {"command": "echo deploy staging"})
    with pytest.raises(ValidationError):  # just the program name is never enough
        svc.approval_decide(approval_id=req.pk, decision="allow_always", actor=staff, rule_match="prefix", rule_pattern="echo ")
    with pytest.raises(ValidationError):  # the pattern must cover what was approved
        svc.approval_decide(approval_id=req.pk, decision="allow_always", actor=staff, rule_match="prefix", rule_pattern="echo build ")
    svc.approval_decide(approval_id=req.pk, decision="allow_always", actor=staff, rule_match="prefix", rule_pattern="echo deploy ")
    assert run(agent, "exec", {"command": "echo deploy production"}).status == "ok"
    for other in ["echo deploy x && touch y", "echo deploy $(touch y)", "echo deploy x > y", "echo build x"]:
        assert verdict(run(agent, "exec", {"command": other})) == "ask", other


def test_a_glob_rule_on_named_arguments(agent, reg, staff):
    agent = with_mode(agent, "cautious")
    req = make_pending(agent, reg, "change", {"what": "docs/a.md"})
    svc.approval_decide(approval_id=req.pk, decision="allow_always", actor=staff, rule_match="glob",
                        rule_pattern='{"what": "docs/*.md"}')
    assert verdict(run(agent, "change", {"what": "docs/b.md"}, reg)) == "allow"
    assert verdict(run(agent, "change", {"what": "src/b.py"}, reg)) == "ask"
    assert verdict(run(agent, "change", {"what": "docs/b.md", "token": "t"}, reg)) == "ask"


def test_rules_never_turn_a_deny_into_allow_nor_apply_to_always_require_approval(agent, reg, staff):
    agent = with_mode(agent, "cautious")
    req = make_pending(agent, reg, "change", {"what": "x"})
    svc.approval_decide(approval_id=req.pk, decision="allow_always", actor=staff)
    permit(scope="agent", agent=agent, tool="change", permission="deny")
    assert verdict(run(agent, "change", {"what": "x"}, reg)) == "deny"
    gated = make_pending(agent, reg)
    with pytest.raises(ValidationError) as exc:
        svc.approval_decide(approval_id=gated.pk, decision="allow_always", actor=staff)
    assert exc.value.code == "rule_not_allowed"
    assert ApprovalRequest.objects.get(pk=gated.pk).status == "pending"


def test_revoked_expired_and_other_user_rules_do_not_match(agent, reg, staff):
    agent = with_mode(agent, "cautious")
    req = make_pending(agent, reg, "change", {"what": "x"}, user_id="alice")
    svc.approval_decide(approval_id=req.pk, decision="allow_always", actor=staff, rule_user_only=True)
    rule = ApprovalRule.objects.get()
    assert verdict(run(agent, "change", {"what": "x"}, reg, user_id="alice")) == "allow"
    assert verdict(run(agent, "change", {"what": "x"}, reg, user_id="bob")) == "ask"
    ApprovalRule.objects.filter(pk=rule.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert verdict(run(agent, "change", {"what": "x"}, reg, user_id="alice")) == "ask"
    ApprovalRule.objects.filter(pk=rule.pk).update(expires_at=None)
    svc.approval_rule_revoke(rule=rule, actor=staff)
    assert verdict(run(agent, "change", {"what": "x"}, reg, user_id="alice")) == "ask"


# --- review / audit: held file changes -------------------------------------------------------------
def test_review_mode_holds_writes_until_a_person_accepts_them(agent, staff):
    agent = with_mode(agent, "review")
    outcome = run(agent, "write_file", {"path": "notes/a.txt", "content": "v1\n"}, session_key="s")
    change = PendingChange.objects.get(pk=outcome.extra["pending_change_id"])
    assert "held" in outcome.for_llm and not (agent.workspace_path / "notes" / "a.txt").exists()
    assert (change.path, change.status, change.summary) == ("notes/a.txt", "pending", "write notes/a.txt: 3 characters")
    accepted = execution.pending_change_decide(change_id=change.pk, accept=True, actor=staff)
    assert accepted.status == "accepted" and (agent.workspace_path / "notes" / "a.txt").read_text() == "v1\n"
    assert ToolInvocation.objects.get(pk=accepted.invocation_id).status == "ok"
    with pytest.raises(Conflict):
        execution.pending_change_decide(change_id=change.pk, accept=True, actor=staff)


def test_rejected_changes_are_never_written_and_a_failed_edit_is_reported(agent, staff):
    agent = with_mode(agent, "audit")
    (agent.workspace_path / "f.txt").write_text("old\n")
    first = run(agent, "write_file", {"path": "g.txt", "content": "x"}, session_key="s").extra["pending_change_id"]
    edit = run(agent, "edit", {"path": "f.txt", "old_string": "missing", "new_string": "new"}, session_key="s")
    assert execution.pending_change_decide(change_id=first, accept=False, actor=staff).status == "rejected"
    assert not (agent.workspace_path / "g.txt").exists()
    failed = execution.pending_change_decide(change_id=edit.extra["pending_change_id"], accept=True, actor=staff)
    assert failed.status == "failed" and failed.result and (agent.workspace_path / "f.txt").read_text() == "old\n"


def test_a_session_batch_is_accepted_in_order(agent, staff):
    agent = with_mode(agent, "review")
    run(agent, "write_file", {"path": "b.txt", "content": "one\n"}, session_key="s")
    run(agent, "edit", {"path": "b.txt", "old_string": "one", "new_string": "two"}, session_key="s")
    run(agent, "write_file", {"path": "other.txt", "content": "x"}, session_key="elsewhere")
    done = execution.pending_change_decide_batch(agent=agent, session_key="s", accept=True, actor=staff)
    assert [c.status for c in done] == ["accepted", "accepted"]
    assert (agent.workspace_path / "b.txt").read_text() == "two\n" and not (agent.workspace_path / "other.txt").exists()
