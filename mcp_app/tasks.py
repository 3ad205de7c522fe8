"""django-q2 entry points of the MCP app."""
from __future__ import annotations

import logging

logger = logging.getLogger("goclaw.mcp")


def health_sweep() -> dict[str, str]:
    """Every 30 s in the worker: ping every enabled server through this process's connection manager (which opens
    the connection if needed, lists and pins its tools on connect, and records health changes)."""
    from mcp_app.services.connections import servers_health_check

    return servers_health_check()
