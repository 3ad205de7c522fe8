"""What the MCP server and grant services share (a leaf: it imports neither): who acted, the checks of launchers,
arguments, headers and env that servers, agent grants' overrides and users' credentials all pass, and reading an
agent grant's sealed overrides."""
from __future__ import annotations

import re
from typing import Any

from goclaw import crypto
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


def _denied_arg(arg: str, denied: list[str], following: str = "") -> str | None:
    """The denied launcher flag `arg` uses: the flag itself, `--flag=…`, a short flag inside a cluster such as
    `-Ic` / `-cCODE` (for one-letter flags), a pair `"-m timeit"` (this argument and the next), or a prefix
    `"data:*"`. Whole-argument matching: `mcp-remote` is not `-r`."""
    for flag in denied:
        if " " in flag:
            first, _, second = flag.partition(" ")
            if arg == first and following == second:
                return flag
            continue
        if flag.endswith("*") and len(flag) > 1:
            if arg.startswith(flag[:-1]):
                return flag
            continue
        if arg == flag or (flag.startswith("--") and arg.startswith(flag + "=")):
            return flag
        if len(flag) == 2 and flag[0] == "-" and flag[1] != "-" and arg.startswith("-") and not arg.startswith("--"):
            if flag[1] in arg[1:]:
                return flag
        if not flag.startswith("-") and arg == flag:  # a subcommand (deno eval)
            return flag
    return None


def launcher_problem(command: str, args: list[str]) -> str | None:
    launcher = MCPLauncher.objects.filter(command=command, enabled=True).first()
    if launcher is None:
        return f"{command!r} is not an allowed launcher (add it under MCP launchers)"
    denied = list(launcher.denied_args or [])
    for index, arg in enumerate(args):
        flag = _denied_arg(arg, denied, args[index + 1] if index + 1 < len(args) else "")
        if flag:
            return f"the argument {arg[:60]!r} uses {flag}, which runs inline code with {command}; start a server package or script instead"
    return None


# Variables that make a launcher load code other than the server's (preloads, startup files, runtime options).
DENIED_ENV = frozenset({
    "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "DYLD_INSERT_LIBRARIES", "DYLD_LIBRARY_PATH", "BASH_ENV", "ENV",
    "NODE_OPTIONS", "NODE_PATH", "NODE_REPL_EXTERNAL_MODULE", "PYTHONSTARTUP", "PYTHONINSPECT", "PYTHONHOME",
    "PYTHONBREAKPOINT", "PERL5OPT", "PERL5LIB", "RUBYOPT", "RUBYLIB", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS", "DENO_CERT", "BUN_OPTIONS", "UV_PYTHON_PREFERENCE_OVERRIDE",
})


def env_names_problem(env: Any) -> str | None:
    """A variable that would make the launcher run other code (set by anyone: server, grant override, user)."""
    if not isinstance(env, dict):
        return None
    for name in env:
        if isinstance(name, str) and (name.upper() in DENIED_ENV or name.upper().startswith("LD_")):
            return f"{name} changes what the launcher runs; it may not be set for an MCP server"
    return None


def overrides_seal_context(pk: Any) -> str:
    return f"mcp-agent-grant:{pk}:overrides"


def agent_grant_overrides(grant: MCPAgentGrant) -> dict[str, Any]:
    """The grant's config_overrides in clear (connection code and checks only)."""
    if not grant.overrides_sealed:
        return {}
    return crypto.decrypt_json(grant.overrides_sealed, associated_data=overrides_seal_context(grant.pk))
