"""The one orchestrator. Every tool call runs `execute()` - from the API, the admin, the MCP endpoint, background
jobs, and again when a person's decision lets a held call go on (`ToolCall.grant`): first runs and resumed runs
pass the same steps, against the tool set and policy of now.

resolve → validate → pre-hooks (→ validate again if a hook rewrote the arguments) → rate limit → approval →
run (worker thread, timeout, cancellation) → post-hooks → scrub → output budget → audit row → `tool.executed`.
Does I/O (the tool itself) outside any transaction; each DB write is its own short statement.
"""
from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Callable

import jsonschema
from django.conf import settings
from django.db import connection

from goclaw import events
from goclaw.db import FastInsert, pg_json, pg_text
from tools_app.base import Tool, ToolContext, ToolError, ToolResult, ToolTimedOut
from tools_app.calls import ApprovalVerdict, CallContext, Outcome, ToolCall  # noqa: F401 - the pipeline's vocabulary
from tools_app.choices import InvocationStatus as S
from tools_app.hooks import hooks
from tools_app.labels import call_labels, echo, label, labels_of
from tools_app.models import Agent, StoredToolOutput, ToolInvocation
from tools_app.policy import catalog_for
from tools_app.ratelimit import rate_limit_take
from tools_app.registry import ToolRegistry
from tools_app.sandboxing import sandbox_for_call
from tools_app.security.scrub import default_scrubber
from tools_app.services.approvals.gate import approval_gate
from tools_app.toolsets import toolset_for
from tools_app.workspace import workspace_build

logger = logging.getLogger("goclaw.pipeline")

REFUSAL_MAX_CHARS = 4000
CANCEL_POLL_SECONDS = 0.1
_validators: dict[str, jsonschema.Draft202012Validator] = {}
_validators_by_id: dict[int, tuple[dict, jsonschema.Draft202012Validator]] = {}
_validators_lock = threading.Lock()


# --- the call's context ---------------------------------------------------------------------------------
def agent_settings(agent: Agent) -> dict[str, Any]:
    """Per-call settings: the agent's `other_config` layered over the global defaults."""
    config = agent.other_config or {}
    return {
        **config,
        "rate_limit_per_hour": config.get("rate_limit_per_hour", settings.TOOL_RATE_LIMIT_PER_HOUR),
        "rate_limit_user_per_hour": config.get("rate_limit_user_per_hour", settings.TOOL_RATE_LIMIT_USER_PER_HOUR),
        "rate_limit_agent_per_hour": config.get("rate_limit_agent_per_hour", settings.TOOL_RATE_LIMIT_AGENT_PER_HOUR),
    }


def build_context(call: ToolCall, tools: ToolRegistry | None = None) -> ToolContext:
    """The per-call context, with the caller's strings scrubbed once into `labels` for everything downstream."""
    agent = call.agent
    tools = tools if tools is not None else toolset_for(agent, call.context.user_id)
    context = call.context if call.context.request_id else call.context.replace(request_id=uuid.uuid4().hex)
    config = agent_settings(agent)
    labels = call_labels(context)
    return ToolContext(
        agent_key=agent.key, agent_id=agent.pk, call=context, provider=context.provider or agent.provider,
        workspace=workspace_build(agent, context.user_id, config), settings=config,
        catalog=catalog_for(agent, context, tools), tools=tools, labels=labels,
        # sandbox_key names things outside the database (sandboxes): a label, never the raw session key.
        sandbox_key=labels.session_key or agent.key,
        caller_cancel=call.cancel,
    )


# --- steps --------------------------------------------------------------------------------------------
def validate_arguments(tool: Tool, args: Any) -> list[str]:
    """JSON Schema problems with `args`, phrased so a model can fix its call. A problem quotes the offending
    value only in a scrubbed, shortened form (none at all under a sensitive key such as `password`)."""
    if not isinstance(args, dict):
        return ["arguments must be a JSON object"]
    validator = _validator(tool.parameters)
    return [_problem(err) for err in sorted(validator.iter_errors(args), key=lambda e: list(e.absolute_path))[:20]]


def _problem(err: jsonschema.ValidationError) -> str:
    # jsonschema's messages start with repr(instance), whatever its size ("'<1 MB>' is too long"): swap it for a
    # short form; keys it quotes (additionalProperties) are caller text too, hence the scrub of the whole line.
    where = "/".join(echo(str(p), 40) for p in err.absolute_path)
    message, raw = err.message, repr(err.instance)
    if raw in message:
        message = message.replace(raw, _shown_value(err), 1)
    return echo(f"{where}: {message}" if where else message, 300)


def _shown_value(err: jsonschema.ValidationError) -> str:
    value = err.instance
    if isinstance(value, dict):
        return f"an object with {len(value)} keys"
    if isinstance(value, list):
        return f"an array of {len(value)} items"
    name = err.absolute_path[-1] if err.absolute_path else None
    if isinstance(name, str) and default_scrubber.scrub_data({name: value})[1]:
        return "the value (not shown)"  # a sensitive key (password, token...) or a recognised credential
    if isinstance(value, str) and len(value) > 40:
        return f"{echo(value, 40)!r} ({len(value)} characters)"
    return echo(value if not isinstance(value, str) else repr(value), 60)


def _validator(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    """One compiled validator per schema *content* (tools built from rows or MCP listings come and go), found first
    by the schema object itself (schemas are built whole, never changed in place): an entry keeps its schema
    alive, so its id() is not reused while it is cached."""
    held = _validators_by_id.get(id(schema))
    if held is not None and held[0] is schema:
        return held[1]
    key = json.dumps(schema, sort_keys=True, separators=(",", ":"), default=str)
    validator = _validators.get(key)
    with _validators_lock:
        if len(_validators) > 4096:
            _validators.clear()
            _validators_by_id.clear()
        if validator is None:
            validator = _validators.setdefault(key, jsonschema.Draft202012Validator(schema))
        _validators_by_id[id(schema)] = (schema, validator)
    return validator


def rate_limit_key(ctx: ToolContext) -> str:
    """The per-session bucket; calls without a session key share one bucket per user id."""
    labels = labels_of(ctx)
    if ctx.session_key:
        return f"s:{ctx.agent_key}:{labels.session_key}"
    return f"n:{ctx.agent_key}:{labels.user_id}"


def rate_limit_buckets(ctx: ToolContext) -> list[tuple[str, str, int]]:
    """(scope, bucket key, calls per hour) for every ceiling on this call. The session key and user id are the
    caller's choice, so fresh ones per call only escape the buckets they name: the agent's bucket catches those."""
    labels, config = labels_of(ctx), ctx.settings
    return [
        ("session", rate_limit_key(ctx), int(config["rate_limit_per_hour"])),
        ("user", f"u:{ctx.agent_key}:{labels.user_id}", int(config["rate_limit_user_per_hour"])),
        ("agent", f"a:{ctx.agent_key}", int(config["rate_limit_agent_per_hour"])),
    ]


def rate_limit_refusal(ctx: ToolContext) -> str | None:
    """Take a token from every applicable bucket (one round trip), or from none; the refusal names each ceiling hit."""
    buckets = rate_limit_buckets(ctx)
    empty = rate_limit_take([(key, limit) for _, key, limit in buckets])
    if not empty:
        return None
    hit = "; ".join(f"{buckets[i][2]} tool calls per hour for this {buckets[i][0]}" for i in empty)
    return f"rate limit exceeded: {hit}"


# --- running the tool: a worker thread with a deadline; a call given up on is told so and counted ------------------
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_abandoned_lock = threading.Lock()
_abandoned = {"running": 0, "total": 0}


def _workers() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=settings.TOOL_WORKER_THREADS, thread_name_prefix="goclaw-tool")
    return _pool


def tool_workers_status() -> dict[str, Any]:
    """For /healthz: the pool size and the runs given up on (timed out) whose thread has not ended yet. Healthy while
    abandoned runs leave at least one worker free."""
    with _abandoned_lock:
        running, total = _abandoned["running"], _abandoned["total"]
    size = settings.TOOL_WORKER_THREADS
    return {"ok": running < size, "workers": size, "abandoned_running": running, "abandoned_total": total}


def _abandon(future) -> None:
    with _abandoned_lock:
        _abandoned["running"] += 1
        _abandoned["total"] += 1

    def ended(_future) -> None:
        with _abandoned_lock:
            _abandoned["running"] -= 1

    future.add_done_callback(ended)


def run_tool(tool: Tool, ctx: ToolContext, args: dict[str, Any]) -> tuple[ToolResult, str]:
    """Run in a worker thread with the tool's timeout; an exception becomes a short error result. On timeout the
    call's `cancel` event is set (tools that loop or wait honour it) and the run is counted as abandoned until its
    thread ends."""
    if tool.inline:
        return _guarded(tool, ctx, args)
    timeout = tool.timeout_for(ctx, args)
    future = _workers().submit(_guarded, tool, ctx, args)
    deadline = time.monotonic() + timeout
    while True:
        left = max(0.0, deadline - time.monotonic())
        try:
            # With a caller's cancel event (a hosted agent's session), wait in short slices so a cancel ends the
            # wait promptly; the tool's own `cancel` is set then, so processes it started are stopped.
            return future.result(timeout=min(left, CANCEL_POLL_SECONDS) if ctx.caller_cancel is not None else left)
        except FutureTimeout:
            if ctx.caller_cancel is not None and ctx.caller_cancel.is_set():
                ctx.cancel.set()
                _abandon(future)
                return ToolResult.error(f"tool {tool.name} was cancelled"), S.ERROR
            if time.monotonic() >= deadline:
                ctx.cancel.set()
                _abandon(future)
                return ToolResult.error(f"tool {tool.name} timed out after {timeout:g}s"), S.TIMEOUT


def _guarded(tool: Tool, ctx: ToolContext, args: dict[str, Any]) -> tuple[ToolResult, str]:
    try:
        result = tool.run(ctx, args)
        if not isinstance(result, ToolResult):
            raise TypeError(f"{tool.name} returned {type(result).__name__}, not ToolResult")
        return result, (S.ERROR if result.is_error else S.OK)
    except ToolTimedOut as exc:
        return ToolResult.error(str(exc) or "tool timed out"), S.TIMEOUT
    except ToolError as exc:
        return ToolResult.error(str(exc) or "tool failed"), S.ERROR
    except Exception as exc:
        logger.exception("tool %s raised", tool.name)
        return ToolResult.error(f"tool {tool.name} failed: {type(exc).__name__}"), S.ERROR
    finally:
        if not tool.inline:
            connection.close_if_unusable_or_obsolete()


def scrub_result(result: ToolResult) -> int:
    result.for_llm, count = default_scrubber.scrub(result.for_llm)
    if result.for_user:
        result.for_user, more = default_scrubber.scrub(result.for_user)
        count += more
    return count


def output_budget(ctx: ToolContext, tool_name: str) -> int:
    per_tool = ctx.settings.get("tool_output_budgets", {}).get(tool_name)
    return int(per_tool or ctx.settings.get("output_budget_chars") or settings.TOOL_OUTPUT_BUDGET_CHARS)


_insert_output = FastInsert(StoredToolOutput)


def apply_output_budget(ctx: ToolContext, tool_name: str, text: str) -> tuple[str, str | None]:
    """Cut text above the budget to head + tail, storing the full (already scrubbed) text for `tool_output_get`,
    under the user's label (what `tool_output_get` looks it up by)."""
    budget = output_budget(ctx, tool_name)
    if len(text) <= budget:
        return text, None
    stored_id = _insert_output(agent_key=ctx.agent_key, user_id=labels_of(ctx).user_id, tool_name=label(tool_name, 128),
                               content=pg_text(text))
    head = int(budget * 0.7)
    tail = budget - head
    cut = len(text) - head - tail
    marker = (
        f"\n\n[... {cut} characters cut of {len(text)} total. The full output is stored: call "
        f"tool_output_get with output_id=\"{stored_id}\" and an offset to read it ...]\n\n"
    )
    return text[:head] + marker + text[-tail:], str(stored_id)


_insert_invocation = FastInsert(ToolInvocation)


def record(ctx: ToolContext, tool_name: str, args: Any, outcome: Outcome) -> None:
    """Write the audit row and publish `tool.executed` after commit. Every outcome leaves the pipeline through
    here, so this is where stored and echoed text is made safe: identity strings are the call's labels, the tool
    name, arguments, error and observations are scrubbed, and a refusal's text (which may quote caller values,
    whoever wrote it) is scrubbed and shortened before the caller sees it."""
    labels = labels_of(ctx)
    if outcome.status not in _TOOL_RAN:
        outcome.for_llm = echo(outcome.for_llm, REFUSAL_MAX_CHARS)
    error = (outcome.for_llm if outcome.status not in _TOOL_RAN else outcome.for_llm[:500]) if outcome.is_error else ""
    tool_label = label(tool_name, 128)
    safe_args = scrub_arguments(args if isinstance(args, dict) else {"_raw": repr(args)[:2000]})
    observations = [echo(o, 1000) for o in outcome.observations]
    invocation_id = _insert_invocation(
        agent_key=ctx.agent_key, user_id=labels.user_id, session_key=labels.session_key, channel=labels.channel,
        tool_name=tool_label, arguments=pg_json(safe_args), status=outcome.status, observed=bool(observations),
        observe_reasons=pg_json(observations), duration_ms=outcome.duration_ms, result_size=len(outcome.for_llm),
        error=echo(error, 2000) if error else "", output_id=outcome.output_id, request_id=labels.request_id,
        approval_id=outcome.extra.get("approval_id"), pending_change_id=outcome.extra.get("pending_change_id"),
        actor=label(ctx.call.actor, 160) if ctx.call.actor else "",
        sandbox_backend=(outcome.sandbox or {}).get("backend", "")[:16],
        sandbox_profile=pg_text((outcome.sandbox or {}).get("profile", ""))[:64],
    )
    outcome.invocation_id = str(invocation_id)
    events.publish(
        "tool.executed",
        {"invocation_id": outcome.invocation_id, "agent": ctx.agent_key, "tool": tool_label, "status": outcome.status,
         "duration_ms": round(outcome.duration_ms, 3), "session_key": labels.session_key, "observed": bool(observations)},
        [events.agent_group(ctx.agent_key), "invocations"],
    )


def scrub_arguments(args: Any) -> Any:
    """`scrub_data` (values, sensitive keys), and the keys themselves: a caller can put a credential in a key."""
    return _scrub_keys(default_scrubber.scrub_data(args)[0])


def _scrub_keys(obj: Any, depth: int = 0) -> Any:
    if depth > 100:
        return obj
    if isinstance(obj, list):
        return [_scrub_keys(v, depth + 1) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out: dict = {}
    for key, value in obj.items():
        safe = default_scrubber.scrub(key)[0] if isinstance(key, str) else key
        while safe in out:  # two keys that scrub alike both stay
            safe = f"{safe}#"
        out[safe] = _scrub_keys(value, depth + 1)
    return out


# Outcomes whose text the tool produced (already scrubbed by `scrub_result`); any other text the platform wrote.
_TOOL_RAN = frozenset({S.OK, S.ERROR, S.TIMEOUT})


# --- the pipeline ---------------------------------------------------------------------------------------
@dataclass
class _Run:
    """One call on its way through the steps."""

    call: ToolCall
    ctx: ToolContext
    tools: ToolRegistry
    tool: Tool | None = None
    args: Any = None
    observations: list[str] = field(default_factory=list)


def _refusal(run: _Run, status: str, message: str) -> Outcome:
    return Outcome(status=status, for_llm=message, is_error=True, observations=run.observations)


def _resolve(run: _Run) -> Outcome | None:
    """The tool behind the name (or an alias), if the policy lets this call use it."""
    tool = run.tools.get(run.call.tool)
    if tool is None or tool.name not in run.ctx.catalog:
        now = " no longer" if run.call.grant is not None else " not"  # a person approved it when it still was
        return _refusal(run, S.DENIED, f"tool {echo(run.call.tool, 64)} is{now} available to this agent")
    run.tool = tool
    return None


def _validate(run: _Run) -> Outcome | None:
    problems = validate_arguments(run.tool, run.args)
    return _refusal(run, S.INVALID, f"invalid arguments for {run.tool.name}: " + "; ".join(problems)) if problems else None


def _pre_hooks(run: _Run) -> Outcome | None:
    """Security hooks (shell check on `command_for`, access control, admin hooks). A rewrite must still be valid."""
    pre = hooks.run_pre(run.ctx, run.tool, run.args)
    run.observations = pre.observations
    if pre.blocked:  # scrubbed and shortened by the hook registry (reasons may quote the command)
        return _refusal(run, S.DENIED, pre.blocked)
    if pre.args is not run.args:
        run.args = pre.args
        problems = validate_arguments(run.tool, run.args)
        if problems:
            return _refusal(run, S.INVALID, f"arguments rewritten by a hook are invalid: {'; '.join(problems)}")
    return None


def _rate_limit(run: _Run) -> Outcome | None:
    limited = rate_limit_refusal(run.ctx)
    return _refusal(run, S.RATE_LIMITED, limited) if limited else None


def _approval(run: _Run) -> Outcome | None:
    """allow, deny, or pending (a person decides); a resumed call redeems its grant here, exactly once."""
    verdict = approval_gate(run.ctx, run.tool, run.args, run.call)
    if verdict.decision == "deny":
        return _refusal(run, S.DENIED, echo(verdict.reason, 1000))
    if verdict.decision == "pending":
        return Outcome(status=S.PENDING_APPROVAL, for_llm=verdict.reason, observations=run.observations, extra=verdict.extra)
    return None


def _run(run: _Run) -> Outcome:
    """The call passed every gate: run it, then post-hooks, scrub and output budget."""
    tool, ctx, args = run.tool, run.ctx, run.args
    if tool.starts_processes and ctx.sandbox is None:
        ctx = ctx.replace(sandbox=sandbox_for_call(ctx))
    result, status = run_tool(tool, ctx, args)
    hooks.run_post(ctx, tool, args, result, status)
    scrub_result(result)
    budget = output_budget(ctx, tool.name)
    result.for_llm, output_id = apply_output_budget(ctx, tool.name, result.for_llm)
    if result.for_user and len(result.for_user) > budget:
        result.for_user = result.for_user[:budget] + "\n[... cut]"
    return Outcome(status=status, for_llm=result.for_llm, for_user=result.for_user, is_error=result.is_error,
                   observations=run.observations, output_id=output_id, sandbox=result.sandbox)


STEPS: tuple[Callable[[_Run], Outcome | None], ...] = (_resolve, _validate, _pre_hooks, _rate_limit, _approval)


def execute(call: ToolCall, tools: ToolRegistry | None = None) -> Outcome:
    """Run one tool call through every step and return what the model should see. `tools` replaces the agent's
    composed tool set (`toolset_for`) for callers that bring their own view (tests, embedding)."""
    started = time.perf_counter()
    tools = tools if tools is not None else toolset_for(call.agent, call.context.user_id)
    run = _Run(call=call, ctx=build_context(call, tools), tools=tools, args=call.arguments)
    outcome = None
    for step in STEPS:
        outcome = step(run)
        if outcome is not None:
            break
    if outcome is None:
        outcome = _run(run)
    outcome.duration_ms = (time.perf_counter() - started) * 1000
    record(run.ctx, run.tool.name if run.tool is not None else call.tool, run.args, outcome)
    return outcome
