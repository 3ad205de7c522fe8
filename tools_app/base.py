"""The tool contract: every built-in, custom and MCP-bridged tool implements `Tool.run(ctx, args)`.

Tool instances are shared across threads and requests, so they hold configuration only; every
per-call value travels in the immutable `ToolContext`.
"""
from __future__ import annotations

import dataclasses
import json
import shlex
import threading
from dataclasses import dataclass, field
from typing import Any

from tools_app.calls import CallContext
from tools_app.security.shell_check import extract_simple_commands


@dataclass(frozen=True)
class ToolContext:
    """Per-call values handed to a tool. Frozen: tools must not keep state between calls."""

    agent_key: str
    agent_id: int | None = None
    # What the caller said about the call (user, session, channel, …): the raw values, for the tool to act on.
    call: CallContext = CallContext()
    # The call's `tools_app.workspace.Workspace` (root, per-user directory, denied paths, routers), or None.
    workspace: Any = None
    sandbox_key: str = ""
    # The provider the call runs under (the caller's, else the agent's).
    provider: str = ""
    # Per-agent settings resolved once per call (e.g. denied paths, exec timeouts, deny groups).
    settings: dict[str, Any] = field(default_factory=dict)
    # The tool names the policy engine allows for this call (resolved once, cached across calls).
    catalog: frozenset[str] = frozenset()
    # The call's tool set (`tools_app.toolsets.toolset_for`: built-ins and every source's tools), a ToolRegistry view.
    tools: Any = None
    # For tools that start processes: the call's sandbox (`tools_app.sandboxing.CallSandbox`), resolved by the
    # pipeline in the caller's thread before the tool runs.
    sandbox: Any = None
    # The caller's strings scrubbed for storing and showing (`tools_app.labels.CallLabels`), set by the pipeline.
    labels: Any = None
    # Set when the pipeline gives up on the call (timeout): a tool that loops or waits checks `cancelled` and stops.
    cancel: threading.Event = field(default_factory=threading.Event)
    # The caller's own cancel event (ToolCall.cancel), or None: when it is set the pipeline stops waiting for the
    # tool and sets `cancel`.
    caller_cancel: threading.Event | None = None

    user_id = property(lambda self: self.call.user_id)
    session_key = property(lambda self: self.call.session_key)
    channel = property(lambda self: self.call.channel)
    chat_id = property(lambda self: self.call.chat_id)
    peer_kind = property(lambda self: self.call.peer_kind)
    subagent_depth = property(lambda self: self.call.subagent_depth)
    request_id = property(lambda self: self.call.request_id)

    @property
    def cancelled(self) -> bool:
        return self.cancel.is_set()

    def replace(self, **changes: Any) -> "ToolContext":
        return dataclasses.replace(self, **changes)


@dataclass
class ToolResult:
    """What a tool returns: `for_llm` goes back to the model, `for_user` (optional) to a person."""

    for_llm: str
    for_user: str | None = None
    is_error: bool = False
    media: list[dict[str, Any]] = field(default_factory=list)
    # Where the call's processes ran (recorded in the audit row): {"backend": …, "profile": …}.
    sandbox: dict[str, str] | None = None

    @classmethod
    def error(cls, message: str) -> "ToolResult":
        return cls(for_llm=message, is_error=True)


class ToolError(Exception):
    """Raised inside a tool for an expected failure; the pipeline turns it into an error result
    carrying exactly this message (unlike other exceptions, whose details stay in the log)."""


class ToolTimedOut(ToolError):
    """Raised inside a tool whose own deadline passed (an MCP server's per-call timeout): the call's status is
    `timeout`, as when the pipeline's deadline passes."""


class Tool:
    """Base class. Metadata is per instance: a built-in sets it as class attributes, a tool made from a database
    row or an MCP listing passes it to the constructor (`Tool(name=…, description=…, parameters=…)`)."""

    name: str = ""
    description: str = ""
    parameters: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
    group: str = ""
    read_only: bool = True          # False means the tool changes something (files, processes, state)
    requires_approval: bool = False  # may be asked about depending on mode/permissions
    always_require_approval: bool = False  # a person must approve every call
    timeout_seconds: float = 60.0
    # True for tools that cannot block (pure computation, one indexed query): they run in the caller's
    # thread (and transaction) instead of a worker thread with a timeout.
    inline: bool = False
    aliases: tuple[str, ...] = ()
    # Name of the argument holding a shell command (the default `command_for` reads it).
    command_argument: str | None = None
    # True for tools that start processes: the pipeline hands them the agent's sandbox in `ctx.sandbox`.
    starts_processes: bool = False
    # True for tools whose calls review and audit modes hold for a person as a pending change (file writes).
    held_for_review: bool = False

    METADATA = ("name", "description", "parameters", "group", "read_only", "requires_approval",
                "always_require_approval", "timeout_seconds", "inline", "aliases", "command_argument",
                "starts_processes", "held_for_review")

    def __init__(self, **metadata: Any) -> None:
        unknown = set(metadata) - set(self.METADATA)
        if unknown:
            raise TypeError(f"unknown tool metadata: {', '.join(sorted(unknown))}")
        for key, value in metadata.items():
            setattr(self, key, value)

    @property
    def mutating(self) -> bool:
        return not self.read_only

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:  # pragma: no cover - abstract
        raise NotImplementedError

    # --- what the call will do, for the security hook and the person approving it ------------------------------
    def command_for(self, args: dict[str, Any]) -> str | None:
        """The shell command this call will run, if it runs one: the security hook checks exactly this text, and
        the exec approval rules judge it (a templated tool returns its rendered command)."""
        value = args.get(self.command_argument) if self.command_argument else None
        return value if isinstance(value, str) else None

    def summarize(self, args: dict[str, Any], root: Any = None) -> tuple[str, dict[str, Any]]:
        """(one line or a few, details) a person sees in an approval prompt: what will happen, and where. `root` is
        the workspace directory the call runs in. Not yet scrubbed: the approval service scrubs it."""
        command = self.command_for(args)
        if command is not None:
            where = args.get("working_dir") or "."
            if root is not None:
                where = str(root / where) if where != "." else str(root)
            runs = [shlex.join(argv) for argv in extract_simple_commands(command)]
            summary = f"{self.name} in {where}:\n$ {command}\nruns: " + ("; ".join(runs) or "(nothing parseable)")
            return summary, {"command": command, "working_dir": where, "simple_commands": runs}
        if isinstance(args.get("path"), str):
            return f"{self.name} {args['path']}", {"path": args["path"]}
        parts = [f"{k}={json.dumps(v, ensure_ascii=False)[:120]}" for k, v in sorted(args.items())]
        return f"{self.name}({', '.join(parts)})", {}

    def definition(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters, "group": self.group}

    def timeout_for(self, ctx: ToolContext, args: dict[str, Any]) -> float:
        """The wall-clock limit the pipeline enforces for this call (tools may read it from args)."""
        return float(ctx.settings.get("tool_timeouts", {}).get(self.name, self.timeout_seconds))
