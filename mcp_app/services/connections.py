"""Connecting to MCP servers on a caller's behalf (docs/mcp.md, "Bridge"): the connection settings of one caller,
and the orchestrators that talk to a server — test connection, refresh the tool listing, reconnect. These do network
or process I/O, so they run *outside* any transaction and compose the short atomic services of `servers` / `tools`.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from goclaw.generations import generation_cache
from mcp_app.choices import Transport
from mcp_app.config import BridgeError, ServerConfig, ToolDefinition
from mcp_app.models import MCPAgentGrant, MCPServer, MCPUserGrant
from mcp_app.selectors import mcp_access_for, mcp_tool_get
from mcp_app.services.common import agent_grant_overrides, env_names_problem, launcher_problem
from mcp_app.services.grants import user_grant_credentials
from mcp_app.services.servers import server_health_record, server_secrets
from tools_app.toolsets import TOOLSETS_CACHE

logger = logging.getLogger("goclaw.mcp")
_targets = generation_cache(TOOLSETS_CACHE)  # call-time checks, valid while no tool source reports a change


# --- one caller's connection settings ----------------------------------------------------------------------------
def _work_dir(server: MCPServer) -> Path:
    base = Path(getattr(settings, "MCP_WORK_DIR", settings.DATA_DIR / "mcp"))
    return base / server.name


def _sandbox_for(server: MCPServer) -> tuple[Any, Any]:
    """(SandboxSpec, ExecLimits) a stdio server runs with; (None, None) on the host, for a profile with the sandbox
    off. A server lives long: the profile's process, open-file and file-size limits apply, not its per-command CPU
    seconds, and not its memory (as RLIMIT_AS it breaks runtimes that reserve address space, such as node)."""
    from sandbox_app.selectors import sandbox_profile_get

    profile = sandbox_profile_get(server.sandbox_profile_id)
    if not profile.sandboxed:
        return None, None
    limits = replace(profile.limits(timeout_seconds=3600, grace_seconds=3, max_output_bytes=1024 * 1024),
                     cpu_seconds=0, memory_bytes=0)
    return profile.spec(), limits


def server_config(server: MCPServer, *, agent_grant: MCPAgentGrant | None = None,
                  user_grant: MCPUserGrant | None = None) -> ServerConfig:
    """How to connect for one caller: the server's settings, then the agent grant's `config_overrides` (env and
    headers merged over the server's, args_suffix appended, timeout replaced), then the user grant's credentials
    (headers and env merged last, so a user's own token wins). The config's key covers all of it. Raises
    BridgeError(mcp_launch_refused) when a stdio server's launcher or arguments are no longer allowed."""
    headers, env = server_secrets(server)
    own_args = list(server.args or [])
    args, timeout, owner = list(own_args), float(server.timeout_seconds), ""
    if agent_grant is not None:
        overrides = agent_grant_overrides(agent_grant)
        if overrides:
            headers.update(overrides.get("headers") or {})
            env.update(overrides.get("env") or {})
            args += list(overrides.get("args_suffix") or [])
            timeout = float(overrides.get("timeout") or timeout)
            owner = f"agent:{agent_grant.agent_id}"
    if user_grant is not None:
        credentials = user_grant_credentials(user_grant)
        if credentials.get("headers") or credentials.get("env"):
            headers.update(credentials.get("headers") or {})
            env.update(credentials.get("env") or {})
            owner = f"user:{user_grant.pk}"
    stdio = server.transport == Transport.STDIO
    if stdio and (problem := launcher_problem(server.command, args) or env_names_problem(env)):
        # the allowlist is checked again at every connection: a launcher taken off it stops its servers
        raise BridgeError(f"{server.name} may not be started: {problem}", code="mcp_launch_refused")
    sandbox, limits = _sandbox_for(server) if stdio else (None, None)
    return ServerConfig(
        server_id=server.pk, name=server.name, transport=server.transport, command=server.command,
        args=tuple(args), url=server.url, headers=tuple(sorted(headers.items())), env=tuple(sorted(env.items())),
        timeout=timeout, allow_private_network=server.allow_private_network,
        sandbox=sandbox, limits=limits, workdir=str(_work_dir(server)) if stdio else "",
        credentials_of=owner, own_args=len(own_args),
    )


class MCPCallRefused(Exception):
    """A call to an MCP tool is not allowed right now; the message says why, for the model and the audit."""


def _call_target(agent_id: int, user_id: str, server_id: int, tool_name: str) -> tuple[Any, Any]:
    """(ServerConfig or the refusal reason, the earliest expiry of the grants that decided it)."""
    access = mcp_access_for(agent_id, user_id, server_id=server_id)
    if not access:
        return ("access to this MCP server is not granted (or no longer) for this agent and user; ask for it with "
                "POST /api/v1/mcp/access-requests"), None
    grant = access[0]
    expiries = [g.expires_at for g in (grant.agent_grant, *grant.user_grants) if g.expires_at is not None]
    expires = min(expiries) if expiries else None
    if not grant.allows(tool_name):
        return f"the grant for this MCP server does not include the tool {tool_name}", expires
    from mcp_app.services.tools import mcp_tool_refusal

    refusal = mcp_tool_refusal(mcp_tool_get(server_id, tool_name))
    if refusal:
        return refusal, expires
    try:
        config = server_config(grant.server, agent_grant=grant.agent_grant, user_grant=grant.credential_grant)
    except BridgeError as exc:
        return str(exc), expires
    return config, expires


def mcp_call_target(agent_id: int, user_id: str, server_id: int, tool_name: str) -> ServerConfig:
    """The call-time re-check of a bridged call (grants, expiry, the tool's pinned definition) and the settings to
    connect with for this caller — this user's credentials, never another's. Raises MCPCallRefused.

    Memoized in the tool-set generation cache: every grant, server or tool change bumps that generation, so a
    revocation reaches every process within its bound (≤ 1 s, at once in the writing process), and a grant's expiry
    is compared with the clock at every call."""
    key = ("mcp-call-target", agent_id, user_id, server_id, tool_name)
    target, expires = _targets.get(key, lambda: _call_target(agent_id, user_id, server_id, tool_name))
    if expires is not None and expires <= timezone.now():
        target, expires = _call_target(agent_id, user_id, server_id, tool_name)
    if isinstance(target, str):
        raise MCPCallRefused(target)
    return target


# --- talking to a server (I/O: never inside a transaction) --------------------------------------------------------
def _sync(config: ServerConfig, definitions: list[ToolDefinition]) -> dict[str, list[str]]:
    from mcp_app.services.tools import server_tools_sync

    return server_tools_sync(server_id=config.server_id, definitions=definitions, launch_hash=config.launch_hash)


def server_tools_refresh(server: MCPServer) -> dict[str, Any]:
    """List the server's tools now (with its own settings) and pin / quarantine them. Returns {"ok", "tools",
    "changes", "error"}: the admin's "test connection" and the API show it as is."""
    from mcp_app.bridge import bridge_list_tools

    try:
        config = server_config(server)
        definitions = bridge_list_tools(config)
    except BridgeError as exc:
        server_health_record(server.pk, {"ok": False, "error": str(exc), "state": "disconnected"})
        return {"ok": False, "tools": [], "changes": {}, "error": str(exc), "code": exc.code}
    changes = _sync(config, definitions)
    server_health_record(server.pk, {"ok": True, "state": "connected"})
    return {"ok": True, "tools": [d.name for d in definitions], "changes": changes, "error": "", "code": ""}


def server_reconnect(server: MCPServer) -> dict[str, Any]:
    """Drop this process's connections to the server (ending any reconnect cooldown) and connect again now."""
    from mcp_app.bridge import bridge_reconnect

    bridge_reconnect(server.pk)
    return server_tools_refresh(server)


def listing_observed(config: ServerConfig, definitions: list[ToolDefinition]) -> None:
    """Connection managers call this after every tools/list (a (re)connect, a list_changed notification), from a
    thread of the loop's executor: the database connection is closed after use (that thread is no request's)."""
    try:
        _sync(config, definitions)
    except MCPServer.DoesNotExist:
        logger.debug("MCP server %s: gone (or not committed yet); its listing is not recorded", config.name)
    except Exception:  # a listener never breaks the manager; the next listing tries again
        logger.exception("MCP server %s: could not record its tool listing", config.name)
    finally:
        connection.close()


def health_observed(server_id: int, report: dict[str, Any]) -> None:
    """Connection managers call this on every health change of a connection (closing the database connection after
    use, as `listing_observed`)."""
    try:
        server_health_record(server_id, report)
    except Exception:
        logger.exception("MCP server %s: could not record its health", server_id)
    finally:
        connection.close()


def servers_health_check() -> dict[str, str]:
    """Ping every enabled server with its own settings (the worker's schedule). Returns server → state."""
    from mcp_app.bridge import bridge_ping

    states: dict[str, str] = {}
    for server in MCPServer.objects.filter(enabled=True).select_related("sandbox_profile"):
        try:
            bridge_ping(server_config(server))
            states[server.name] = "connected"
        except BridgeError as exc:
            states[server.name] = exc.code
        except Exception as exc:  # one broken server must not stop the sweep
            logger.exception("MCP server %s: health check failed", server.name)
            states[server.name] = f"error: {type(exc).__name__}"
    return states


def mcp_connections_status() -> dict[str, Any]:
    """For /healthz: this process's MCP connections by state. Always ok: an MCP server being down is that server's
    health (shown per server in the admin), not goclaw's."""
    from collections import Counter

    from mcp_app.bridge import bridge_status

    states = Counter(str(entry.get("state", "unknown")) for entry in bridge_status().values())
    return {"ok": True, "connections": sum(states.values()), "states": dict(sorted(states.items()))}
