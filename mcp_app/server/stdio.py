"""The stdio proxy (`manage.py mcp_stdio`): an MCP stdio server for clients that only launch commands, forwarding
tools/list and tools/call (with `_meta`, progress and listChanged) to goclaw's HTTP endpoint with the agent's token.
It holds no state of its own: every call is governed by the endpoint."""
from __future__ import annotations

from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from goclaw.errors import exception_leaves
from mcp_app.server.context import CONTEXT_KEYS

_META_KEYS = frozenset(key for _, key in CONTEXT_KEYS.values()) | {"progressToken"}


async def stdio_proxy(url: str, token: str, *, timeout: float = 3700) -> None:
    """Serve stdin/stdout until the client closes them, one upstream session for the whole run."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=timeout))
    downstream: list[Any] = []  # the stdio client's session, once it has sent a request

    async def upstream_message(message) -> None:
        if isinstance(message, types.ToolListChangedNotification) and downstream:
            await downstream[0].send_tool_list_changed()

    async with Client(streamable_http_client(url, http_client=http), mode="legacy", message_handler=upstream_message) as upstream:
        async def list_tools(ctx, params) -> types.ListToolsResult:
            downstream[:] = [ctx.session]
            return await upstream.list_tools()

        async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
            downstream[:] = [ctx.session]
            raw_meta = (ctx.params or {}).get("_meta")
            meta = {k: v for k, v in raw_meta.items() if k in _META_KEYS and k != "progressToken"} if isinstance(raw_meta, dict) else {}

            async def progress(done: float, total: float | None, message: str | None) -> None:
                await ctx.session.report_progress(done, total, message)

            return await upstream.call_tool(params.name, params.arguments or {}, progress_callback=progress, meta=meta or None)

        class ProxyServer(Server):
            def create_initialization_options(self, notification_options=None, experimental_capabilities=None, extensions=None):
                return super().create_initialization_options(notification_options or NotificationOptions(tools_changed=True),
                                                             experimental_capabilities, extensions)

        server = ProxyServer("goclaw", version="1", on_list_tools=list_tools, on_call_tool=call_tool)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())


class EndpointUnreachable(Exception):
    """goclaw's endpoint could not be reached or did not answer as an MCP endpoint; the message names the URL."""


def _unreachable(url: str, cause: BaseException) -> EndpointUnreachable | None:
    """What to tell the person who ran the command when `cause` means the endpoint at `url` is not usable."""
    hint = "check --url (the MCP port, or the main port's /mcp) and the agent's token"
    if isinstance(cause, httpx2.HTTPStatusError):
        return EndpointUnreachable(f"goclaw's MCP endpoint at {url} answered HTTP {cause.response.status_code}; {hint}")
    if isinstance(cause, (httpx2.TransportError, OSError)):
        return EndpointUnreachable(f"could not reach goclaw's MCP endpoint at {url} ({type(cause).__name__}: "
                                   f"{cause or 'no answer'}); is `manage.py up` running there? (--url)")
    if isinstance(cause, MCPError):
        return EndpointUnreachable(f"goclaw's MCP endpoint at {url} refused the session ({cause}); {hint}")
    return None


def run_stdio_proxy(url: str, token: str) -> None:
    """Serve stdio until the client is done. An endpoint it cannot use raises EndpointUnreachable (no traceback)."""
    try:
        anyio.run(stdio_proxy, url, token)
    except Exception as exc:
        for cause in exception_leaves(exc):
            unreachable = _unreachable(url, cause)
            if unreachable is not None:
                raise unreachable from None
        raise
