"""What the MCP server and grant services share (a leaf: it imports neither): who acted, the checks of launchers,
arguments, headers and env that servers, agent grants' overrides and users' credentials all pass, and reading an
agent grant's sealed overrides."""
from __future__ import annotations

import re
from typing import Any

from goclaw import crypto
from mcp_app.launch_args import Refused, env_refusal, launch_refusal
from mcp_app.models import MCPAgentGrant, MCPLauncher
from tools_app.services.policy import actor_name as _user_name

MCP_EVENTS_GROUP = "mcp"


def actor_name(actor: Any) -> str:
    """Who did it: a person's username, an agent as `agent:<key>` (passed as a string), or "system"."""
    return actor if isinstance(actor, str) and actor else _user_name(actor)
HEADER_NAME_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}\Z")
# Headers the transport itself owns: a server (or a grant, or a user's credentials) may not set them.
RESERVED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "mcp-session-id",
                              "mcp-protocol-version", "content-type", "accept", "upgrade", "te", "trailer"})
def headers_problems(headers: Any, *, allow_unset: bool) -> str | None:
    """What is wrong with a header mapping (names → string values; with `allow_unset`, null removes a header)."""
    if not isinstance(headers, dict):
        return "must be an object of header names to string values"
    for name, value in headers.items():
        if not isinstance(name, str) or not HEADER_NAME_RE.fullmatch(name):
            return f"{str(name)[:80]!r} is not a valid header name"
        if name.lower() in RESERVED_HEADERS:
            return f"{name} is set by the transport itself"
        if value is None and allow_unset:
            continue
        if not isinstance(value, str):
            return f"the value of {name} must be a string"
        if any(ch in value for ch in "\r\n\x00"):
            return f"the value of {name} must not contain line breaks or NUL"  # never echo the value
    return None


def launch_check(command: str, args: list[str]) -> Refused | None:
    """Why `command args` may not start a stdio server, or None: the launcher must be an enabled row of the
    allowlist, and the arguments pass its family's model (`mcp_app.launch_args`: python, node, npx/npm, uv/uvx,
    pipx, deno, bun/bunx) or, for a plain program goclaw has no model of, the launcher's `denied_args`."""
    launcher = MCPLauncher.objects.filter(command=command, enabled=True).first()
    if launcher is None:
        return Refused(f"{command!r} is not an allowed launcher (add it under MCP launchers)", "command")
    return launch_refusal(command, args, list(launcher.denied_args or []))


def launcher_problem(command: str, args: list[str]) -> str | None:
    refused = launch_check(command, args)
    return refused.message if refused is not None else None


def env_names_problem(env: Any) -> str | None:
    """A variable that would change what the launcher loads or runs (set by anyone: server, grant override, user);
    names being unset (null) are not judged, so a refused name stored before can always be removed."""
    if not isinstance(env, dict):
        return None
    return env_refusal(name for name, value in env.items() if value is not None)


def overrides_seal_context(pk: Any) -> str:
    return f"mcp-agent-grant:{pk}:overrides"


def agent_grant_overrides(grant: MCPAgentGrant) -> dict[str, Any]:
    """The grant's config_overrides in clear (connection code and checks only)."""
    if not grant.overrides_sealed:
        return {}
    return crypto.decrypt_json(grant.overrides_sealed, associated_data=overrides_seal_context(grant.pk))
