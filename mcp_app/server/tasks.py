"""Calls that wait for a person, answered as MCP tasks: the `io.modelcontextprotocol/tasks` extension (SEP-2663).

When the pipeline asks a person about a `tools/call` and the client declared the extension, the call is answered at
once with a task (`resultType: "task"`) instead of holding the request open. `tasks/get` reports `working` with the
approval (its id, what will run, its deadline) while the person decides; the first `tasks/get`, in any process,
that finds the approval granted claims the task (working → running, one conditional UPDATE) and runs the call once
with its sealed original arguments, and the result is inlined. A person's denial, or nobody deciding in time, is
a tool-level outcome: `completed` with an error result the model reads. `failed` (with a JSON-RPC error) is kept
for server-side failures. `tasks/cancel` withdraws the pending approval. The state is in PostgreSQL (`MCPTask`,
written by `mcp_app.server.services`): any replica serves any task, across restarts. docs/mcp-server-tasks.md.

Two gaps of the 2025-11-25 wire are bridged by `TasksMiddleware`: it has no `capabilities.extensions` and no
`resultType`, and the SDK's runner sieves spec results through it. The middleware adds the extension to the
`initialize` result, and puts the task in place of the call's (placeholder) result after the sieve.
"""
from __future__ import annotations

import functools
import logging
import re
import threading
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone as dt_timezone
from typing import Any

import mcp_types as types
from django.db import connections
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types import (CLIENT_CAPABILITIES_META_KEY, HEADER_MISMATCH, INTERNAL_ERROR, INVALID_PARAMS,
                       MISSING_REQUIRED_CLIENT_CAPABILITY)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from goclaw import crypto
from mcp_app.models import MCPTask, MCPTaskStatus
from mcp_app.server import services
from mcp_app.server.handlers import _run_approved, answer_pending, caller_of, contained, in_thread, tool_result
from tools_app.calls import Outcome
from tools_app.choices import ApprovalStatus
from tools_app.execution import approval_refused_outcome
from tools_app.models import Agent, ApprovalRequest
from tools_app.services.approvals.requests import approval_wait

logger = logging.getLogger("goclaw.mcp.server")

TASKS = "io.modelcontextprotocol/tasks"
POLL_INTERVAL_MS = 2000  # what clients are told to poll at: a person decides in seconds to minutes
RUN_ANSWER_SECONDS = 5  # the tasks/get that starts an approved call answers with its result if done by then
SUMMARY_CHARS = 300
# `_meta` keys of a task: which approval it waits for, until when, and what will run
META_APPROVAL, META_EXPIRES = "goclaw/approval_id", "goclaw/expires_at"
META_TOOL, META_SUMMARY = "goclaw/tool", "goclaw/summary"
REQUIRED = {"requiredCapabilities": {"extensions": {TASKS: {}}}}
WORKING, RUNNING = MCPTaskStatus.WORKING, MCPTaskStatus.RUNNING


class TaskParams(types.RequestParams):
    """`tasks/get`, `tasks/cancel` and `tasks/update` params (the responses to input requests an update carries
    are not read: goclaw's tasks never ask the client for input)."""

    task_id: str


# --- declaring the extension -------------------------------------------------------------------------------------
def declared(ctx, caller: services.Caller) -> bool:
    """Whether this request's client declared the extension: in the request's `_meta` client capabilities (every
    2026-07-28 request, or a per-request opt-in), at initialize on this connection, or at initialize in another
    process (the session row: a revived connection had no handshake here)."""
    meta = (ctx.params or {}).get("_meta")
    if isinstance(meta, Mapping) and TASKS in services.declared_extensions(meta.get(CLIENT_CAPABILITIES_META_KEY)):
        return True
    capabilities = ctx.session.client_capabilities
    if capabilities is not None and TASKS in (capabilities.extensions or {}):
        return True
    return caller.session is not None and TASKS in (caller.session.extensions or [])


# --- tools/call → a task -----------------------------------------------------------------------------------------
async def task_started(ctx, caller: services.Caller, *, slot: dict, approval_id,
                       arguments: Any) -> types.CallToolResult:
    """Answer a call that waits for a person with a task, created durably first (a `tasks/get` right after the
    answer resolves it): kept in `slot` for `TasksMiddleware`, which puts it in place of the placeholder returned."""
    slot["task"] = {"resultType": "task", **await in_thread(_create, caller.agent, approval_id, arguments)}
    return types.CallToolResult(content=[types.TextContent(type="text", text=f"task {slot['task']['taskId']}")])


def _create(agent: Agent, approval_id, arguments: Any) -> dict:
    return task_wire(services.task_create(agent=agent, approval_id=approval_id, arguments=arguments))


class TasksMiddleware:
    """Delivers the extension on every wire (see the module doc). A `tools/call` of a client that declared it may
    answer a call that waits for a person with a task (`answer_pending`); the task replaces the call's placeholder
    result after the runner shaped it, keeping the envelope's `_meta` (e.g. the 2026-07-28 `serverInfo` stamp).
    `initialize` results advertise the extension."""

    async def __call__(self, ctx, call_next):
        caller = ctx.request.scope.get("goclaw.caller") if ctx.request is not None else None  # see handlers.caller_of
        if ctx.method != "tools/call" or ctx.request_id is None or caller is None or not declared(ctx, caller):
            result = await call_next(ctx)
            if ctx.method == "initialize" and isinstance(result, dict) and isinstance(result.get("capabilities"), dict):
                capabilities = result["capabilities"]
                extensions = capabilities.get("extensions") if isinstance(capabilities.get("extensions"), dict) else {}
                result = {**result, "capabilities": {**capabilities, "extensions": {**extensions, TASKS: {}}}}
            return result
        slot: dict = {}
        token = answer_pending.set(functools.partial(task_started, slot=slot))
        try:
            result = await call_next(ctx)
        finally:
            answer_pending.reset(token)
        if "task" not in slot:
            return result
        envelope = result.get("_meta") if isinstance(result, dict) and isinstance(result.get("_meta"), dict) else {}
        return {**slot["task"], "_meta": {**slot["task"]["_meta"], **envelope}}


# --- tasks/get, tasks/cancel, tasks/update -----------------------------------------------------------------------
def _task_id(ctx, params: TaskParams) -> uuid.UUID | None:
    """The task a request names (None: not a task id goclaw issues). On the 2026-07-28 HTTP wire its
    `Mcp-Name` header must name the same task (SEP-2663 routing headers), else -32020 like a mismatched
    tools/call."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and ctx.request is not None:
        raw = ctx.request.headers.get(MCP_NAME_HEADER)
        if raw is None or decode_header_value(raw.strip()) != params.task_id:
            raise MCPError(code=HEADER_MISMATCH, message=f"the {MCP_NAME_HEADER} header must be the request's taskId")
    try:
        return uuid.UUID(params.task_id[:64])
    except ValueError:
        return None


def _unknown(ctx, caller: services.Caller) -> MCPError:
    """No such task of this agent: -32602, or -32021 naming the extension when the client never declared it."""
    if declared(ctx, caller):
        return MCPError(code=INVALID_PARAMS, message="no such task (unknown, expired or not yours)")
    return MCPError(code=MISSING_REQUIRED_CLIENT_CAPABILITY, data=REQUIRED,
                    message=f"tasks need the {TASKS} extension: declare it in the client capabilities")


async def get_task(ctx, params: TaskParams) -> dict:
    """tasks/get: where the task stands (its result inlined once completed). Polling is what runs an approved
    call: see `task_poll`. A task of this agent is served whichever process or session created it."""
    caller = caller_of(ctx)
    task_id = _task_id(ctx, params)
    wire = await in_thread(task_poll, task_id=task_id, agent=caller.agent) if task_id is not None else None
    if wire is None:
        raise _unknown(ctx, caller)
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:  # also a valid 2025-11-25 `Task` (its names)
        wire.update(ttl=wire["ttlMs"], pollInterval=wire["pollIntervalMs"])
    return {"resultType": "complete", **wire}


async def cancel_task(ctx, params: TaskParams) -> dict:
    """tasks/cancel: an empty acknowledgement; the cancelled status shows on the next tasks/get. A task waiting
    for its person is cancelled with its approval, so the call never runs; cancelling a running or finished task
    changes nothing (idempotent)."""
    caller = caller_of(ctx)
    task_id = _task_id(ctx, params)
    if task_id is None or not await in_thread(services.task_cancel, task_id=task_id, agent=caller.agent):
        raise _unknown(ctx, caller)
    return {"resultType": "complete"}


async def update_task(ctx, params: TaskParams) -> dict:
    """tasks/update: an empty acknowledgement. goclaw's tasks wait for a person, never for the client
    (`input_required` does not occur), so there is nothing to deliver."""
    caller = caller_of(ctx)
    task_id = _task_id(ctx, params)
    if task_id is None or await in_thread(services.task_get, task_id=task_id, agent=caller.agent) is None:
        raise _unknown(ctx, caller)
    return {"resultType": "complete"}


def install(server) -> None:
    """Serve the extension on `server`: advertised, its methods (`tasks/result` and `tasks/list` are not part of
    it: -32601), and the middleware."""
    server.extensions[TASKS] = {}
    server.add_request_handler("tasks/get", TaskParams, contained(get_task))
    server.add_request_handler("tasks/cancel", TaskParams, contained(cancel_task))
    server.add_request_handler("tasks/update", TaskParams, contained(update_task))
    server.middleware.append(TasksMiddleware())


# --- bringing a task up to date (synchronous: runs in a worker thread) -------------------------------------------
def task_poll(*, task_id, agent: Agent) -> dict | None:
    """This agent's task on the wire (None: unknown), after bringing a waiting one up to date with its approval:
    granted → claimed by this caller and run, once (in its own thread: this poll shows the result if it is done
    within RUN_ANSWER_SECONDS, a later one otherwise); denied or expired → completed with the refusal as an error
    result; cancelled → cancelled. Composes short atomic services: the call runs outside any transaction, and
    polls meanwhile (any process) see `working`."""
    task = services.task_get(task_id=task_id, agent=agent)
    if task is None:
        return None
    if task.status == WORKING:
        _advance(task, agent)
        task = services.task_get(task_id=task_id, agent=agent) or task
    return task_wire(task)


def _advance(task: MCPTask, agent: Agent) -> None:
    approval = approval_wait(approval_id=task.approval_id, seconds=0)  # marks an overdue request expired
    if approval.status == ApprovalStatus.APPROVED:
        if services.task_claim(task=task):
            # Its own thread: this poll answers within RUN_ANSWER_SECONDS whatever the tool takes, and the run
            # finishes (and keeps its result) even if the client gives up; the process waits for it on shutdown.
            runner = threading.Thread(target=_run, args=(task, approval, agent), name=f"goclaw-mcp-task-{task.pk}")
            runner.start()
            runner.join(RUN_ANSWER_SECONDS)
    elif approval.status == ApprovalStatus.CANCELLED:
        services.task_finish(task=task, expected=WORKING, status=MCPTaskStatus.CANCELLED,
                             message="the approval request was cancelled")
    elif approval.status != ApprovalStatus.PENDING:  # denied, expired
        refused = _refusal(approval)
        services.task_finish(task=task, expected=WORKING, status=MCPTaskStatus.COMPLETED, result=_result(refused),
                             message=refused.for_llm)


def _refusal(approval: ApprovalRequest) -> Outcome:
    """What the model reads when its call will not run: the same words as without tasks, and the person's note."""
    outcome = approval_refused_outcome(approval)
    if approval.status == ApprovalStatus.DENIED and approval.note:
        outcome.for_llm = f"{outcome.for_llm} (their note: {approval.note})"
    return outcome


def _run(task: MCPTask, approval: ApprovalRequest, agent: Agent) -> None:
    """Run the claimed task's call (exactly once: the approval is consumed by the run, the task by the claim) and
    keep its result. A refusal of the run itself (arguments not the approved ones, approval used or expired) is an
    error result; only a server-side failure fails the task."""
    try:
        outcome = _run_approved(approval.pk, agent, services.task_arguments(task))
        services.task_finish(task=task, expected=RUNNING, status=MCPTaskStatus.COMPLETED, result=_result(outcome),
                             message=outcome.for_llm if outcome.status == "denied" else "")
    except crypto.DecryptionError:
        _fail(task, "the held call could not be opened (the encryption key changed?); call the tool again")
    except Exception:
        logger.exception("MCP task %s: running the approved call failed", task.pk)
        _fail(task, "running the approved call failed on the server (logged); call the tool again")
    finally:
        connections.close_all()  # this thread's


def _fail(task: MCPTask, message: str) -> None:
    services.task_finish(task=task, expected=RUNNING, status=MCPTaskStatus.FAILED, message=message,
                         error={"code": INTERNAL_ERROR, "message": message})


def _result(outcome: Outcome) -> dict:
    return tool_result(outcome).model_dump(by_alias=True, mode="json", exclude_none=True)


# --- the wire shape ----------------------------------------------------------------------------------------------
def _iso(moment: datetime) -> str:
    return moment.astimezone(dt_timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _short(summary: str) -> str:
    """An approval's summary on one line, at most SUMMARY_CHARS (it is scrubbed when the request is made)."""
    line = re.sub(r"\s+", " ", summary).strip()
    return line if len(line) <= SUMMARY_CHARS else line[:SUMMARY_CHARS - 1] + "…"


def task_wire(task: MCPTask) -> dict:
    """A task as SEP-2663 puts it on the wire (without `resultType`): `running` is `working`; the result of a
    completed task and the error of a failed one are inlined; `_meta` says which approval it waits for, what will
    run and until when a person can decide."""
    approval = task.approval
    waiting = task.status in (WORKING, RUNNING)
    wire: dict[str, Any] = {
        "taskId": str(task.pk), "status": WORKING.value if waiting else task.status,
        "createdAt": _iso(task.created_at), "lastUpdatedAt": _iso(task.updated_at),
        "ttlMs": int((task.expires_at - task.created_at).total_seconds() * 1000), "pollIntervalMs": POLL_INTERVAL_MS,
    }
    meta = {META_APPROVAL: str(task.approval_id), META_TOOL: task.tool_name}
    if task.status == WORKING:
        summary = _short(approval.summary)
        meta.update({META_EXPIRES: _iso(approval.expires_at), META_SUMMARY: summary})
        wire["statusMessage"] = (f"waiting for a person to approve: {summary} (approval {task.approval_id}; "
                                 f"decide by {_iso(approval.expires_at)})")
    elif task.status == RUNNING:
        wire["statusMessage"] = "a person approved the call; it is running"
    elif task.status_message:
        wire["statusMessage"] = task.status_message
    if task.status == MCPTaskStatus.COMPLETED:
        try:
            wire["result"] = services.task_result(task)
        except crypto.DecryptionError:
            message = "the result could not be opened (the encryption key changed?)"
            wire.update(status=MCPTaskStatus.FAILED.value, statusMessage=message,
                        error={"code": INTERNAL_ERROR, "message": message})
    elif task.status == MCPTaskStatus.FAILED:
        wire["error"] = task.error or {"code": INTERNAL_ERROR, "message": task.status_message or "failed"}
    wire["_meta"] = meta
    return wire
