"""The tool contract: every built-in, custom and MCP-bridged tool implements `Tool.run(ctx, args)`.

Tool instances are shared across threads and requests, so they hold configuration only; every
per-call value travels in the immutable `ToolContext`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar


@dataclass(frozen=True)
class ToolContext:
    """Per-call values handed to a tool. Frozen: tools must not keep state between calls."""

    agent_key: str
    agent_id: int | None = None
    user_id: str = ""
    channel: str = ""
    chat_id: str = ""
    peer_kind: str = ""
    session_key: str = ""
    sandbox_key: str = ""
    workspace: Path | None = None
    subagent_depth: int = 0
    request_id: str = ""
    provider: str = ""
    # Per-agent settings resolved once per call (e.g. denied paths, exec timeouts, deny groups).
    settings: dict[str, Any] = field(default_factory=dict)
    # The tool names the policy engine allows for this call (resolved once, cached across calls).
    catalog: frozenset[str] = frozenset()
    # For tools that start processes: the call's sandbox (`tools_app.sandboxing.CallSandbox`), resolved by the
    # pipeline in the caller's thread before the tool runs.
    sandbox: Any = None

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


class Tool:
    """Base class. Subclasses set the class attributes and implement `run`."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}, "additionalProperties": False}
    group: ClassVar[str] = ""
    read_only: ClassVar[bool] = True          # False means the tool changes something (files, processes, state)
    requires_approval: ClassVar[bool] = False  # may be asked about depending on mode/permissions
    always_require_approval: ClassVar[bool] = False  # a person must approve every call
    timeout_seconds: ClassVar[float] = 60.0
    # True for tools that cannot block (pure computation, one indexed query): they run in the caller's
    # thread (and transaction) instead of a worker thread with a timeout.
    inline: ClassVar[bool] = False
    aliases: ClassVar[tuple[str, ...]] = ()
    # Name of the argument holding a shell command, checked by the security filter hook.
    command_argument: ClassVar[str | None] = None
    # True for tools that start processes: the pipeline hands them the agent's sandbox in `ctx.sandbox`.
    starts_processes: ClassVar[bool] = False

    @property
    def mutating(self) -> bool:
        return not self.read_only

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:  # pragma: no cover - abstract
        raise NotImplementedError

    def definition(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters, "group": self.group}

    def timeout_for(self, ctx: ToolContext, args: dict[str, Any]) -> float:
        """The wall-clock limit the pipeline enforces for this call (tools may read it from args)."""
        return float(ctx.settings.get("tool_timeouts", {}).get(self.name, self.timeout_seconds))
