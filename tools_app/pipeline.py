"""The one execution pipeline. Every tool call - API, admin, MCP endpoint, background jobs - goes
through `execute()`; nothing else runs tools.

resolve → validate → pre-hooks → rate limit → approval gate → run (thread, timeout) → post-hooks →
scrub → output budget → audit row → `tool.executed` event.
Does I/O (the tool itself) outside any transaction; each DB write is its own short statement.
"""
from __future__ import annotations

import dataclasses
import hashlib
import hmac
import logging
import os
import re
import stat
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
from tools_app.ratelimit import rate_limit_take
from tools_app.registry import ToolRegistry, registry
from tools_app.sandboxing import sandbox_for_call
from tools_app.security.scrub import Scrubber, default_scrubber

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
    sandbox: dict[str, str] | None = None  # where the tool's processes ran (audit row only, not the response)

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


# --- what a call may store, show or echo ----------------------------------------------------------------
# Every caller-supplied string of a call (user id, session key, channel, chat id, request id, tool name) is
# scrubbed once, in `build_context`, into `CallLabels`; the audit row, the `tool.executed` event, stored
# outputs, rate-limit keys and refusal texts use the labels, never the raw values. The tool itself gets the
# raw values in its `ToolContext`: it acts for the real caller (per-user rows, chat routing, approval rules).
LABEL_PSEUDONYM_HEX = 16
REFUSAL_MAX_CHARS = 4000
ECHO_MAX_CHARS = 80
_PSEUDONYM_TAIL_RE = re.compile(rf"~[0-9a-f]{{{LABEL_PSEUDONYM_HEX}}}\Z")
_pseudonym_key: bytes | None = None


def pseudonym(value: str) -> str:
    """A keyed hash of `value` (hex): distinct values stay distinguishable, and the value cannot be guessed back
    from it offline (the key is derived from SECRET_KEY)."""
    global _pseudonym_key
    if _pseudonym_key is None:
        _pseudonym_key = hashlib.sha256(b"goclaw.pipeline.label\0" + settings.SECRET_KEY.encode()).digest()
    digest = hmac.new(_pseudonym_key, value.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
    return digest[:LABEL_PSEUDONYM_HEX]


def label(value: str, width: int) -> str:
    """`value` as it may be stored or shown: scrubbed, storable, at most `width` characters. A value that had to
    change (a credential was redacted, it was too long, it held NUL or a lone surrogate, or it already ends like a
    pseudonym) ends in `~` + a pseudonym of the whole raw value, so two distinct values never share a label
    unless their keyed hashes collide; any other value is kept as it is."""
    if not value:
        return ""
    text, count = default_scrubber.scrub(value)
    if not count and len(value) <= width and not _PSEUDONYM_TAIL_RE.search(value) and pg_text(value) == value:
        return value
    suffix = "~" + pseudonym(value)
    return pg_text(text)[: width - len(suffix)] + suffix


def echo(value: Any, limit: int = ECHO_MAX_CHARS) -> str:
    """A caller value as a refusal may quote it: scrubbed, storable, cut to `limit` characters."""
    text = value if isinstance(value, str) else repr(value)
    # Scrub before cutting (a cut token may no longer look like one); a credential is not longer than 4 KB
    # except a PEM block, whose header alone is redacted with everything after it.
    text, _ = default_scrubber.scrub(text[: limit + 4096])
    text = pg_text(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class CallLabels:
    """The caller-supplied identity strings of one call, scrubbed once (see `label`), at their audit widths."""

    user_id: str = ""
    session_key: str = ""
    channel: str = ""
    chat_id: str = ""
    request_id: str = ""


_LABELLED = frozenset(f.name for f in dataclasses.fields(CallLabels))


def call_labels(ctx: ToolContext) -> CallLabels:
    # 200, not the 255-character columns: rate-limit keys hold an agent key and a label in 300 characters.
    return CallLabels(user_id=label(ctx.user_id, 200), session_key=label(ctx.session_key, 200),
                      channel=label(ctx.channel, 64), chat_id=label(ctx.chat_id, 200), request_id=label(ctx.request_id, 64))


@dataclass(frozen=True)
class CallContext(ToolContext):
    """The ToolContext `build_context` makes: real values for the tool, `labels` for whatever is stored or shown."""

    labels: CallLabels = CallLabels()

    def replace(self, **changes: Any) -> "CallContext":
        new = dataclasses.replace(self, **changes)
        if "labels" not in changes and _LABELLED.intersection(changes):
            new = dataclasses.replace(new, labels=call_labels(new))
        return new


def labels_of(ctx: ToolContext) -> CallLabels:
    """The labels of a context (computed now for a plain ToolContext built outside `build_context`)."""
    return ctx.labels if isinstance(ctx, CallContext) else call_labels(ctx)


# --- per-user workspaces --------------------------------------------------------------------------------
# Injective by construction, three disjoint ranges: "" -> EMPTY_USER_DIRNAME; a readable id -> itself (always
# starts with [a-z0-9]); any other id -> "_h-" + the full SHA-256 of its UTF-8. Names starting with "_" are
# reserved: the readable form never produces them. The readable form is lower-case ASCII only, so no two names
# differ only by case or Unicode normalisation (safe on case-insensitive and normalising file systems), and it
# is never something the scrubber recognises as a credential (a directory name is stored on disk).
EMPTY_USER_DIRNAME = "_anonymous"
HASHED_DIR_PREFIX = "_h-"
_READABLE_DIR_RE = re.compile(r"[a-z0-9][a-z0-9._@-]{0,99}")
# Formats only: a directory name must not depend on which dynamic secrets happen to be registered.
_format_scrubber = Scrubber()
_LEGACY_DIR_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$")


def user_workspace_dirname(user_id: str) -> str:
    """The directory of `user_id` inside an open agent's workspace; no two distinct ids ever share one."""
    if not user_id:
        return EMPTY_USER_DIRNAME
    if (_READABLE_DIR_RE.fullmatch(user_id) and ".." not in user_id and not user_id.endswith(".")
            and not _format_scrubber.scrub(user_id)[1]):
        return user_id
    return HASHED_DIR_PREFIX + hashlib.sha256(user_id.encode("utf-8", "surrogatepass")).hexdigest()


def legacy_workspace_dirname(user_id: str) -> str | None:
    """The name the old, non-injective mapping gave `user_id` (None if it could not name it at all)."""
    uid = user_id or "_default"
    if _LEGACY_DIR_RE.match(uid) and ".." not in uid:
        return uid
    try:
        return "u-" + hashlib.sha256(uid.encode()).hexdigest()[:24]
    except UnicodeEncodeError:
        return None


def workspace_for(agent: Agent, user_id: str) -> Path:
    base = agent.workspace_path
    if agent.agent_type != AgentType.OPEN:
        return base
    path = base / user_workspace_dirname(user_id)
    if not os.path.lexists(path):
        _adopt_legacy_workspace(base, user_id, path)
    return path


def _adopt_legacy_workspace(base: Path, user_id: str, path: Path) -> None:
    """Rename the directory the old mapping gave `user_id` to its new name, when it is unambiguously this user's.
    "" and "_default" shared one old directory: it goes to "" (the common case). A mixed-case old name that the
    file system resolves to the same directory as its lower-case form is left alone (it was shared)."""
    if user_id == "_default":
        return
    legacy = legacy_workspace_dirname(user_id)
    if legacy is None or legacy == path.name:
        return
    old = base / legacy
    try:
        if not stat.S_ISDIR(os.lstat(old).st_mode):
            return
        if legacy != legacy.lower() and os.path.lexists(base / legacy.lower()) and os.path.samefile(old, base / legacy.lower()):
            logger.warning("workspace of a user in %s not migrated: its old directory is shared on a case-insensitive "
                           "file system", base)
            return
        os.rename(old, path)
    except (OSError, ValueError):  # gone already (another process moved it), or the new one appeared meanwhile
        return
    logger.info("moved a user workspace in %s to its injective name %s", base, path.name)


def agent_settings(agent: Agent) -> dict[str, Any]:
    """Per-call settings: the agent's `other_config` layered over the global defaults."""
    config = agent.other_config or {}
    return {
        **config,
        "denied_paths": list(dict.fromkeys([*settings.TOOL_DENIED_PATHS, *config.get("denied_paths", [])])),
        "rate_limit_per_hour": config.get("rate_limit_per_hour", settings.TOOL_RATE_LIMIT_PER_HOUR),
        "rate_limit_user_per_hour": config.get("rate_limit_user_per_hour", settings.TOOL_RATE_LIMIT_USER_PER_HOUR),
        "rate_limit_agent_per_hour": config.get("rate_limit_agent_per_hour", settings.TOOL_RATE_LIMIT_AGENT_PER_HOUR),
    }


def policy_input(call: ToolCall) -> PolicyInput:
    return PolicyInput(agent=call.agent, user_id=call.user_id, provider=call.provider, channel=call.channel,
                       chat_id=call.chat_id, depth=call.subagent_depth,
                       request_allow=tuple(call.request_allow) if call.request_allow is not None else None)


def build_context(call: ToolCall, reg: ToolRegistry = registry) -> CallContext:
    """The per-call context, with the caller's strings scrubbed once into `labels` for everything downstream."""
    ctx = CallContext(
        agent_key=call.agent.key, agent_id=call.agent.pk, user_id=call.user_id, channel=call.channel,
        chat_id=call.chat_id, peer_kind=call.peer_kind, session_key=call.session_key,
        workspace=workspace_for(call.agent, call.user_id),
        subagent_depth=call.subagent_depth, request_id=call.request_id or uuid.uuid4().hex,
        provider=call.provider or call.agent.provider, settings=agent_settings(call.agent),
        catalog=catalog_for(call, reg),
    )
    labels = call_labels(ctx)
    # sandbox_key names things outside the database (sandboxes): a label, never the raw session key.
    return dataclasses.replace(ctx, labels=labels, sandbox_key=labels.session_key or call.agent.key)


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
    """JSON Schema problems with `args`, phrased so a model can fix its call. A problem quotes the offending
    value only in a scrubbed, shortened form (none at all under a sensitive key such as `password`)."""
    if not isinstance(args, dict):
        return ["arguments must be a JSON object"]
    key = id(tool.parameters)
    validator = _validators.get(key)
    if validator is None:
        with _validators_lock:
            validator = _validators.setdefault(key, jsonschema.Draft202012Validator(tool.parameters))
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
    """Cut text above the budget to head + tail, storing the full (already scrubbed) text for `tool_output_get`,
    under the user's label (what `tool_output_get` looks it up by)."""
    budget = output_budget(ctx, tool_name)
    if len(text) <= budget:
        return text, None
    stored = StoredToolOutput.objects.create(agent_key=ctx.agent_key, user_id=labels_of(ctx).user_id,
                                             tool_name=label(tool_name, 128), content=pg_text(text))
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
    """Write the audit row and publish `tool.executed` after commit. Every outcome leaves the pipeline through
    here, so this is where stored and echoed text is made safe: identity strings are the call's labels, the tool
    name, arguments, error and observations are scrubbed, and a refusal's text (which may quote caller values,
    whoever wrote it) is scrubbed and shortened before the caller sees it."""
    labels = labels_of(ctx)
    if outcome.status not in _TOOL_RAN:
        outcome.for_llm = echo(outcome.for_llm, REFUSAL_MAX_CHARS)
    tool_label = label(tool_name, 128)
    safe_args = scrub_arguments(args if isinstance(args, dict) else {"_raw": repr(args)[:2000]})
    observations = [echo(o, 1000) for o in outcome.observations]
    invocation = _insert_invocation(
        agent_key=ctx.agent_key, user_id=labels.user_id, session_key=labels.session_key, channel=labels.channel,
        tool_name=tool_label, arguments=pg_json(safe_args), status=outcome.status, observed=bool(observations),
        observe_reasons=pg_json(observations), duration_ms=outcome.duration_ms, result_size=len(outcome.for_llm),
        error=echo(error, 2000) if error else "", output_id=outcome.output_id, request_id=labels.request_id,
        sandbox_backend=(outcome.sandbox or {}).get("backend", "")[:16],
        sandbox_profile=pg_text((outcome.sandbox or {}).get("profile", ""))[:64],
    )
    outcome.invocation_id = str(invocation.pk)
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
        msg = f"tool {echo(call.tool, 64)} is not available to this agent"
        return _refusal(S.DENIED, msg), call.tool, call.arguments, msg
    args = call.arguments
    problems = validate_arguments(tool, args)
    if problems:
        msg = f"invalid arguments for {tool.name}: " + "; ".join(problems)
        return _refusal(S.INVALID, msg), tool.name, args, msg

    pre = hooks.run_pre(ctx, tool, args)
    if pre.blocked:  # scrubbed and shortened by the hook registry (reasons may quote the command)
        return _refusal(S.DENIED, pre.blocked, pre.observations), tool.name, args, pre.blocked
    if pre.args is not args:  # a hook rewrote the arguments: they must still be valid
        args = pre.args
        problems = validate_arguments(tool, args)
        if problems:
            msg = f"arguments rewritten by a hook are invalid: {'; '.join(problems)}"
            return _refusal(S.INVALID, msg, pre.observations), tool.name, args, msg

    limited = rate_limit_refusal(ctx)
    if limited:
        return _refusal(S.RATE_LIMITED, limited, pre.observations), tool.name, args, limited

    verdict = approval_gate(ctx, tool, args, call)
    if verdict.decision == "deny":
        msg = echo(verdict.reason, 1000)
        return _refusal(S.DENIED, msg, pre.observations), tool.name, args, msg
    if verdict.decision == "pending":
        outcome = Outcome(status=S.PENDING_APPROVAL, for_llm=verdict.reason, observations=pre.observations, extra=verdict.extra)
        return outcome, tool.name, args, ""
    return run_approved(ctx, tool, args, pre.observations)


def run_approved(ctx: ToolContext, tool: Tool, args: dict[str, Any], observations: list[str]) -> tuple[Outcome, str, Any, str]:
    """Steps 6-9 for a call that passed every gate (also used to resume an approved call)."""
    if tool.starts_processes and ctx.sandbox is None:
        ctx = ctx.replace(sandbox=sandbox_for_call(ctx))
    result, status = run_tool(tool, ctx, args)
    hooks.run_post(ctx, tool, args, result, status)
    scrub_result(result)
    result.for_llm, output_id = apply_output_budget(ctx, tool.name, result.for_llm)
    if result.for_user and len(result.for_user) > output_budget(ctx, tool.name):
        result.for_user = result.for_user[: output_budget(ctx, tool.name)] + "\n[... cut]"
    outcome = Outcome(status=status, for_llm=result.for_llm, for_user=result.for_user, is_error=result.is_error,
                      observations=observations, output_id=output_id, sandbox=getattr(result, "sandbox", None))
    return outcome, tool.name, args, result.for_llm[:500] if result.is_error else ""
