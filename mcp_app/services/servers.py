"""Writes to MCP servers and launchers (docs/mcp.md): create, update, delete — every write checks the whole server
(launcher allowlist, argv, URL reachability rules, headers, env), seals headers and env bound to the row, and bumps
the tool-set generation in its transaction. Also the health fields the connection managers report."""
from __future__ import annotations

import logging
import re
from typing import Any

from django.db import transaction
from django.utils import timezone

from goclaw import crypto
from goclaw.errors import Conflict, NotFound, ValidationError
from goclaw.events import publish
from mcp_app.choices import HealthState, Transport
from mcp_app.config import ServerConfig
from mcp_app.models import MAX_TIMEOUT, SERVER_NAME_RE, MCPLauncher, MCPServer
from mcp_app.netcheck import url_problem
from mcp_app.launch_args import launcher_refusal
from mcp_app.services.common import (MCP_EVENTS_GROUP, actor_name, agent_grant_overrides, env_names_problem,
                                     headers_problems, launch_check, launcher_problem)
from tools_app.services.custom_tools import env_merged, env_problems
from tools_app.toolsets import tools_changed

logger = logging.getLogger("goclaw.mcp")

PREFIX_RE = re.compile(r"^mcp_[a-z0-9_]{0,44}\Z")
MAX_ARGS, MAX_ARG_CHARS = 64, 4096
EDITABLE = ("display_name", "transport", "command", "args", "url", "allow_private_network", "tool_prefix",
            "timeout_seconds", "enabled", "sandbox_profile", "review_new_tools")


class MCPServerInvalid(ValidationError):
    code = "mcp_server_invalid"


class MCPServerExists(Conflict):
    code = "mcp_server_exists"


# --- validation ----------------------------------------------------------------------------------------------------
def server_problems(data: dict[str, Any]) -> dict[str, str]:
    """Every problem with a complete server definition (field → message)."""
    problems: dict[str, str] = {}
    name = data.get("name")
    if not isinstance(name, str) or not re.match(SERVER_NAME_RE, name):
        problems["name"] = "lower-case letters, digits, - and _, starting with a letter or digit (at most 48)"
    transport = data.get("transport")
    if transport not in Transport.values:
        problems["transport"] = f"one of {', '.join(Transport.values)}"
    command, args, url = data.get("command") or "", data.get("args") or [], data.get("url") or ""
    if not isinstance(args, list) or len(args) > MAX_ARGS or not all(
            isinstance(a, str) and "\x00" not in a and len(a) <= MAX_ARG_CHARS for a in args):
        problems["args"] = f"a list of at most {MAX_ARGS} strings (an argv, never a shell string)"
    if transport == Transport.STDIO:
        if not isinstance(command, str) or not command:
            problems["command"] = "a stdio server needs a command (an allowed launcher)"
        elif any(ch in command for ch in "\x00\r\n") or "/" in command and not command.startswith("/"):
            problems["command"] = "a bare program name or an absolute path"
        elif "args" not in problems and (refused := launch_check(command, args)):
            problems[refused.field] = refused.message
        if url:
            problems["url"] = "a stdio server has no URL"
    elif transport in Transport.values:
        if command or args:
            problems["command"] = "only stdio servers have a command and arguments"
        if not url:
            problems["url"] = f"a {transport} server needs a URL"
        elif len(url) > 2000 or (why := url_problem(url, allow_private=bool(data.get("allow_private_network")))):
            problems["url"] = why if len(url) <= 2000 else "at most 2000 characters"
        if data.get("sandbox_profile") is not None:
            problems["sandbox_profile"] = "only stdio servers run in a sandbox profile"
    prefix = data.get("tool_prefix") or ""
    if prefix and not PREFIX_RE.fullmatch(prefix):
        problems["tool_prefix"] = "lower-case letters, digits and _ (mcp_ is put in front when missing; at most 48)"
    timeout = data.get("timeout_seconds")
    if isinstance(timeout, bool) or not isinstance(timeout, int) or not 1 <= timeout <= MAX_TIMEOUT:
        problems["timeout_seconds"] = f"a whole number of seconds from 1 to {MAX_TIMEOUT}"
    for flag in ("enabled", "allow_private_network", "review_new_tools"):
        if not isinstance(data.get(flag), bool):
            problems[flag] = "true or false"
    if not isinstance(data.get("display_name", ""), str) or len(data.get("display_name", "")) > 200:
        problems["display_name"] = "a string of at most 200 characters"
    return problems


def _check_grant_suffixes(server: MCPServer, command: str, args: list[str]) -> None:
    """A new command or args must also leave every agent grant's args_suffix harmless (`-e` is nothing to python,
    inline code to node)."""
    for grant in server.agent_grants.select_related("agent"):
        suffix = agent_grant_overrides(grant).get("args_suffix") or []
        if suffix and (why := launcher_problem(command, [*args, *suffix])):
            raise MCPServerInvalid(f"agent {grant.agent.key}'s grant appends arguments refused with this command: "
                                   f"{why}", details={"command": why})


def _with_mcp_prefix(fields: dict[str, Any]) -> dict[str, Any]:
    """A tool prefix given without the leading `mcp_` gets it (`gh_` → `mcp_gh_`): every MCP tool name starts with
    `mcp_`, a namespace no other tool source may use."""
    prefix = fields.get("tool_prefix")
    if isinstance(prefix, str) and prefix and not prefix.startswith("mcp_"):
        return {**fields, "tool_prefix": "mcp_" + prefix}
    return fields


def _raise_problems(problems: dict[str, str]) -> None:
    if problems:
        field, message = next(iter(problems.items()))
        raise MCPServerInvalid(f"{field}: {message}", details=problems)


def _prefix_taken(prefix: str, exclude_pk: Any) -> bool:
    """Prefixes are prefix-free: no server's prefix may start another's (else `mcp_a__` + `x__echo` and
    `mcp_a__x__` + `echo` would name the same tool, and one server could shadow another's)."""
    others = MCPServer.objects.exclude(pk=exclude_pk).only("name", "tool_prefix")
    return any(other.prefix.startswith(prefix) or prefix.startswith(other.prefix) for other in others)


# --- sealed headers and env ----------------------------------------------------------------------------------------
def seal_context(pk: Any, what: str) -> str:
    return f"mcp-server:{pk}:{what}"


def _open(token: str, context: str) -> dict[str, str]:
    return crypto.decrypt_json(token, associated_data=context) if token else {}


def server_secrets(server: MCPServer) -> tuple[dict[str, str], dict[str, str]]:
    """(headers, env) in clear: only the connection code may call this."""
    return (_open(server.headers_sealed, seal_context(server.pk, "headers")),
            _open(server.env_sealed, seal_context(server.pk, "env")))


def _seal(server: MCPServer, *, headers: dict | None, env: dict | None) -> None:
    current_headers, current_env = server_secrets(server)
    if headers is not None:
        merged = env_merged(current_headers, headers)
        server.headers_sealed = crypto.encrypt_json(merged, associated_data=seal_context(server.pk, "headers")) if merged else ""
        server.headers_names = sorted(merged)
    if env is not None:
        merged = env_merged(current_env, env)
        server.env_sealed = crypto.encrypt_json(merged, associated_data=seal_context(server.pk, "env")) if merged else ""
        server.env_names = sorted(merged)


def _check_secrets(headers: Any, env: Any, *, allow_unset: bool) -> None:
    if headers is not None and (problem := headers_problems(headers, allow_unset=allow_unset)):
        raise MCPServerInvalid(f"headers: {problem}", details={"headers": problem})
    if env is not None and (problem := env_problems(env, allow_unset=allow_unset) or env_names_problem(env)):
        raise MCPServerInvalid(f"env: {problem}", details={"env": problem})


def server_env_problem(current_names: list[str] | None, changes: dict[str, Any] | None) -> str | None:
    """A refused variable among the names a server keeps after `changes` (null removes a name): a name stored
    before the rule existed must be removed before the server is saved again (launches refuse it anyway)."""
    kept = {name: "" for name in current_names or []}
    kept.update(changes or {})
    return env_names_problem(kept)


# --- writes --------------------------------------------------------------------------------------------------------
def _defaults() -> dict[str, Any]:
    return {"display_name": "", "command": "", "args": [], "url": "", "allow_private_network": False,
            "tool_prefix": "", "timeout_seconds": 60, "enabled": True, "sandbox_profile": None,
            "review_new_tools": True}


@transaction.atomic
def server_create(*, actor, name: str, headers: dict | None = None, env: dict | None = None,
                  **fields: Any) -> MCPServer:
    """A new MCP server, checked whole. Its tools become visible once it is listed (test connection, or the first
    use) and only to agents holding a grant."""
    unknown = set(fields) - set(EDITABLE)
    if unknown:
        raise MCPServerInvalid(f"unknown field(s): {', '.join(sorted(unknown))}")
    fields = _with_mcp_prefix(fields)
    data = {**_defaults(), **fields, "name": name}
    _raise_problems(server_problems(data))
    _check_secrets(headers, env, allow_unset=False)
    if MCPServer.objects.filter(name=name).exists():
        raise MCPServerExists(f"an MCP server named {name} already exists")
    server = MCPServer(created_by=actor_name(actor), **data)
    if _prefix_taken(server.prefix, None):
        raise MCPServerExists(f"the tool prefix {server.prefix} overlaps another server's (one may not start the other)")
    server.save()
    if headers or env:
        _seal(server, headers=headers, env=env)
        server.save(update_fields=["headers_sealed", "headers_names", "env_sealed", "env_names"])
    tools_changed()
    logger.info("MCP server %s created by %s", name, actor_name(actor))
    return server


@transaction.atomic
def server_update(*, actor, server: MCPServer, headers: dict | None = None, env: dict | None = None,
                  **changes: Any) -> MCPServer:
    """Change some fields; `headers` / `env` set the given names (null removes one) and keep the rest. A changed
    stdio command or args changes every tool's pinned hash: its tools are quarantined at the next listing."""
    unknown = set(changes) - set(EDITABLE)
    if unknown:
        raise MCPServerInvalid(f"unknown field(s): {', '.join(sorted(unknown))}")
    changes = _with_mcp_prefix(changes)
    server = MCPServer.objects.select_for_update().get(pk=server.pk)
    data = {field: getattr(server, field) for field in EDITABLE}
    data.update(changes, name=server.name)
    _raise_problems(server_problems(data))
    _check_secrets(headers, env, allow_unset=True)
    if problem := server_env_problem(server.env_names, env if isinstance(env, dict) else None):
        raise MCPServerInvalid(f"env: {problem}", details={"env": problem})
    if data["transport"] == Transport.STDIO:
        _check_grant_suffixes(server, data["command"], data["args"] or [])
    for field, value in changes.items():
        setattr(server, field, value)
    if _prefix_taken(server.prefix, server.pk):
        raise MCPServerExists(f"the tool prefix {server.prefix} overlaps another server's (one may not start the other)")
    if headers or env:
        _seal(server, headers=headers, env=env)
    server.save()
    tools_changed()
    logger.info("MCP server %s updated by %s: %s", server.name, actor_name(actor), ", ".join(sorted(changes)) or "-")
    return server


@transaction.atomic
def server_delete(*, actor, server: MCPServer) -> None:
    """Remove a server with its tools, grants and requests; every process drops its tools within a second."""
    name = server.name
    server.delete()
    tools_changed()
    logger.info("MCP server %s deleted by %s", name, actor_name(actor))


def server_get(name: str) -> MCPServer:
    server = MCPServer.objects.filter(name=name).first()
    if server is None:
        raise NotFound(f"no MCP server named {name}", code="mcp_server_not_found")
    return server


@transaction.atomic
def launcher_set(*, actor, command: str, description: str = "", denied_args: list[str] | None = None,
                 enabled: bool = True) -> MCPLauncher:
    """Add or change an allowed launcher. A shell, an exec wrapper or an interpreter goclaw has no argument model
    for is refused as an enabled launcher (it may still be saved disabled, to switch off a row stored before)."""
    if not command or any(ch in command for ch in "\x00\r\n ") or "/" in command and not command.startswith("/"):
        raise ValidationError("a launcher is a bare program name or an absolute path", code="mcp_launcher_invalid")
    if enabled and (why := launcher_refusal(command)):
        raise ValidationError(why, code="mcp_launcher_invalid", details={"command": why})
    if denied_args is not None and not (isinstance(denied_args, list) and all(isinstance(a, str) and a for a in denied_args)):
        raise ValidationError("denied_args is a list of arguments", code="mcp_launcher_invalid")
    launcher, _ = MCPLauncher.objects.update_or_create(
        command=command, defaults={"description": description, "enabled": enabled,
                                   **({"denied_args": denied_args} if denied_args is not None else {})})
    tools_changed()  # call-time checks re-read the allowlist
    logger.info("MCP launcher %s set by %s", command, actor_name(actor))
    return launcher


def server_launch_hash(server: MCPServer) -> str:
    """The launch part of the server's pinned tool hashes (stdio: command + args; '' otherwise)."""
    return ServerConfig(server_id=server.pk, name=server.name, transport=server.transport, command=server.command,
                        args=tuple(server.args or ())).launch_hash


# --- health (written by the connection manager of any process) -----------------------------------------------------
def server_health_record(server_id: int, report: dict[str, Any]) -> None:
    """Store what a connection manager observed. `report`: ok, state, error, attempts, next_attempt_at. A state
    change is published as `mcp.server_health`. Errors are stored scrubbed (they may quote a server's answer)."""
    from tools_app.security.scrub import scrub_text

    now = timezone.now()
    state = report.get("state") or (HealthState.CONNECTED if report.get("ok") else HealthState.DISCONNECTED)
    fields: dict[str, Any] = {"state": state, "last_checked_at": now, "attempts": int(report.get("attempts") or 0),
                              "next_attempt_at": report.get("next_attempt_at")}
    if report.get("ok"):
        fields.update(last_ok_at=now, last_error="")
    elif report.get("error"):
        fields["last_error"] = scrub_text(str(report["error"]))[:2000]
    with transaction.atomic():
        previous = MCPServer.objects.filter(pk=server_id).values_list("state", flat=True).first()
        if previous is None:
            return
        MCPServer.objects.filter(pk=server_id).update(**fields)
        if previous != state:
            name = MCPServer.objects.filter(pk=server_id).values_list("name", flat=True).first()
            publish("mcp.server_health", {"server": name, "state": state, "previous": previous,
                                          "error": fields.get("last_error", "")}, [MCP_EVENTS_GROUP])
