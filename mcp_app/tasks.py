"""django-q2 entry points of the MCP app."""
from __future__ import annotations

import logging

logger = logging.getLogger("goclaw.mcp")


def health_sweep() -> dict[str, str]:
    """Every 30 s in the worker: ping every enabled server through this process's connection manager (which opens
    the connection if needed, lists and pins its tools on connect, and records health changes)."""
    from mcp_app.services.connections import servers_health_check

    return servers_health_check()


def server_sessions_purge() -> int:
    """Every 5 minutes in the worker: forget idle MCP endpoint sessions and calls that can no longer be resumed."""
    from mcp_app.server.services import sessions_purge_idle

    return sessions_purge_idle()
