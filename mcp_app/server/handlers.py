"""The MCP methods goclaw serves: `tools/list` (the agent's catalog, exactly what `GET /api/v1/tools` returns) and
`tools/call` (the one pipeline), plus the approval wait with progress and the two resumption tools. The caller
(token, session, header context) comes from the ASGI layer on the HTTP request's scope."""
from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from typing import Any

import mcp_types as types
from django.conf import settings
from django.db import close_old_connections
from mcp.shared.exceptions import MCPError

from goclaw.errors import ApplicationError
from goclaw.generations import MISSING, generation_cache
from mcp_app.server import services
from mcp_app.server.context import call_context, raw_context_from_meta
from tools_app.calls import CallContext, Outcome, ToolCall
from tools_app.choices import ApprovalStatus
from tools_app.execution import approval_execute, approval_refused_outcome, tool_execute
from tools_app.policy import POLICY_CACHE
from tools_app.selectors import tool_catalog_for_agent
from tools_app.services.approvals.requests import approval_wait
from tools_app.toolsets import TOOLSETS_CACHE

logger = logging.getLogger("goclaw.mcp.server")

HEADER_BINDING = "x-mcp-header"  # the JSON Schema annotation that mirrors an argument into an Mcp-Param-* header
# The caller of the request being served (set by the ASGI layer): what `tool_input_schema` answers for.
current_caller: ContextVar[services.Caller | None] = ContextVar("goclaw_mcp_caller", default=None)
WAIT_SLICE_SECONDS = 5  # one approval_wait per slice; a progress notification after each
WAIT_TOOL, RESUME_TOOL = "goclaw_approval_wait", "goclaw_approval_resume"
_APPROVAL_ID_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["approval_id"],
                       "properties": {"approval_id": {"type": "string", "description": "the approval id a pending call named"}}}
HELPER_TOOLS = [
    {"name": WAIT_TOOL, "parameters": _APPROVAL_ID_SCHEMA,
     "description": "Wait again for a person to decide a call that was still pending approval; when they approve, "
                    "the call runs (exactly once, with its original arguments) and its result is returned."},
    {"name": RESUME_TOOL, "parameters": _APPROVAL_ID_SCHEMA,
     "description": "Run a call that was pending approval now if a person approved it (exactly once, with its "
                    "original arguments); otherwise say where the approval stands."},
]


# The threads synchronous Django code runs in: a fixed pool whose threads live as long as the process, each keeping
# its database connection (CONN_MAX_AGE). anyio's own pool ends threads idle for 10 s, and every new thread opened a
# new connection (a new PostgreSQL backend, cold caches) while the old one lingered until garbage collection.
_THREADS = ThreadPoolExecutor(max_workers=settings.MCP_THREADS, thread_name_prefix="goclaw-mcp")


# Set while a handler runs to completion in a thread that may run Django code itself (`run_in_place`).
_in_place: ContextVar[bool] = ContextVar("goclaw_mcp_in_place", default=False)


async def in_thread(func, /, *args, **kwargs):
    """Run synchronous Django code in a worker thread of `_THREADS`, with the thread's stale or broken database
    connection closed first (Django then opens a new one). A cancelled caller stops waiting; the code already
    running finishes (and records what it did). Under `run_in_place` the code runs here, at once."""
    if _in_place.get():
        return func(*args, **kwargs)

    def run():
        close_old_connections()
        return func(*args, **kwargs)

    return await asyncio.get_running_loop().run_in_executor(_THREADS, run)


def run_in_place(coroutine):
    """Run a handler's coroutine to completion in this thread (a worker thread of `_THREADS`, or a WSGI request's
    thread): the handlers are written once, as coroutines whose only waits on other threads are `in_thread` calls,
    and those run in place here, so the coroutine finishes in one step. Its result, or the exception it raised."""
    token = _in_place.set(True)
    try:
        coroutine.send(None)
    except StopIteration as finished:
        return finished.value
    finally:
        _in_place.reset(token)
    coroutine.close()
    raise RuntimeError("an MCP handler run in place waited on something other than in_thread")


def caller_of(ctx) -> services.Caller:
    """The authenticated caller the ASGI layer attached to this message's HTTP request."""
    return ctx.request.scope["goclaw.caller"]


def session_context(caller: services.Caller) -> dict[str, Any]:
    """The session's context (captured at initialize) overridden by this request's headers."""
    return {**(caller.session.context if caller.session is not None else {}), **caller.header_context}


def catalog(agent, context: CallContext) -> tuple[list[dict], str]:
    """The agent's catalog in this context (REST's, plus the resumption tools while a call awaits one), and its
    fingerprint (what listChanged compares)."""
    tools = tool_catalog_for_agent(agent, context)
    if services.resume_waiting(agent):
        tools = [*tools, *HELPER_TOOLS]
    digest = hashlib.sha256(json.dumps([[t["name"], t["description"], t["parameters"]] for t in tools],
                                       sort_keys=True, default=str).encode()).hexdigest()
    return tools, digest


def _catalog_memo(agent, context: CallContext) -> tuple[str, dict[str, Any]]:
    """The catalog's fingerprint and its header-bound schemas (see `header_bound_schemas`), memoised while nothing
    behind them moved: the tool sets' and policies' generations are part of the key, and resumable calls appearing
    or going bump RESUMES_CACHE (a per-call check costs no query)."""
    def compute():
        tools, fingerprint = catalog(agent, context)
        return fingerprint, {t["name"]: t["parameters"] for t in tools if HEADER_BINDING in json.dumps(t["parameters"])}

    key = _memo_key(agent, context, generation_cache(POLICY_CACHE).sync(), generation_cache(TOOLSETS_CACHE).sync())
    return generation_cache(services.RESUMES_CACHE).get(key, compute)


def _memo_key(agent, context: CallContext, policies: int, toolsets: int) -> tuple:
    return agent.pk, context.replace(request_id=""), policies, toolsets


def _catalog_memo_in_memory(agent, context: CallContext) -> tuple[str, dict[str, Any]] | object:
    """`_catalog_memo(...)` when it is cached and current without a query, else MISSING."""
    policies, toolsets = generation_cache(POLICY_CACHE).peek_generation(), generation_cache(TOOLSETS_CACHE).peek_generation()
    if policies is None or toolsets is None:
        return MISSING
    return generation_cache(services.RESUMES_CACHE).peek(_memo_key(agent, context, policies, toolsets))


def catalog_fingerprint(agent, context: CallContext) -> str:
    """`catalog(...)[1]`, memoised (`_catalog_memo`)."""
    return _catalog_memo(agent, context)[0]


def header_bound_schemas(caller: services.Caller, *, in_memory: bool = False) -> dict[str, Any] | object:
    """The input schemas of the caller's tools that bind an argument to an `Mcp-Param-*` header (`x-mcp-header`,
    which a tool bridged from another MCP server may carry), by name. The stateless (2026-07-28) entry checks a
    tools/call's headers against its tool's schema; every other tool has nothing to check, so no catalog is built
    per call. An invalid context has none (the call itself is refused with the reason). `in_memory`: MISSING
    unless the memo answers without the database."""
    try:
        context = call_context(session_context(caller))
    except ApplicationError:
        return {}
    memo = _catalog_memo_in_memory(caller.agent, context) if in_memory else _catalog_memo(caller.agent, context)
    return memo if memo is MISSING else memo[1]


def tool_input_schema(name: str) -> dict | None:
    """The SDK's `get_tool_input_schema`: the schema the current request's `Mcp-Param-*` headers are checked against
    (None: the tool binds no header, nothing to check)."""
    caller = current_caller.get()
    return caller.header_bound_schemas.get(name) if caller is not None else None


def _list_sync(caller: services.Caller) -> list[dict]:
    tools, fingerprint = catalog(caller.agent, call_context(session_context(caller)))
    if caller.session is not None:
        services.session_listed(session=caller.session, fingerprint=fingerprint)
    return tools


async def list_tools(ctx, params) -> types.ListToolsResult:
    """tools/list: the REST catalog of this agent and context (recorded as what the session now knows), in name
    order. Catalogs are per agent and user: clients may reuse one for GOCLAW_MCP_LIST_TTL_MS, never across callers."""
    tools = await in_thread(_list_sync, caller_of(ctx))
    return types.ListToolsResult(tools=[types.Tool(name=t["name"], description=t["description"], input_schema=t["parameters"])
                                        for t in sorted(tools, key=lambda t: t["name"])],
                                 ttl_ms=settings.MCP_LIST_TTL_MS, cache_scope="private")


def catalog_changed(caller: services.Caller) -> bool:
    """Whether this session listed a catalog that is no longer current and nobody told it yet (claimed: true once)."""
    session = caller.session
    if session is None or not session.catalog_fingerprint:
        return False
    try:
        fingerprint = catalog_fingerprint(caller.agent, call_context(session_context(caller)))
    except ApplicationError:
        return False
    if fingerprint in (session.catalog_fingerprint, session.notified_fingerprint):
        return False
    claimed = services.session_claim_notification(session_id=session.session_id, fingerprint=fingerprint)
    session.notified_fingerprint = fingerprint  # told now, or already (another process claimed it, or it listed)
    return claimed


# --- tools/call ----------------------------------------------------------------------------------------------
def tool_result(outcome: Outcome) -> types.CallToolResult:
    """The scrubbed `for_llm` text as content; `as_dict()` minus what is for people only as structured content;
    isError for every refusal or failure the model should see."""
    structured = {k: v for k, v in outcome.as_dict().items() if k != "for_user"}
    return types.CallToolResult(content=[types.TextContent(type="text", text=outcome.for_llm)],
                                structured_content=structured, is_error=outcome.is_error)


def error_result(status: str, message: str, **extra: Any) -> types.CallToolResult:
    """An isError result for a refusal decided here (bad context, unknown approval id)."""
    return tool_result(Outcome(status=status, for_llm=message, is_error=True, extra=extra))


def _pending_result(outcome: Outcome, tool: str) -> types.CallToolResult:
    """Still waiting for a person at the deadline: not an error (nothing failed); tells the model how to resume."""
    approval_id = outcome.extra["approval_id"]
    outcome.for_llm = (f"A person has not yet decided whether {tool!r} may run (approval {approval_id}). Call "
                       f"{WAIT_TOOL} with {{\"approval_id\": \"{approval_id}\"}} to wait for the decision (the call then "
                       f"runs once), or {RESUME_TOOL} later to run it if approved.")
    return tool_result(outcome)


def _run_approved(approval_id, agent, arguments) -> Outcome:
    """The approved call, run once; a refusal of the run itself (used, expired, other arguments) is a denied outcome."""
    try:
        return approval_execute(approval_id=approval_id, agent=agent, arguments=arguments)
    except ApplicationError as exc:
        return Outcome(status="denied", for_llm=exc.message, is_error=True,
                       extra={"approval_id": str(approval_id), "code": exc.code})


async def wait_for_decision(ctx, *, agent, approval_id, arguments, seconds: float) -> Outcome | None:
    """Wait up to `seconds` in slices for a person's decision, reporting progress after each slice. Approved → the
    call runs (once) and its outcome is returned; denied / expired / cancelled → a denied outcome; still pending
    → None."""
    started = time.monotonic()
    while True:
        elapsed = time.monotonic() - started
        if seconds > 0:  # no-op unless the client sent a progressToken
            await ctx.session.report_progress(round(elapsed, 1), seconds, f"waiting for a person to decide (approval {approval_id})")
        remaining = seconds - elapsed
        req = await in_thread(approval_wait, approval_id=approval_id, seconds=max(0.0, min(WAIT_SLICE_SECONDS, remaining)))
        if req.status == ApprovalStatus.APPROVED:
            return await in_thread(_run_approved, req.pk, agent, arguments)
        if req.status != ApprovalStatus.PENDING:
            return approval_refused_outcome(req)
        if remaining <= WAIT_SLICE_SECONDS:
            return None


async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    """tools/call: the pipeline's outcome as a result. An `ask` is answered at once when the request carries a way
    to (`answer_pending`: a task, when the client declared the tasks extension); otherwise it waits for the person
    (see `wait_for_decision`), and a call still pending at GOCLAW_MCP_APPROVAL_WAIT is kept sealed for the
    resumption tools."""
    caller = caller_of(ctx)
    meta = (ctx.params or {}).get("_meta")
    try:
        context = call_context(session_context(caller), raw_context_from_meta(meta), request_id=str(ctx.request_id or ""))
    except ApplicationError as exc:
        return error_result("invalid_context", exc.message, details=exc.details)
    arguments = params.arguments if params.arguments is not None else {}
    if caller.catalog_changed:  # told first, on this POST's stream (clients without a GET stream learn of it here)
        await ctx.session.send_notification(types.ToolListChangedNotification(), related_request_id=ctx.request_id)
    if params.name in (WAIT_TOOL, RESUME_TOOL):
        return await resume_tool(ctx, caller, params.name, arguments)
    call = ToolCall(agent=caller.agent, tool=params.name, arguments=arguments, context=context)
    outcome = await in_thread(tool_execute, call)
    approval_id = outcome.extra.get("approval_id")
    if outcome.status != "pending_approval" or not approval_id:
        return tool_result(outcome)
    answer = answer_pending.get()
    if answer is not None:  # a task (mcp_app.server.tasks): the client declared that extension
        return await answer(ctx, caller, approval_id=approval_id, arguments=arguments)
    decided = await wait_for_decision(ctx, agent=caller.agent, approval_id=approval_id, arguments=arguments,
                                      seconds=settings.MCP_APPROVAL_WAIT)
    if decided is not None:
        return tool_result(decided)
    await in_thread(services.resume_store, approval_id=approval_id, agent=caller.agent, arguments=arguments)
    return _pending_result(outcome, params.name)


async def resume_tool(ctx, caller: services.Caller, name: str, arguments: dict) -> types.CallToolResult:
    """goclaw_approval_wait / goclaw_approval_resume: run this agent's call awaiting resumption once approved."""
    try:
        approval_id = uuid.UUID(str(arguments.get("approval_id"))[:64])
    except (AttributeError, ValueError):
        return error_result("invalid_arguments", "approval_id must be the approval id a pending call named")
    try:
        approval, original = await in_thread(services.resume_open, approval_id=approval_id, agent=caller.agent)
    except ApplicationError as exc:
        return error_result("denied", exc.message, code=exc.code)
    seconds = settings.MCP_APPROVAL_WAIT if name == WAIT_TOOL else 0
    decided = await wait_for_decision(ctx, agent=caller.agent, approval_id=approval.pk, arguments=original, seconds=seconds)
    if decided is None:
        still = Outcome(status="pending_approval", for_llm="", extra={"approval_id": str(approval.pk)})
        return _pending_result(still, approval.tool_name)
    await in_thread(services.resume_erase, approval_id=approval.pk)
    return tool_result(decided)


def contained(handler):
    """`handler` with its unexpected failures logged and answered by a generic JSON-RPC internal error: the SDK
    would send the exception's own text (internal names, SQL, paths) to the client."""
    @functools.wraps(handler)
    async def run(ctx, params):
        try:
            return await handler(ctx, params)
        except MCPError:
            raise
        except Exception:
            logger.exception("MCP %s failed", handler.__name__)
            raise MCPError(code=types.INTERNAL_ERROR, message="internal error (logged on the server)") from None
    return run


# How the tools/call being served answers a call that waits for a person without waiting for the decision, set per
# request by an extension's middleware: the tasks extension (mcp_app.server.tasks) answers with a task when the
# client declared it. None: the call waits (`wait_for_decision`).
answer_pending: ContextVar[Callable[..., Awaitable[types.CallToolResult]] | None] = ContextVar(
    "goclaw_mcp_answer_pending", default=None)
