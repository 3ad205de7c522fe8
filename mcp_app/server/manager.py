"""The SDK's stateful session manager, made stateless-friendly: a request naming a session this process does not
hold, but PostgreSQL does (checked by the ASGI layer), revives it here — a born-ready transport and connection with
that id, like the SDK's stateless path — instead of answering 404. Each session's connection is kept so the catalog
watcher can notify its standalone (GET) stream."""
from __future__ import annotations

import logging
from contextvars import ContextVar
from functools import partial
from uuid import uuid4

import anyio
from anyio.abc import TaskStatus
from mcp.server.connection import Connection
from mcp.server.runner import serve_connection
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager, _send_and_report_status
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

from mcp_app.models import MCPServerSession

logger = logging.getLogger("goclaw.mcp.server")

# Whether the request being served answers with one JSON body instead of an SSE stream. The ASGI layer sets it per
# request: SSE only when the request can have more to say than its result (a progressToken, or a catalog change to
# announce first); a plain JSON answer costs the server about a third less.
json_answer: ContextVar[bool] = ContextVar("goclaw_mcp_json_answer", default=False)


class PerRequestModeTransport(StreamableHTTPServerTransport):
    """The SDK's transport with the JSON-or-SSE choice made per request (`json_answer`), not per session. Messages
    related to a request are only ever emitted by requests served with SSE (see the ASGI layer)."""

    @property
    def is_json_response_enabled(self) -> bool:
        return json_answer.get()

    @is_json_response_enabled.setter
    def is_json_response_enabled(self, value: bool) -> None:
        pass  # fixed per request, never per session



class RevivingSessionManager(StreamableHTTPSessionManager):
    """StreamableHTTPSessionManager whose sessions outlive the process that opened them (see the module doc)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.connections: dict[str, Connection] = {}

    @property
    def json_response(self) -> bool:
        """The stateless (2026-07-28) entry's JSON-or-SSE choice, made per request (`json_answer`) like the
        session transports'."""
        return json_answer.get()

    @json_response.setter
    def json_response(self, value: bool) -> None:
        pass  # fixed per request

    async def serve(self, scope, receive, send, *, session: MCPServerSession | None) -> None:
        """Handle one authorized request; `session` is the row its session id names (already checked to be the
        caller's)."""
        if session is not None and session.session_id not in self._server_instances:
            async with self._session_creation_lock:
                if session.session_id not in self._server_instances:
                    await self._revive(session)
        await self.handle_request(scope, receive, send)

    def _transport(self, session_id: str) -> PerRequestModeTransport:
        return PerRequestModeTransport(mcp_session_id=session_id, event_store=self.event_store,
                                       security_settings=self.security_settings, retry_interval=self.retry_interval,
                                       idle_timeout=self.session_idle_timeout)

    def _admit_session(self, requestor) -> StreamableHTTPServerTransport | None:
        """As the SDK's (the session limit, then registration), with goclaw's transport."""
        if self.max_sessions is not None and len(self._server_instances) >= self.max_sessions:
            return None
        transport = self._transport(uuid4().hex)
        self._server_instances[transport.mcp_session_id] = transport
        return transport

    async def _revive(self, session: MCPServerSession) -> None:
        transport = self._transport(session.session_id)
        self._server_instances[session.session_id] = transport
        try:
            assert self._task_group is not None
            await self._task_group.start(partial(self._run_session, transport, session))
        except BaseException:
            await self._discard_session(session.session_id, transport)
            raise
        logger.info("revived MCP session %s", session.session_id[:12])

    async def _serve_opening_request(self, http_transport, scope, receive, send) -> None:
        """As the SDK's, with the session served by `_run_session` (so its connection is known)."""
        session_id = http_transport.mcp_session_id
        established = False
        try:
            assert self._task_group is not None
            await self._task_group.start(partial(self._run_session, http_transport, None))
            status = await _send_and_report_status(http_transport.handle_request, scope, receive, send)
            established = status is not None and status < 400
        finally:
            if not established:
                await self._discard_session(session_id, http_transport)

    async def _run_session(self, transport: StreamableHTTPServerTransport, revived: MCPServerSession | None, *,
                           task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve one session until DELETE, idle timeout or shutdown. A revived session's connection is born ready:
        its handshake happened in another process (the row keeps the negotiated version)."""
        session_id = transport.mcp_session_id
        # This task was started from a request's context: the session's own tasks (the message router) must not
        # inherit that request's JSON-or-SSE choice.
        json_answer.set(False)
        async with transport.connect() as (read_stream, write_stream):
            dispatcher = JSONRPCDispatcher(read_stream, write_stream, inline_methods=frozenset({"initialize"}))
            connection = Connection.for_loop(dispatcher, session_id=session_id)
            if revived is not None:
                connection.protocol_version = revived.protocol_version
                connection.initialized.set()
            self.connections[session_id] = connection
            task_status.started()
            idle_scope = transport.idle_scope or anyio.CancelScope()
            try:
                with idle_scope:
                    await serve_connection(self.app, dispatcher, connection=connection, lifespan_state=self._lifespan_state)
            except Exception:
                logger.exception("MCP session %s crashed", session_id[:12])
            finally:
                self.connections.pop(session_id, None)
                await self._discard_session(session_id, transport)


def session_id_of(scope) -> str | None:
    """The `Mcp-Session-Id` header of an ASGI request, if any."""
    name = MCP_SESSION_ID_HEADER.lower().encode()
    return next((v.decode("latin-1") for k, v in scope["headers"] if k == name), None)
