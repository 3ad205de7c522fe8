"""The MCP client bridge: synchronous functions any Django thread may call; the work runs on the connection
manager's loop (`mcp_app.bridge.manager`). Failures raise `BridgeError` with a stable code; a tool's own failure
is a result (`CallResult.is_error`), not an exception. Listeners for health and listings: `mcp_app.bridge.hooks`.
The manager (and with it the MCP SDK, ~0.8 s to import) loads on the first call, not with the app.
"""
from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mcp_app.bridge import hooks
from mcp_app.bridge.results import convert_result
from mcp_app.config import BridgeError, CallResult, ServerConfig, ToolDefinition

__all__ = [
    "BridgeError", "bridge_call_tool", "bridge_close_all", "bridge_list_tools", "bridge_ping", "bridge_reconnect",
    "bridge_status", "convert_result", "hooks",
]


@contextmanager
def _redacted(config: ServerConfig) -> Iterator[None]:
    """A server may quote what it received (a key, a token) in an error: no BridgeError leaves with a secret."""
    try:
        yield
    except BridgeError as exc:
        raise BridgeError(config.redact(str(exc)), code=exc.code, retry_after=exc.retry_after) from None


def _existing_manager():
    """This process's connection manager, or None when it has none (never so when the manager was never imported)."""
    module = sys.modules.get("mcp_app.bridge.manager")
    return module.current_manager() if module is not None else None


def bridge_list_tools(config: ServerConfig) -> list[ToolDefinition]:
    """The server's tools as it lists them now (no client-side cache), in its order."""
    from mcp_app.bridge.manager import get_manager, list_all_tools

    manager = get_manager()
    with _redacted(config):
        return manager.run_sync(lambda handle: manager.use(config, config.timeout, handle, list_all_tools),
                                timeout=config.timeout)


def bridge_call_tool(config: ServerConfig, name: str, arguments: dict[str, Any], *, timeout: float | None = None,
                     cancel: threading.Event | None = None) -> CallResult:
    """Call one tool. `timeout` (default: the server's) bounds connecting and answering; when it passes or
    `cancel` is set, the request is cancelled at the server and BridgeError(mcp_timeout / mcp_cancelled) raised."""
    from mcp_app.bridge.manager import get_manager

    limit = float(config.timeout if timeout is None else timeout)
    manager = get_manager()

    async def work(client: Any) -> CallResult:
        return convert_result(await client.call_tool(name, dict(arguments or {})))

    with _redacted(config):
        return manager.run_sync(lambda handle: manager.use(config, limit, handle, work), timeout=limit, cancel=cancel)


def bridge_ping(config: ServerConfig) -> None:
    """One liveness round trip to the server (connecting first if needed); raises BridgeError."""
    from mcp_app.bridge.manager import get_manager, ping

    manager = get_manager()
    with _redacted(config):
        manager.run_sync(lambda handle: manager.use(config, config.timeout, handle, ping), timeout=config.timeout)


def bridge_reconnect(server_id: int) -> None:
    """Close this process's connections to the server and forget their backoff/cooldown: the next use reconnects."""
    manager = _existing_manager()
    if manager is not None:
        manager.run_sync(lambda _h: manager.close_where(lambda c: c.config.server_id == server_id), timeout=15.0)


def bridge_close_all() -> None:
    """Close every connection of this process (tests, shutdown)."""
    manager = _existing_manager()
    if manager is not None:
        manager.run_sync(lambda _h: manager.close_where(lambda c: True), timeout=15.0)


def bridge_status() -> dict[str, dict[str, Any]]:
    """Per connection (key prefix): server name, state, attempts, last error, idle seconds — never a secret."""
    manager = _existing_manager()
    if manager is None:
        return {}
    return manager.run_sync(lambda _h: manager.status(), timeout=5.0)
