"""The stateless (2026-07-28) `tools/call` answered with one JSON body — nearly all of an agent's traffic — served
from the SDK's own protocol pieces without its per-request scaffolding. The SDK's stateless entry builds, for every
call, a Starlette request, a transport-security check, a second JSON parse, a `Connection`, a runner with its
middleware chain and a shielded teardown: about half the MCP layer's CPU (benchmarks/bench_mcp_layers.py), and what
kept a `tools/call` over MCP below REST's execute at 32 clients (benchmarks/bench_mcp_server.py).

What decides the answer is still the SDK's: its validation ladder (`_meta` envelope, routing headers against the
body, supported version), its per-version method surface for the params, the registered handler with its params
model, its result surface, `resultType` and `serverInfo` stamp, and its error table. Every request this path does not
cover exactly — anything but a well-formed `tools/call` with a JSON answer, a ladder rejection, duplicated routing
headers, `Mcp-Param-*` arguments, a declared extension (tasks), server middleware other than goclaw's tasks one (an
OpenTelemetry SDK installed) — is left to the SDK untouched. tests/mcp_app/test_mcp_direct.py holds both paths to the
same answers.

It runs where Django code runs, in one step (`handlers.run_in_place`): on the MCP port in one worker-thread hop for
the whole exchange (`answered`), and on the main port in the WSGI request's own thread (`answer_here`), where REST's
execute runs, instead of being proxied to the MCP port."""
from __future__ import annotations

import json
import threading
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.runner import modern_error_data
from mcp.server.streamable_http import check_accept_headers
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import (ERROR_CODE_HTTP_STATUS, InboundModernRoute, classify_inbound_request,
                                find_duplicated_routing_header)
from mcp_types import CLIENT_CAPABILITIES_META_KEY, INTERNAL_ERROR, METHOD_NOT_FOUND, SERVER_INFO_META_KEY
from mcp_types import methods as mcp_methods
from mcp_types.jsonrpc import JSONRPCRequest
from pydantic import ValidationError
from starlette.requests import Request

from goclaw.api import bearer_from_header
from goclaw.errors import ApplicationError
from goclaw.generations import MISSING
from mcp_app.server import services
from mcp_app.server.context import call_context, raw_context_from_headers
from mcp_app.server.handlers import current_caller, in_thread, run_in_place
from mcp_app.server.inbound import (authorize, authorize_in_memory, json_message, parsed_body, routing_headers_trimmed,
                                    stateless_era, wants_progress)
from mcp_app.server.tasks import TASKS, TasksMiddleware

METHOD = "tools/call"


class _NoBackChannel:
    """The session a JSON-answered exchange has: nothing can reach the client before the result (the SDK drops
    progress and notifications there the same way)."""

    async def report_progress(self, *args, **kwargs) -> None:
        return None

    async def send_notification(self, *args, **kwargs) -> None:
        return None


_SILENT = _NoBackChannel()


def _covered(server: Server, scope, message: Any) -> tuple[JSONRPCRequest, str, Request] | None:
    """The request as the SDK reads it, its protocol version and the HTTP request when this path answers it exactly as
    the SDK would, else None. Headers are read as the SDK reads them (Starlette's: the first of repeated values)."""
    if scope["method"] != "POST" or not isinstance(message, dict) or message.get("method") != METHOD or "id" not in message:
        return None
    if not all(isinstance(m, TasksMiddleware) for m in server.middleware):
        return None
    http_request = Request(scope)
    items = http_request.headers.items()
    if find_duplicated_routing_header(items) is not None:
        return None
    headers = dict(reversed(items))  # the first of repeated values wins, as Starlette's Headers.get reads them
    if not headers.get("content-type", "").lower().startswith("application/json"):
        return None
    if not check_accept_headers(http_request)[0]:
        return None
    try:
        request = JSONRPCRequest.model_validate(message)
    except ValidationError:
        return None
    params = request.params
    if not isinstance(params, dict):
        return None
    lookup, name = server.get_tool_input_schema, params.get("name")
    if lookup is None or (isinstance(name, str) and lookup(name) is not None):  # `Mcp-Param-*` arguments to check
        return None
    verdict = classify_inbound_request(message, headers=headers)
    if not isinstance(verdict, InboundModernRoute):
        return None
    meta = params.get("_meta")
    if TASKS in services.declared_extensions(meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, dict) else None):
        return None
    return request, verdict.protocol_version, http_request


async def _result(server: Server, request: JSONRPCRequest, version: str, http_request: Request) -> dict[str, Any]:
    """The wire result of the call (what the SDK's runner returns for it), or the exception it raises."""
    params = request.params
    try:
        mcp_methods.validate_client_request(METHOD, version, params)
    except KeyError:
        raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=METHOD) from None
    entry = server.get_request_handler(METHOD)
    if entry is None:
        raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=METHOD)
    typed = entry.params_type.model_validate(params, by_name=False)
    ctx = ServerRequestContext(session=_SILENT, lifespan_context=None, protocol_version=version, method=METHOD,
                               params=params, request_id=request.id, request=http_request)
    result = await entry.handler(ctx, typed)
    dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
    try:
        wire = mcp_methods.serialize_server_result(METHOD, version, dumped)
    except ValidationError:
        raise MCPError(code=INTERNAL_ERROR, message="Handler returned an invalid result") from None
    if wire.get("resultType") is None:
        wire["resultType"] = "complete"
    meta = wire.get("_meta")
    if meta is None or (isinstance(meta, dict) and meta.get(SERVER_INFO_META_KEY) is None):
        wire["_meta"] = {**(meta or {}), SERVER_INFO_META_KEY: server.server_info_stamp}
    return wire


def answer(server: Server, scope, message: Any) -> tuple[int, bytes] | None:
    """The HTTP status and JSON body answering a stateless `tools/call` this path covers (see the module doc), its
    caller in `scope["goclaw.caller"]`; None when it does not cover it (nothing was done). Synchronous: call it where
    Django code may run."""
    caller = current_caller.set(scope["goclaw.caller"])  # what the SDK's `Mcp-Param-*` schema lookup answers for
    try:
        covered = _covered(server, scope, message)
        if covered is None:
            return None
        request, version, http_request = covered
        try:
            answer, status = {"jsonrpc": "2.0", "id": request.id,
                              "result": run_in_place(_result(server, request, version, http_request))}, 200
        except Exception as exc:  # mapped as the SDK's stateless entry maps it: no handler internals on the wire
            error = modern_error_data(exc)
            answer = {"jsonrpc": "2.0", "id": request.id, "error": error.model_dump(mode="json", by_alias=True, exclude_none=True)}
            status = ERROR_CODE_HTTP_STATUS.get(error.code, 200)
    finally:
        current_caller.reset(caller)
    return status, json.dumps(answer, separators=(",", ":")).encode()


async def answered(server: Server, scope, send, message: Any) -> bool:
    """The MCP port: answer a stateless `tools/call` this path covers, in one worker-thread hop. True once the answer
    is sent; False when nothing was sent and the SDK must serve the request."""
    if not isinstance(message, dict) or message.get("method") != METHOD:
        return False
    answered = await in_thread(answer, server, scope, message)
    if answered is None:
        return False
    status, body = answered
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})
    return True


_server: list[Server] = []
_server_lock = threading.Lock()


def _main_port_server() -> Server:
    """The SDK server this (WSGI) process answers with, built on its first MCP call (a web process that never
    serves one never loads the SDK)."""
    with _server_lock:
        if not _server:
            from mcp_app.server.server import build_server

            _server.append(build_server())
        return _server[0]


def answer_here(raw_headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[int, bytes] | None:
    """The main port: the answer to a POST (its headers, lower-case names, and body) when it is a stateless
    `tools/call` this path covers for an authenticated caller, run in this thread; None for anything else, which
    the view proxies to the MCP port unchanged (that answers refusals: 401, bad context, unsupported version)."""
    raw_headers = routing_headers_trimmed(raw_headers)
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in raw_headers}
    message = json_message(parsed_body(body)) if stateless_era(headers) else None
    if message is None or message.get("method") != METHOD or wants_progress(message):
        return None
    header_context = raw_context_from_headers(headers)
    try:
        call_context(header_context)
    except ApplicationError:
        return None
    raw_token = bearer_from_header(headers.get("authorization", ""))
    caller = authorize_in_memory(raw_token=raw_token, header_context=header_context, message=message)
    if caller is MISSING:
        caller = authorize(raw_token=raw_token, session_id=None, header_context=header_context, message=message)
    if caller is None:
        return None
    scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": raw_headers, "goclaw.caller": caller}
    return answer(_main_port_server(), scope, message)
