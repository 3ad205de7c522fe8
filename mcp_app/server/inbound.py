"""What both servers of `/mcp` read from a request before it reaches the SDK (the MCP app on the MCP port,
mcp_app.server.asgi, and the main port's direct answers, mcp_app.server.direct.answer_here): its body's JSON-RPC
message, its protocol era, its routing headers as the SDK compares them, and its caller (`authorize`)."""
from __future__ import annotations

import json

from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from goclaw.generations import MISSING
from mcp_app.server import services
from mcp_app.server.handlers import catalog_changed, header_bound_schemas
from tools_app.services.agents import token_authenticate_in_memory

UNPARSED = object()


def parsed_body(body: bytes):
    """The JSON a POST body holds, else UNPARSED (the SDK answers malformed bodies)."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        return UNPARSED


def json_message(parsed) -> dict | None:
    """The JSON-RPC request or notification a parsed POST body holds, else None."""
    return parsed if isinstance(parsed, dict) and isinstance(parsed.get("method"), str) else None


def wants_progress(message: dict) -> bool:
    """A request that asked for progress notifications (it is answered with an SSE stream)."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and meta.get("progressToken") is not None


_ROUTING_HEADERS = (b"mcp-method", b"mcp-name", b"mcp-protocol-version")


def routing_headers_trimmed(raw: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The request's headers with the MCP routing headers' surrounding whitespace removed: it is not part of a field
    value (RFC 9110 §5.5), and the SDK compares the values with the body's exactly."""
    return [(k, v.strip(b" \t") if k in _ROUTING_HEADERS or k.startswith(b"mcp-param-") else v) for k, v in raw]


def stateless_era(headers: dict[str, str]) -> bool:
    """Whether a request belongs to the stateless era (2026-07-28): its `MCP-Protocol-Version` header names no
    handshake-era version. An unknown version counts too: the SDK's stateless entry answers it -32022 with the
    versions it serves and the request's id. Requests without the header, or naming 2025-11-25 and before, are the
    session era (initialize, `Mcp-Session-Id`)."""
    version = headers.get("mcp-protocol-version")
    return version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS


def authorize(*, raw_token: str | None, session_id: str | None, header_context: dict,
              message: dict | None) -> services.Caller | None:
    """The caller of one request (None: not authenticated), in one worker-thread hop: token, session, for a
    session's tools/call whether its catalog changed unannounced (then it is answered with SSE, the change first),
    and for a stateless tools/call the schemas its `Mcp-Param-*` headers are checked against."""
    token, session = services.request_authorize(raw_token=raw_token, session_id=session_id)
    if token is None:
        return None
    caller = services.Caller(token=token, session=session, header_context=header_context)
    if message is not None and message.get("method") == "tools/call":
        caller.catalog_changed = catalog_changed(caller)
        if session is None:
            caller.header_bound_schemas = header_bound_schemas(caller)
    return caller


def authorize_in_memory(*, raw_token: str | None, header_context: dict, message: dict | None) -> services.Caller | None | object:
    """`authorize` for a stateless request when this process's caches answer it without the database (the token
    row and the memoised catalog, both current), else MISSING: most calls then cost one worker-thread hop, not two
    (a hop costs about as much CPU as the SDK's whole exchange). Anything that would need a query or a write
    (`last_used_at` due) is left to `authorize` in a thread."""
    token = token_authenticate_in_memory(raw_token) if raw_token else None
    if token is None or token is MISSING:
        return token
    caller = services.Caller(token=token, session=None, header_context=header_context)
    if message is not None and message.get("method") == "tools/call":
        schemas = header_bound_schemas(caller, in_memory=True)
        if schemas is MISSING:
            return MISSING
        caller.header_bound_schemas = schemas
    return caller
