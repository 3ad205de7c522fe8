"""The one execution pipeline. Every tool call - API, admin, MCP endpoint, background jobs - goes
through `execute()`; nothing else runs tools.

resolve → validate → pre-hooks → rate limit → approval gate → run (thread, timeout) → post-hooks →
scrub → output budget → audit row → `tool.executed` event.
Does I/O (the tool itself) outside any transaction; each DB write is its own short statement.
"""
from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import jsonschema
from django.conf import settings

from goclaw import events
from goclaw.db import FastInsert, pg_json, pg_text
from tools_app.base import Tool, ToolContext, ToolError, ToolResult
from tools_app.choices import AgentType
from tools_app.choices import InvocationStatus as S
from tools_app.hooks import hooks
from tools_app.models import Agent, StoredToolOutput, ToolInvocation
from tools_app.policy import PolicyInput
from tools_app.policy import resolve as policy_resolve
from tools_app.ratelimit import rate_limit_allow
from tools_app.registry import ToolRegistry, registry

logger = logging.getLogger("goclaw.pipeline")


@dataclass
class ToolCall:
    """One request to run a tool, with the per-call context the caller supplied."""

    agent: Agent
    tool: str
    arguments: dict[str, Any]
    user_id: str = ""
    session_key: str = ""
    channel: str = ""
    chat_id: str = ""
    peer_kind: str = ""
    provider: str = ""
    subagent_depth: int = 0
    request_allow: list[str] | None = None
    request_id: str = ""


@dataclass
class Outcome:
    status: str
    for_llm: str
    for_user: str | None = None
    is_error: bool = False
    invocation_id: str = ""
    duration_ms: float = 0.0
    observations: list[str] = field(default_factory=list)
    output_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status, "for_llm": self.for_llm, "for_user": self.for_user, "is_error": self.is_error,
            "invocation_id": self.invocation_id, "duration_ms": round(self.duration_ms, 3), **self.extra,
        }


@dataclass
class ApprovalVerdict:
    decision: str  # "allow" | "deny" | "pending"
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _default_approval_gate(ctx: ToolContext, tool: Tool, args: dict[str, Any], call: ToolCall) -> ApprovalVerdict:
    if tool.always_require_approval:
        return ApprovalVerdict("deny", f"tool {tool.name} requires a person's approval for every call, and no approval was given")
    return ApprovalVerdict("allow")


# The approvals module replaces this with the real gate (allow / ask → pending / deny).
approval_gate: Callable[[ToolContext, Tool, dict, ToolCall], ApprovalVerdict] = _default_approval_gate

_executor = ThreadPoolExecutor(max_workers=32, thread_name_prefix="goclaw-tool")
_validators: dict[int, jsonschema.Draft202012Validator] = {}
_validators_lock = threading.Lock()
_USER_DIR_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$")


# --- context ------------------------------------------------------------------------------------------
def user_workspace_dirname(user_id: str) -> str:
    """A safe directory name for a user id: kept when harmless, else a stable hash."""
    if _USER_DIR_RE.match(user_id) and ".." not in user_id:
        return user_id
    return "u-" + hashlib.sha256(user_id.encode()).hexdigest()[:24]


def workspace_for(agent: Agent, user_id: str) -> Path:
    base = agent.workspace_path
    if agent.agent_type == AgentType.OPEN:
        return base / user_workspace_dirname(user_id or "_default")
    return base


def agent_settings(agent: Agent) -> dict[str, Any]:
    """Per-call settings: the agent's `other_config` layered over the global defaults."""
    config = agent.other_config or {}
    return {
        **config,
        "denied_paths": list(dict.fromkeys([*settings.TOOL_DENIED_PATHS, *config.get("denied_paths", [])])),
        "rate_limit_per_hour": config.get("rate_limit_per_hour", settings.TOOL_RATE_LIMIT_PER_HOUR),
    }


def policy_input(call: ToolCall) -> PolicyInput:
    return PolicyInput(agent=call.agent, user_id=call.user_id, provider=call.provider, channel=call.channel,
                       chat_id=call.chat_id, depth=call.subagent_depth,
                       request_allow=tuple(call.request_allow) if call.request_allow is not None else None)


def build_context(call: ToolCall, reg: ToolRegistry = registry) -> ToolContext:
    return ToolContext(
        agent_key=call.agent.key, agent_id=call.agent.pk, user_id=call.user_id, channel=call.channel,
        chat_id=call.chat_id, peer_kind=call.peer_kind, session_key=call.session_key,
        sandbox_key=call.session_key or call.agent.key, workspace=workspace_for(call.agent, call.user_id),
        subagent_depth=call.subagent_depth, request_id=call.request_id or uuid.uuid4().hex,
        provider=call.provider or call.agent.provider, settings=agent_settings(call.agent),
        catalog=catalog_for(call, reg),
    )


# --- steps --------------------------------------------------------------------------------------------
def catalog_for(call: ToolCall, reg: ToolRegistry = registry) -> frozenset[str]:
    """The tool names this call may see: the catalog endpoint and the execution check both come from here."""
    return policy_resolve(policy_input(call), reg)


def resolve_tool(name: str, ctx: ToolContext, reg: ToolRegistry = registry) -> Tool | None:
    """The tool behind `name` (or an alias) if the policy lets this call use it."""
    tool = reg.get(name)
    if tool is None or tool.name not in ctx.catalog:
        return None
    return tool


def validate_arguments(tool: Tool, args: Any) -> list[str]:
    """JSON Schema problems with `args`, phrased so a model can fix its call."""
    if not isinstance(args, dict):
        return ["arguments must be a JSON object"]
    key = id(tool.parameters)
    validator = _validators.get(key)
    if validator is None:
        with _validators_lock:
            validator = _validators.setdefault(key, jsonschema.Draft202012Validator(tool.parameters))
    problems = []
    for err in sorted(validator.iter_errors(args), key=lambda e: list(e.absolute_path))[:20]:
        where = "/".join(str(p) for p in err.absolute_path)
        problems.append(f"{where}: {err.message}" if where else err.message)
    return problems


def rate_limit_key(ctx: ToolContext) -> str:
    if ctx.session_key:
        return f"s:{ctx.agent_key}:{ctx.session_key}"
    return f"u:{ctx.agent_key}:{ctx.user_id}"


def run_tool(tool: Tool, ctx: ToolContext, args: dict[str, Any]) -> tuple[ToolResult, str]:
    """Run in a worker thread with the tool's timeout; an exception becomes a short error result."""
    timeout = tool.timeout_for(ctx, args)
    if tool.inline:
        return _guarded(tool, ctx, args)
    future = _executor.submit(_guarded, tool, ctx, args)
    try:
        return future.result(timeout=timeout)
    except FutureTimeout:
        return ToolResult.error(f"tool {tool.name} timed out after {timeout:g}s"), S.TIMEOUT


def _guarded(tool: Tool, ctx: ToolContext, args: dict[str, Any]) -> tuple[ToolResult, str]:
    try:
        result = tool.run(ctx, args)
        if not isinstance(result, ToolResult):
            raise TypeError(f"{tool.name} returned {type(result).__name__}, not ToolResult")
        return result, (S.ERROR if result.is_error else S.OK)
    except ToolError as exc:
        return ToolResult.error(str(exc) or "tool failed"), S.ERROR
    except Exception as exc:
        logger.exception("tool %s raised", tool.name)
        return ToolResult.error(f"tool {tool.name} failed: {type(exc).__name__}"), S.ERROR
    finally:
        from django.db import connection

        if not tool.inline:
            connection.close_if_unusable_or_obsolete()


def scrub_result(result: ToolResult) -> int:
    from tools_app.security.scrub import default_scrubber

    result.for_llm, count = default_scrubber.scrub(result.for_llm)
    if result.for_user:
        result.for_user, more = default_scrubber.scrub(result.for_user)
        count += more
    return count


def output_budget(ctx: ToolContext, tool_name: str) -> int:
    per_tool = ctx.settings.get("tool_output_budgets", {}).get(tool_name)
    return int(per_tool or ctx.settings.get("output_budget_chars") or settings.TOOL_OUTPUT_BUDGET_CHARS)


def apply_output_budget(ctx: ToolContext, tool_name: str, text: str) -> tuple[str, str | None]:
    """Cut text above the budget to head + tail, storing the full text for `tool_output_get`."""
    budget = output_budget(ctx, tool_name)
    if len(text) <= budget:
        return text, None
    stored = StoredToolOutput.objects.create(agent_key=ctx.agent_key, user_id=pg_text(ctx.user_id), tool_name=pg_text(tool_name),
                                             content=pg_text(text))
    head = int(budget * 0.7)
    tail = budget - head
    cut = len(text) - head - tail
    marker = (
        f"\n\n[... {cut} characters cut of {len(text)} total. The full output is stored: call "
        f"tool_output_get with output_id=\"{stored.id}\" and an offset to read it ...]\n\n"
    )
    return text[:head] + marker + text[-tail:], str(stored.id)


_insert_invocation = FastInsert(ToolInvocation)


def record(ctx: ToolContext, call: ToolCall, tool_name: str, args: Any, outcome: Outcome, error: str = "") -> None:
    """Write the audit row (arguments scrubbed) and publish `tool.executed` after commit."""
    from tools_app.security.scrub import default_scrubber

    safe_args, _ = default_scrubber.scrub_data(args if isinstance(args, dict) else {"_raw": repr(args)[:2000]})
    invocation = _insert_invocation(
        agent_key=ctx.agent_key, user_id=pg_text(ctx.user_id[:255]), session_key=pg_text(ctx.session_key[:255]),
        channel=pg_text(ctx.channel[:64]), tool_name=pg_text(tool_name[:128]), arguments=pg_json(safe_args),
        status=outcome.status, observed=bool(outcome.observations), observe_reasons=pg_json(outcome.observations),
        duration_ms=outcome.duration_ms, result_size=len(outcome.for_llm), error=pg_text(error[:2000]),
        output_id=outcome.output_id, request_id=pg_text(ctx.request_id[:64]),
    )
    outcome.invocation_id = str(invocation.pk)
    events.publish(
        "tool.executed",
        {"invocation_id": outcome.invocation_id, "agent": ctx.agent_key, "tool": tool_name, "status": outcome.status,
         "duration_ms": round(outcome.duration_ms, 3), "session_key": ctx.session_key, "observed": bool(outcome.observations)},
        [events.agent_group(ctx.agent_key), "invocations"],
    )


# --- the pipeline ---------------------------------------------------------------------------------------
def execute(call: ToolCall, reg: ToolRegistry = registry) -> Outcome:
    """Run one tool call through every step and return what the model should see."""
    started = time.perf_counter()
    ctx = build_context(call, reg)
    outcome, tool_name, args, error = _execute_steps(call, ctx, reg)
    outcome.duration_ms = (time.perf_counter() - started) * 1000
    record(ctx, call, tool_name, args, outcome, error)
    return outcome


def _refusal(status: str, message: str, observations: list[str] | None = None) -> Outcome:
    return Outcome(status=status, for_llm=message, is_error=True, observations=observations or [])


def _execute_steps(call: ToolCall, ctx: ToolContext, reg: ToolRegistry) -> tuple[Outcome, str, Any, str]:
    tool = resolve_tool(call.tool, ctx, reg)
    if tool is None:
        msg = f"tool {call.tool} is not available to this agent"
        return _refusal(S.DENIED, msg), call.tool, call.arguments, msg
    args = call.arguments
    problems = validate_arguments(tool, args)
    if problems:
        msg = f"invalid arguments for {tool.name}: " + "; ".join(problems)
        return _refusal(S.INVALID, msg), tool.name, args, msg

    pre = hooks.run_pre(ctx, tool, args)
    if pre.blocked:
        return _refusal(S.DENIED, pre.blocked, pre.observations), tool.name, args, pre.blocked
    if pre.args is not args:  # a hook rewrote the arguments: they must still be valid
        args = pre.args
        problems = validate_arguments(tool, args)
        if problems:
            msg = f"arguments rewritten by a hook are invalid: {'; '.join(problems)}"
            return _refusal(S.INVALID, msg, pre.observations), tool.name, args, msg

    if not rate_limit_allow(rate_limit_key(ctx), int(ctx.settings["rate_limit_per_hour"])):
        msg = f"rate limit exceeded: {ctx.settings['rate_limit_per_hour']} tool calls per hour for this session"
        return _refusal(S.RATE_LIMITED, msg, pre.observations), tool.name, args, msg

    verdict = approval_gate(ctx, tool, args, call)
    if verdict.decision == "deny":
        return _refusal(S.DENIED, verdict.reason, pre.observations), tool.name, args, verdict.reason
    if verdict.decision == "pending":
        outcome = Outcome(status=S.PENDING_APPROVAL, for_llm=verdict.reason, observations=pre.observations, extra=verdict.extra)
        return outcome, tool.name, args, ""
    return run_approved(ctx, tool, args, pre.observations)


def run_approved(ctx: ToolContext, tool: Tool, args: dict[str, Any], observations: list[str]) -> tuple[Outcome, str, Any, str]:
    """Steps 6-9 for a call that passed every gate (also used to resume an approved call)."""
    result, status = run_tool(tool, ctx, args)
    hooks.run_post(ctx, tool, args, result, status)
    scrub_result(result)
    result.for_llm, output_id = apply_output_budget(ctx, tool.name, result.for_llm)
    if result.for_user and len(result.for_user) > output_budget(ctx, tool.name):
        result.for_user = result.for_user[: output_budget(ctx, tool.name)] + "\n[... cut]"
    outcome = Outcome(status=status, for_llm=result.for_llm, for_user=result.for_user, is_error=result.is_error,
                      observations=observations, output_id=output_id)
    return outcome, tool.name, args, result.for_llm[:500] if result.is_error else ""
