"""The ASGI application `manage.py up` serves on GOCLAW_MCP_PORT (granian or uvicorn: GOCLAW_MCP_SERVER): `/mcp` only. A
thin layer in front of the SDK's session manager, which speaks both protocol eras: the session era (2025-11-25 and
before: initialize, `Mcp-Session-Id`) and the stateless era (2026-07-28: every request self-contained, its
`MCP-Protocol-Version` header and `_meta` saying so; the SDK checks the routing headers against the body). This layer
refuses a foreign Host or browser Origin first (DNS-rebinding protection, mcp_app.server.security), authenticates
every request (agent bearer token, 401 with the error envelope and the OAuth challenge naming the protected-resource
metadata it also serves: docs/mcp-oauth.md), finds the session in PostgreSQL (another agent's session id is answered
404 as if unknown), records sessions as they open and end, and runs the catalog watcher that sends
`notifications/tools/list_changed`. A stateless `tools/call` answered with JSON is served from the SDK's protocol
pieces without its per-request scaffolding (`mcp_app.server.direct`). Every JSON-RPC error it or the SDK answers
carries the request's id when the body could be read far enough to have one (JSON-RPC 2.0)."""
from __future__ import annotations

import json
import logging
import os
from collections import Counter

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "goclaw.settings")
django.setup()

import anyio  # noqa: E402
from django.conf import settings  # noqa: E402
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER  # noqa: E402
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecuritySettings  # noqa: E402
from mcp_types import UNSUPPORTED_PROTOCOL_VERSION  # noqa: E402
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS  # noqa: E402

from goclaw.api import bearer_from_header  # noqa: E402
from goclaw.errors import ApplicationError  # noqa: E402
from goclaw.generations import MISSING  # noqa: E402
from mcp_app.server import services  # noqa: E402
from mcp_app.server.context import call_context, raw_context_from_headers  # noqa: E402
from mcp_app.server.handlers import catalog_fingerprint, current_caller, in_thread  # noqa: E402
from mcp_app.server.inbound import (authorize, authorize_in_memory, json_message, parsed_body,  # noqa: E402
                                    routing_headers_trimmed, stateless_era, wants_progress)
from mcp_app.server import content, direct  # noqa: E402
from mcp_app.server.server import build_server  # noqa: E402
from mcp_app.server.manager import RevivingSessionManager, json_answer, session_id_of  # noqa: E402
from mcp_app.server.security import host_allowed, origin_allowed  # noqa: E402
from tools_app.oauth.metadata import (RESOURCE_METADATA_PATH, protected_resource_metadata,  # noqa: E402
                                      resource_base_url, www_authenticate_value)
from tools_app.services.agents import token_active  # noqa: E402

logger = logging.getLogger("goclaw.mcp.server")
PATH = "/mcp"
SERVED_VERSIONS = (*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS)  # both eras (module doc)
WATCH_SECONDS = 1.0  # how often open GET streams are checked for a changed catalog


async def _send_json(send, status: int, body: dict, headers: list[tuple[bytes, bytes]] = ()) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *headers]})
    await send({"type": "http.response.body", "body": data})


async def send_error(send, status: int, code: str, message: str, details=None, headers=()) -> None:
    """The platform's error envelope (HTTP-level refusals: nothing reached MCP)."""
    await _send_json(send, status, {"error": {"code": code, "message": message, "details": details}}, headers)


# Who a JSON-RPC error answers: (is a batch, ids). One answer: [its request's id, or None when it could not be read].
# A batch: one id per member that expects an answer (an invalid member: None); empty means "answer with one null id".
ErrorAddress = tuple[bool, list]
UNREAD: ErrorAddress = (False, [None])


def _valid_id(value) -> bool:
    return value is None or isinstance(value, str) or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _member_id(member):
    """A request's id (None when the member is not a valid request or its id is not a valid id)."""
    if isinstance(member, dict) and isinstance(member.get("method"), str) and _valid_id(member.get("id")):
        return member.get("id")
    return None


def _expects_answer(member) -> bool:
    """Notifications and responses are never answered; requests and invalid members are (JSON-RPC 2.0 §6)."""
    if not isinstance(member, dict):
        return True
    if isinstance(member.get("method"), str):
        return "id" in member
    return not ("result" in member or "error" in member)


def error_address(parsed) -> ErrorAddress:
    """Where a JSON-RPC error about this (parsed) body goes: the request's id, each batch member's, or null."""
    if isinstance(parsed, list) and parsed:
        ids = [_member_id(member) for member in parsed if _expects_answer(member)]
        return (True, ids) if ids else UNREAD
    if isinstance(parsed, dict):
        return False, [_member_id(parsed)]
    return UNREAD


def jsonrpc_error_body(error: dict, address: ErrorAddress):
    is_batch, ids = address
    answers = [{"jsonrpc": "2.0", "id": request_id, "error": error} for request_id in ids]
    return answers if is_batch else answers[0]


async def send_jsonrpc_error(send, status: int, code: int, message: str, data=None, *,
                             address: ErrorAddress = UNREAD) -> None:
    error = {"code": code, "message": message, **({"data": data} if data is not None else {})}
    await _send_json(send, status, jsonrpc_error_body(error, address))


def addressing_errors(send, address: ErrorAddress):
    """`send` with the SDK's JSON-RPC error answers (which always say `"id": null`) re-addressed to the request: an
    error status with a JSON body is held until complete, its id(s) filled in, then sent. Other answers pass."""
    if address == UNREAD:
        return send
    held: dict | None = None
    chunks: list[bytes] = []

    async def addressed(message):
        nonlocal held
        if message["type"] == "http.response.start":
            content_type = next((v for k, v in message.get("headers", []) if k.lower() == b"content-type"), b"")
            if message["status"] >= 400 and content_type.startswith(b"application/json"):
                held = message
                return
        elif held is not None and message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if message.get("more_body"):
                return
            body = b"".join(chunks)
            try:
                answer = json.loads(body)
            except ValueError:
                answer = None
            if isinstance(answer, dict) and answer.get("jsonrpc") == "2.0" and "error" in answer and answer.get("id") is None:
                body = json.dumps(jsonrpc_error_body(answer["error"], address)).encode()
            headers = [(k, v) for k, v in held.get("headers", []) if k.lower() != b"content-length"]
            start, held = {**held, "headers": [*headers, (b"content-length", str(len(body)).encode())]}, None
            await send(start)
            await send({"type": "http.response.body", "body": body})
            return
        await send(message)

    return addressed


async def _read_body(receive, limit: int) -> bytes | None:
    """The whole request body, or None when it is longer than `limit`."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b""
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def _replay(body: bytes, receive):
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()
    return replay


def _header_values(scope, name: bytes) -> list[str]:
    return [v.decode("latin-1") for k, v in scope["headers"] if k == name]


class MCPApplication:
    """`/mcp` for agents (see the module doc); lifespan starts the session manager and the catalog watcher."""

    def __init__(self) -> None:
        # Host and Origin are checked above the SDK (`http`, stricter than its DNS-rebinding check): its own check
        # is off, with settings built once (left unset, the SDK builds them again for every request).
        self.manager = RevivingSessionManager(build_server(), session_idle_timeout=settings.MCP_SESSION_IDLE_SECONDS,
                                              security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False))
        self.open_streams: Counter[str] = Counter()  # session id -> GET streams open in this process
        self.agent_streams: Counter[int] = Counter()  # agent pk -> GET and listen streams open in this process
        self.content_seen: dict[str, dict[str, str]] = {}  # session id -> the list digests its stream was told

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            await self.lifespan(receive, send)
        elif scope["type"] == "http":
            await self.http(scope, receive, send)

    async def lifespan(self, receive, send) -> None:
        await receive()  # lifespan.startup
        try:
            async with self.manager.run(), anyio.create_task_group() as tasks:
                tasks.start_soon(self.watch_catalogs)
                await send({"type": "lifespan.startup.complete"})
                await receive()  # lifespan.shutdown
                tasks.cancel_scope.cancel()
        except Exception as exc:
            logger.exception("MCP server lifespan failed")
            await send({"type": "lifespan.startup.failed", "message": str(exc)})
            return
        await send({"type": "lifespan.shutdown.complete"})

    async def http(self, scope, receive, send) -> None:
        # First, before any work: a browser page of another site (DNS rebinding) or a Host that is not this server.
        hosts = _header_values(scope, b"host")
        if len(hosts) != 1 or not host_allowed(hosts[0]):
            await send_error(send, 400, "disallowed_host", "the Host header does not name this server (ALLOWED_HOSTS)")
            return
        origins = _header_values(scope, b"origin")
        if not all(origin_allowed(origin) for origin in origins):
            await send_error(send, 403, "origin_not_allowed", "requests from this Origin are refused (DNS-rebinding "
                             "protection); allow it with GOCLAW_MCP_ALLOWED_ORIGINS")
            return
        base_url = resource_base_url(scope.get("scheme", "http"), hosts[0])
        if scope["path"] in (RESOURCE_METADATA_PATH, RESOURCE_METADATA_PATH + PATH) and scope["method"] in ("GET", "HEAD"):
            await _send_json(send, 200, protected_resource_metadata(base_url))  # where OAuth clients learn to authorize
            return
        if scope["path"].rstrip("/") != PATH:
            await send_error(send, 404, "not_found", f"no route for {scope['path'][:200]}; the MCP endpoint is {PATH}")
            return
        scope["headers"] = routing_headers_trimmed(scope["headers"])
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        stateless = stateless_era(headers)
        message, address = None, UNREAD
        if scope["method"] == "POST":
            body = await _read_body(receive, DEFAULT_MAX_REQUEST_BODY_SIZE)
            if body is None:
                await send_error(send, 413, "request_too_large", "request body is too large")
                return
            parsed = parsed_body(body)
            receive, message, address = _replay(body, receive), json_message(parsed), error_address(parsed)
            send = addressing_errors(send, address)
        header_context = raw_context_from_headers(headers)
        try:
            call_context(header_context)
        except ApplicationError as exc:
            await send_error(send, 400, exc.code, exc.message, exc.details)
            return
        session_id = None if stateless else session_id_of(scope)  # the 2026-07-28 era has no sessions
        raw_token = bearer_from_header(headers.get("authorization", ""))
        try:
            caller = authorize_in_memory(raw_token=raw_token, header_context=header_context, message=message) \
                if stateless else MISSING
            if caller is MISSING:
                caller = await in_thread(authorize, raw_token=raw_token, session_id=session_id,
                                         header_context=header_context, message=message)
        except Exception:
            logger.exception("MCP request authorization failed")
            await send_error(send, 503, "service_unavailable", "the database is unavailable; retry later")
            return
        if caller is None:
            challenge = www_authenticate_value(base_url, error="invalid_token" if "authorization" in headers else None)
            await send_error(send, 401, "not_authenticated", "an agent token is required: Authorization: Bearer <token> "
                             "(a static agent token, or one an OAuth client obtained: docs/mcp-oauth.md)",
                             headers=[(b"www-authenticate", challenge.encode())])
            return
        if session_id is not None and caller.session is None:
            await send_jsonrpc_error(send, 404, -32600, "Session not found", address=address)
            return
        version = headers.get("mcp-protocol-version")
        if version is not None and version not in SERVED_VERSIONS:
            # What `server/discover` lists (a client retries with one of them); session-era clients initialize.
            await send_jsonrpc_error(send, 400, UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version",
                                     {"supported": list(MODERN_PROTOCOL_VERSIONS), "requested": version[:64]},
                                     address=address)
            return
        scope["goclaw.caller"] = caller
        current_caller.set(caller)
        json_answer.set(message is not None and not caller.catalog_changed and not wants_progress(message))
        long_lived = scope["method"] == "GET" or (message is not None and message.get("method") == "subscriptions/listen")
        if long_lived and self.agent_streams[caller.agent.pk] >= settings.MCP_MAX_STREAMS_PER_AGENT:
            # every stream is checked every second in a worker thread: one agent must not hold the pool for all
            await send_jsonrpc_error(send, 429, -32000, "too many open streams for this agent in this process "
                                     f"(GOCLAW_MCP_MAX_STREAMS_PER_AGENT={settings.MCP_MAX_STREAMS_PER_AGENT}); "
                                     "close one first", address=address)
            return
        self.agent_streams[caller.agent.pk] += long_lived
        try:
            await self.route(scope, receive, send, caller, message, stateless)
        finally:
            self.agent_streams[caller.agent.pk] -= long_lived
            if self.agent_streams[caller.agent.pk] <= 0:
                del self.agent_streams[caller.agent.pk]

    async def route(self, scope, receive, send, caller: services.Caller, message: dict | None, stateless: bool) -> None:
        """One authorized request to where it goes: a stateless exchange, a session opening, a session's GET
        stream, or a session's POST / DELETE."""
        session = caller.session
        if stateless:  # one self-contained exchange; the SDK checks the headers against the body and the version
            if not (json_answer.get() and await direct.answered(self.manager.app, scope, send, message)):
                await self.serve(scope, receive, send, None)
        elif session is None and scope["method"] == "POST":
            await self.open_session(scope, receive, send, caller, message)
        elif session is not None and scope["method"] == "GET":
            self.open_streams[session.session_id] += 1
            try:
                await self.stream(scope, receive, send, caller)
            finally:
                self.open_streams[session.session_id] -= 1
                if self.open_streams[session.session_id] <= 0:
                    del self.open_streams[session.session_id]
        else:
            if session is not None and scope["method"] == "DELETE":  # ended for every process before the answer
                await in_thread(services.session_end, session_id=session.session_id, agent=caller.agent)
            await self.serve(scope, receive, send, session)

    async def serve(self, scope, receive, send, session) -> None:
        """Hand the request to the SDK. A session ending while its request arrives (the SDK raises) is answered as
        unknown, never with a traceback."""
        started = False

        async def watched_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.manager.serve(scope, receive, watched_send, session=session)
        except (ValueError, RuntimeError, anyio.ClosedResourceError) as exc:
            logger.info("MCP request on a closing session: %s", exc)
            if not started:
                await send_jsonrpc_error(send, 404, -32600, "Session not found")

    async def stream(self, scope, receive, send, caller: services.Caller) -> None:
        """The standalone GET stream, ended as soon as the token it was opened with stops granting access (revoked,
        expired, agent disabled): a long-lived stream must not outlive its authorization."""
        started = ended = False

        async def watched_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        async def end_with_token(cancel_scope: anyio.CancelScope) -> None:
            nonlocal ended
            while True:
                await anyio.sleep(WATCH_SECONDS)
                try:
                    if await in_thread(token_active, caller.token.pk) is None:
                        break
                except Exception:  # the database is unavailable: fail closed, the client reconnects
                    logger.exception("MCP stream token check failed")
                    break
            ended = True
            cancel_scope.cancel()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(end_with_token, tasks.cancel_scope)
            await self.serve(scope, receive, watched_send, caller.session)
            tasks.cancel_scope.cancel()
        if ended and started:
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def open_session(self, scope, receive, send, caller: services.Caller, message: dict | None) -> None:
        """A POST without a session id: when it is an initialize the SDK accepts, the session is recorded before
        the answer (with its id) reaches the client."""
        params = message.get("params") if message and message.get("method") == "initialize" else None

        async def recording_send(event):
            if params is not None and event["type"] == "http.response.start" and event["status"] == 200:
                sid = next((v.decode("latin-1") for k, v in event.get("headers", [])
                            if k.lower() == MCP_SESSION_ID_HEADER.lower().encode()), None)
                if sid:
                    fields = params if isinstance(params, dict) else {}
                    requested = fields.get("protocolVersion")
                    version = requested if requested in HANDSHAKE_PROTOCOL_VERSIONS else LATEST_HANDSHAKE_VERSION
                    await in_thread(services.session_open, session_id=sid, token=caller.token, context=caller.header_context,
                                    protocol_version=version, client_info=fields.get("clientInfo"),
                                    capabilities=fields.get("capabilities"))
            await send(event)

        await self.serve(scope, receive, recording_send, None)

    async def watch_catalogs(self) -> None:
        """Every second: sessions with a GET stream open here whose catalog changed since they listed it are sent
        `notifications/tools/list_changed` (once per change, whichever process claims it), and those whose prompts
        or resources changed since the stream's first check the matching list_changed."""
        while True:
            await anyio.sleep(WATCH_SECONDS)
            watched = [sid for sid in self.open_streams if sid in self.manager.connections]
            if not watched:
                self.content_seen.clear()
                continue
            try:
                changed = await in_thread(_changed_sessions, watched)
                due = await in_thread(content.session_content_changes, watched, self.content_seen)
            except Exception:
                logger.exception("MCP catalog watch failed")
                continue
            notices = [(sid, "notifications/tools/list_changed") for sid in changed]
            notices += [(sid, method) for sid, methods in due.items() for method in methods]
            for sid, method in notices:
                connection = self.manager.connections.get(sid)
                if connection is not None:
                    try:
                        await connection.outbound.notify(method, None)
                    except Exception:
                        logger.warning("could not notify MCP session %s", sid[:12])


def _changed_sessions(session_ids: list[str]) -> list[str]:
    """The sessions among these whose catalog changed since they listed it (each claimed for one notification)."""
    changed = []
    for session in services.sessions_for_watch(session_ids):
        try:
            fingerprint = catalog_fingerprint(session.agent, call_context(session.context))
        except ApplicationError:
            continue
        if services.session_claim_notification(session_id=session.session_id, fingerprint=fingerprint):
            changed.append(session.session_id)
    return changed


application = MCPApplication()
if not settings.TESTING:  # a test process imports the app to call it in-process
    from goclaw.warm import warm

    warm()  # the apps' warmers (the scrubber's table, the shell check's parser) before the first call
