"""Each pipeline step on its own, through the real registry, hooks, database and channel layer."""
import time

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from tests.factories import make_agent
from tools_app import pipeline
from tools_app.base import Tool, ToolError, ToolResult
from tools_app.hooks import HookResult, PostHook, PreHook, hooks
from tools_app.models import StoredToolOutput, ToolInvocation
from tools_app.registry import registry

pytestmark = pytest.mark.django_db

FAKE_KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0"


class EchoTool(Tool):
    name = "echo"
    description = "echo text"
    parameters = {"type": "object", "properties": {"text": {"type": "string"}, "repeat": {"type": "integer", "minimum": 1}},
                  "required": ["text"], "additionalProperties": False}
    group = "test"

    def run(self, ctx, args):
        return ToolResult(for_llm=args["text"] * args.get("repeat", 1), for_user="user:" + args["text"])


class SleepTool(Tool):
    name = "sleepy"
    description = "sleeps"
    timeout_seconds = 0.3

    def run(self, ctx, args):
        time.sleep(2)
        return ToolResult(for_llm="woke up")


class BrokenTool(Tool):
    name = "broken"
    description = "raises"

    def run(self, ctx, args):
        raise KeyError("/secret/internal/path")


class PoliteFailTool(Tool):
    name = "polite_fail"
    description = "raises ToolError"

    def run(self, ctx, args):
        raise ToolError("file not found: notes.txt")


class GatedTool(Tool):
    name = "gated"
    description = "always needs approval"
    always_require_approval = True

    def run(self, ctx, args):
        return ToolResult(for_llm="ran")


@pytest.fixture
def reg():
    r = registry.clone()
    for tool in (EchoTool(), SleepTool(), BrokenTool(), PoliteFailTool(), GatedTool()):
        r.register(tool)
    return r


def call(agent, tool, arguments=None, **kw):
    return pipeline.ToolCall(agent=agent, tool=tool, arguments=arguments if arguments is not None else {}, **kw)


def test_ok_call_returns_result_and_writes_audit_row(agent, reg):
    outcome = pipeline.execute(call(agent, "echo", {"text": "hi"}, session_key="s1", user_id="u1"), reg)
    assert (outcome.status, outcome.for_llm, outcome.for_user, outcome.is_error) == ("ok", "hi", "user:hi", False)
    row = ToolInvocation.objects.get(pk=outcome.invocation_id)
    assert (row.agent_key, row.tool_name, row.status, row.session_key, row.user_id) == (agent.key, "echo", "ok", "s1", "u1")
    assert row.arguments == {"text": "hi"} and row.result_size == 2 and row.duration_ms > 0


def test_unknown_tool_is_denied_naming_the_tool(agent, reg):
    outcome = pipeline.execute(call(agent, "nope"), reg)
    assert outcome.status == "denied" and outcome.is_error
    assert outcome.for_llm == "tool nope is not available to this agent"
    assert ToolInvocation.objects.get(pk=outcome.invocation_id).status == "denied"


def test_tool_outside_the_per_request_allow_list_is_denied(agent, reg):
    assert pipeline.execute(call(agent, "echo", {"text": "x"}, request_allow=["datetime"]), reg).status == "denied"
    assert pipeline.execute(call(agent, "echo", {"text": "x"}, request_allow=["group:test"]), reg).status == "ok"


def test_aliases_resolve_to_the_canonical_tool(agent):
    outcome = pipeline.execute(call(agent, "edit_file", {"path": "a.txt", "old_string": "x", "new_string": "y"}))
    assert ToolInvocation.objects.get(pk=outcome.invocation_id).tool_name == "edit"


def test_invalid_arguments_list_every_problem(agent, reg):
    outcome = pipeline.execute(call(agent, "echo", {"repeat": 0, "extra": 1}), reg)
    assert outcome.status == "invalid_arguments"
    assert "'text' is a required property" in outcome.for_llm
    assert "repeat: 0 is less than the minimum of 1" in outcome.for_llm
    assert "'extra' was unexpected" in outcome.for_llm


def test_non_object_arguments_are_invalid(agent, reg):
    assert pipeline.execute(call(agent, "echo", ["text"]), reg).status == "invalid_arguments"


class _Hook(PreHook):
    def __init__(self, name, priority, result):
        self.name, self.priority, self.result, self.seen = name, priority, result, []

    def before(self, ctx, tool, args):
        self.seen.append(dict(args))
        return self.result


@pytest.fixture
def extra_hooks():
    added = []

    def add(hook):
        hooks.add_pre(hook)
        added.append(hook.name)
        return hook

    yield add
    for name in added:
        hooks.remove(name)


def test_block_stops_the_call_and_later_hooks_do_not_run(agent, reg, extra_hooks):
    blocker = extra_hooks(_Hook("t-block", 30, HookResult.block("no echo today")))
    later = extra_hooks(_Hook("t-later", 40, HookResult.observe("later")))
    outcome = pipeline.execute(call(agent, "echo", {"text": "x"}), reg)
    assert outcome.status == "denied" and outcome.for_llm == "no echo today"
    assert blocker.seen and not later.seen


def test_last_modify_wins_and_observations_are_recorded(agent, reg, extra_hooks):
    extra_hooks(_Hook("t-mod1", 30, HookResult.modify({"text": "first"})))
    extra_hooks(_Hook("t-obs", 35, HookResult.observe("looked twice")))
    extra_hooks(_Hook("t-mod2", 40, HookResult.modify({"text": "second"})))
    outcome = pipeline.execute(call(agent, "echo", {"text": "orig"}), reg)
    assert outcome.for_llm == "second"
    row = ToolInvocation.objects.get(pk=outcome.invocation_id)
    assert row.observed and row.observe_reasons == ["t-obs: looked twice"]


def test_a_modify_that_breaks_the_schema_is_refused(agent, reg, extra_hooks):
    extra_hooks(_Hook("t-bad", 30, HookResult.modify({"nope": 1})))
    assert pipeline.execute(call(agent, "echo", {"text": "x"}), reg).status == "invalid_arguments"


def test_a_crashing_pre_hook_fails_closed(agent, reg, extra_hooks):
    class Crash(PreHook):
        name, priority = "t-crash", 30

        def before(self, ctx, tool, args):
            raise RuntimeError("boom")

    extra_hooks(Crash())
    outcome = pipeline.execute(call(agent, "echo", {"text": "x"}), reg)
    assert outcome.status == "denied" and "t-crash failed" in outcome.for_llm


def test_failing_post_hook_never_changes_the_result(agent, reg):
    class Bad(PostHook):
        name = "t-post"

        def after(self, *a):
            raise RuntimeError("observer down")

    hooks.add_post(Bad())
    try:
        outcome = pipeline.execute(call(agent, "echo", {"text": "fine"}), reg)
    finally:
        hooks.remove("t-post")
    assert (outcome.status, outcome.for_llm) == ("ok", "fine")


def test_agent_deny_list_beats_its_allow_list(reg):
    from tools_app.models import ToolPolicy
    from tools_app.services.policy import tool_policy_save

    agent = make_agent()
    tool_policy_save(actor=None, policy=ToolPolicy(scope="agent", agent=agent, allow=["group:test", "datetime"], deny=["echo"]))
    assert pipeline.execute(call(agent, "echo", {"text": "x"}), reg).status == "denied"
    assert pipeline.execute(call(agent, "datetime"), reg).status == "ok"
    assert pipeline.execute(call(agent, "read_file", {"path": "x"}), reg).status == "denied"


def test_security_filter_blocks_dangerous_exec_before_it_runs(agent, tmp_path):
    canary = agent.workspace_path / "canary"
    outcome = pipeline.execute(call(agent, "exec", {"command": f"touch {canary}; rm -rf /"}))
    assert outcome.status == "denied" and "safety policy" in outcome.for_llm
    assert not canary.exists()


def test_rate_limit_refuses_without_running_and_is_per_session(reg):
    agent = make_agent(other_config={"rate_limit_per_hour": 2})
    statuses = [pipeline.execute(call(agent, "echo", {"text": "x"}, session_key="a"), reg).status for _ in range(3)]
    assert statuses == ["ok", "ok", "rate_limited"]
    assert pipeline.execute(call(agent, "echo", {"text": "x"}, session_key="b"), reg).status == "ok"
    limited = ToolInvocation.objects.filter(agent_key=agent.key, status="rate_limited").get()
    assert "rate limit exceeded" in limited.error


def test_rate_limit_zero_disables_limiting(reg):
    agent = make_agent(other_config={"rate_limit_per_hour": 0})
    assert {pipeline.execute(call(agent, "echo", {"text": "x"}), reg).status for _ in range(5)} == {"ok"}


def test_rate_limit_uses_redis_when_configured(reg, settings, redis_url):
    import redis

    settings.REDIS_URL = redis_url
    agent = make_agent(other_config={"rate_limit_per_hour": 1})
    statuses = [pipeline.execute(call(agent, "echo", {"text": "x"}, session_key="r"), reg).status for _ in range(2)]
    assert statuses == ["ok", "rate_limited"]
    assert redis.Redis.from_url(settings.REDIS_URL).ttl(f"goclaw:rl:s:{agent.key}:r") > 0


def test_always_require_approval_tools_wait_for_a_person(agent, reg):
    # The approvals gate (tools_app.approvals) asks instead of refusing; tests/tools_app/test_approvals.py covers the rest.
    outcome = pipeline.execute(call(agent, "gated"), reg)
    assert outcome.status == "pending_approval" and "approval" in outcome.for_llm and outcome.extra["approval_id"]


def test_timeout_returns_a_timeout_result(agent, reg):
    # The tool sleeps 2 s past its 0.3 s timeout: a "timeout" outcome means the call did not wait for it
    # (benchmarks/bench_timeouts.py measures how soon after the limit the call answers).
    outcome = pipeline.execute(call(agent, "sleepy"), reg)
    assert outcome.status == "timeout" and "timed out" in outcome.for_llm


def test_exception_becomes_short_error_without_internals(agent, reg):
    outcome = pipeline.execute(call(agent, "broken"), reg)
    assert outcome.status == "error" and outcome.is_error
    assert outcome.for_llm == "tool broken failed: KeyError"


def test_tool_error_message_reaches_the_model(agent, reg):
    outcome = pipeline.execute(call(agent, "polite_fail"), reg)
    assert (outcome.status, outcome.for_llm) == ("error", "file not found: notes.txt")


def test_secrets_are_scrubbed_from_output_and_stored_arguments(agent, reg):
    outcome = pipeline.execute(call(agent, "echo", {"text": f"key={FAKE_KEY}"}), reg)
    assert FAKE_KEY not in outcome.for_llm and FAKE_KEY not in outcome.for_user
    assert "[REDACTED]" in outcome.for_llm
    row = ToolInvocation.objects.get(pk=outcome.invocation_id)
    assert FAKE_KEY not in str(row.arguments)


def test_long_output_is_cut_and_readable_back_by_the_same_agent_only(reg):
    agent = make_agent(other_config={"output_budget_chars": 1000})
    text = "".join(f"line {i:05d}\n" for i in range(2000))
    outcome = pipeline.execute(call(agent, "echo", {"text": text}), reg)
    assert len(outcome.for_llm) < 1400
    assert outcome.for_llm.startswith("line 00000") and outcome.for_llm.endswith("line 01999\n")
    assert f"characters cut of {len(text)} total" in outcome.for_llm
    stored = StoredToolOutput.objects.get()
    assert stored.content == text
    assert ToolInvocation.objects.get(pk=outcome.invocation_id).output_id == stored.id

    page = pipeline.execute(call(agent, "tool_output_get", {"output_id": str(stored.id), "offset": 11, "limit": 22}), reg)
    assert page.status == "ok" and page.for_llm.endswith("line 00001\nline 00002\n")
    other = make_agent()
    denied = pipeline.execute(call(other, "tool_output_get", {"output_id": str(stored.id)}), reg)
    assert denied.status == "error" and "no stored output" in denied.for_llm


def test_tool_executed_event_goes_to_the_agent_group_after_commit(agent, reg, django_capture_on_commit_callbacks):
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(f"agent.{agent.key}", channel)
    with django_capture_on_commit_callbacks(execute=True):
        outcome = pipeline.execute(call(agent, "echo", {"text": "x"}), reg)
    message = async_to_sync(layer.receive)(channel)
    assert message["event"] == "tool.executed"
    assert message["payload"]["invocation_id"] == outcome.invocation_id and message["payload"]["tool"] == "echo"


def test_open_agents_get_a_workspace_per_user(tmp_path):
    from tools_app.choices import AgentType

    agent = make_agent(agent_type=AgentType.OPEN, workspace=str(tmp_path))
    alice = pipeline.build_context(call(agent, "x", user_id="alice"))
    evil = pipeline.build_context(call(agent, "x", user_id="../bob"))
    assert alice.workspace.root == tmp_path / "alice"
    assert evil.workspace.root.parent == tmp_path and ".." not in evil.workspace.root.name


def test_registry_rejects_bad_schemas_and_duplicate_names():
    from tools_app.registry import RegistryError, ToolRegistry

    class Bad(Tool):
        name = "bad"
        parameters = {"type": "object", "properties": {"x": {"type": "no-such-type"}}}

    for r in (ToolRegistry(), ToolRegistry()):  # the second time the schema's check is remembered: still refused
        with pytest.raises(RegistryError, match="invalid parameters schema: 'no-such-type' is not valid"):
            r.register(Bad())
    r.register(EchoTool())
    with pytest.raises(RegistryError, match="already registered"):
        r.register(EchoTool())


def test_cloned_registry_layers_on_the_global_one(reg):
    assert reg.get("datetime") is registry.get("datetime")
    assert registry.get("echo") is None
    reg.unregister("datetime")
    assert reg.get("datetime") is None and registry.get("datetime") is not None
    assert "echo" in reg.groups()["test"]
    assert reg.expand(["group:fs"]) >= {"read_file", "write_file", "edit", "list_files", "search", "glob"}


def test_globally_blocked_tool_names_are_refused_by_the_security_filter(agent, reg, settings):
    settings.TOOL_BLOCKED_NAMES = ["echo"]
    outcome = pipeline.execute(call(agent, "echo", {"text": "x"}), reg)
    assert outcome.status == "denied" and "blocked by the administrator" in outcome.for_llm


def test_platform_secrets_never_come_back_in_tool_output(agent, settings):
    outcome = pipeline.execute(call(agent, "exec", {"command": f"echo key={settings.GOCLAW_ENCRYPTION_KEY} sk={settings.SECRET_KEY}"}))
    assert outcome.status == "ok"
    assert settings.GOCLAW_ENCRYPTION_KEY not in outcome.for_llm and settings.SECRET_KEY not in outcome.for_llm


def test_agent_exec_timeout_setting_is_validated_and_applied(tmp_path):
    from goclaw.errors import ValidationError

    with pytest.raises(ValidationError):
        make_agent(other_config={"exec_timeout_seconds": 0})
    agent = make_agent(other_config={"exec_timeout_seconds": 1})
    # `&&`: "never" appears only if the sleep ran its 5 s (a shell may outlive its killed child by the grace period)
    outcome = pipeline.execute(call(agent, "exec", {"command": "sleep 5 && echo never"}))
    assert outcome.status == "error" and "never" not in outcome.for_llm and "timed out after 1" in outcome.for_llm
