"""Leaf types shared by the bridge, the services and the tool source (no Django models here).

`ServerConfig` is everything needed to connect to one server *as one caller*: the server's own settings with an
agent grant's `config_overrides` and a user grant's credentials applied. Its `key` names the connection: two calls
share a connection only when every setting — secrets included — is the same, so one user's credentials never serve
another user's call.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

OVERRIDE_KEYS = ("env", "headers", "args_suffix", "timeout")  # what an agent grant's config_overrides may set


@dataclass(frozen=True)
class ServerConfig:
    server_id: int
    name: str
    transport: str  # mcp_app.choices.Transport value
    command: str = ""
    args: tuple[str, ...] = ()
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    timeout: float = 60.0
    allow_private_network: bool = False
    # stdio: the sandbox the process runs in (sandbox_app.runs.SandboxSpec; None = the host) and its working dir
    sandbox: Any = None
    workdir: str = ""
    limits: Any = None  # stdio in a sandbox: sandbox_app.runs.ExecLimits (processes, open files, file size)
    # whose credentials these are ("" = the server's own): part of the key, shown in logs instead of any secret
    credentials_of: str = ""
    # how many of `args` are the server's own (the rest is an agent grant's args_suffix); -1 = all
    own_args: int = -1

    @property
    def key(self) -> str:
        """The connection's identity: a hash of every setting (secrets included, never stored or logged)."""
        data = json.dumps([self.server_id, self.transport, self.command, self.args, self.url, self.headers,
                           self.env, self.allow_private_network, repr(self.sandbox), repr(self.limits), self.workdir,
                           self.credentials_of], sort_keys=True, default=str)
        return hashlib.sha256(data.encode()).hexdigest()

    @property
    def launch_hash(self) -> str:
        """stdio: a hash of what is launched (command + args), part of every tool's pinned definition; '' otherwise.
        Only the server's own command counts (an agent's args_suffix is not the server changing)."""
        if self.transport != "stdio":
            return ""
        own = list(self.args if self.own_args < 0 else self.args[:self.own_args])
        return hashlib.sha256(json.dumps([self.command, own]).encode()).hexdigest()

    def secret_values(self) -> list[str]:
        """Every header and env value (and a header's credential part after "Bearer "/"Basic "…): what must never
        come back to a model, a log line or an error message, longest first."""
        values: set[str] = set()
        for _, value in (*self.headers, *self.env):
            if value:
                values.add(value)
                scheme, _, credential = value.partition(" ")
                if credential and scheme.isalpha() and len(credential) >= 4:
                    values.add(credential)
        return sorted(values, key=len, reverse=True)

    def redact(self, text: str) -> str:
        """`text` with every secret value removed, also in its JSON-escaped form (a server may echo it inside JSON)."""
        return redact_values(text, self.secret_values())

    def headers_dict(self) -> dict[str, str]:
        return dict(self.headers)

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)


def redact_values(text: str, values: list[str]) -> str:
    """Replace each value (and its JSON-escaped form) in `text` with [REDACTED], longest first."""
    for value in sorted({v for v in values if v}, key=len, reverse=True):
        for form in {value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}:
            if form:
                text = text.replace(form, "[REDACTED]")
    return text


@dataclass(frozen=True)
class ToolDefinition:
    """One tool as a server lists it."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    def pin_hash(self, launch_hash: str = "") -> str:
        """The pinned identity of this definition: name, description and input schema (and, for stdio servers, the
        launched command). Canonical JSON, so key order in the schema does not matter."""
        data = json.dumps([self.name, self.description, self.input_schema, launch_hash], sort_keys=True,
                          separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(data.encode()).hexdigest()


@dataclass(frozen=True)
class CallResult:
    """A tools/call answer, converted: `text` is what the model reads (text content joined, structured content as
    JSON, other content described); `is_error` from the server's isError."""

    text: str
    is_error: bool = False
    structured: Any = None
    content_types: tuple[str, ...] = ()


class BridgeError(Exception):
    """The call could not be made or finished (server unreachable, disconnected, timed out, protocol error).
    `code` is stable snake_case (`mcp_unavailable`, `mcp_timeout`, `mcp_cancelled`, `mcp_protocol_error`,
    `mcp_network_refused`, `mcp_launch_refused`, `mcp_auth_failed`)."""

    def __init__(self, message: str, *, code: str = "mcp_unavailable", retry_after: float | None = None) -> None:
        super().__init__(message)
        self.code, self.retry_after = code, retry_after
