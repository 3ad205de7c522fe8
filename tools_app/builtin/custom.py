"""Custom tools at run time (docs/custom-tools.md): the tool a `CustomTool` row becomes (its rendered command run the
way `exec` runs one, with the row's decrypted env) and the tool source that gives each agent its custom tools."""
from __future__ import annotations

import logging
import shlex
import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db.models import Q

from goclaw import crypto
from tools_app.base import Tool, ToolContext, ToolError, ToolResult
from tools_app.builtin.runtime import (DEFAULT_GRACE, MAX_COMMAND_CHARS, OUTER_TIMEOUT_SLACK, run_shell_command,
                                      sandbox_limits)
from tools_app.custom_tools import TemplateError, compile_template, env_seal_context
from tools_app.sandboxing import sandbox_for_call
from tools_app.security.scrub.transforms import scrub_known_values
from tools_app.security.shell_check import extract_simple_commands
from tools_app.toolsets import ToolSource

logger = logging.getLogger("goclaw.custom_tools")
SOURCE_NAME = "custom-tools"


# --- secrets in the scrubber for the duration of a call ----------------------------------------------------------
# Two concurrent calls may inject the same value: it leaves the shared scrubber only when the last one ends.
_injected: Counter[str] = Counter()
_injected_lock = threading.Lock()


def _scrub_values_add(values: list[str]) -> None:
    from tools_app.security.scrub import default_scrubber

    with _injected_lock:
        _injected.update(values)
        default_scrubber.add_values(values)


def _scrub_values_remove(values: list[str]) -> None:
    from tools_app.security.scrub import default_scrubber

    with _injected_lock:
        _injected.subtract(values)
        gone = [v for v in set(values) if _injected[v] <= 0]
        for value in gone:
            del _injected[value]
        default_scrubber.remove_values(gone)


class CustomCommandTool(Tool):
    """A `CustomTool` row as a tool: runs its compiled template the way `exec` runs a command (same sandbox, limits,
    kill and output handling), with the row's decrypted env and the call's arguments as environment variables (the
    script only references them: a value is never part of the shell text)."""

    read_only = False
    starts_processes = True

    def __init__(self, *, row_id: Any, template: str, command_timeout: float, working_dir: str = "",
                 env_sealed: str = "", **metadata: Any) -> None:
        super().__init__(**metadata)
        self.row_id, self.template, self.command_timeout = row_id, template, float(command_timeout)
        self.working_dir, self.env_sealed = working_dir, env_sealed

    def command_for(self, args: dict[str, Any]) -> str | None:
        """The command with the arguments written in, quoted for their place: what the shell safety check, approvals
        and the audit judge (it means what the script does with the values in its environment)."""
        try:
            return compile_template(self.template).render(args if isinstance(args, dict) else {})
        except TemplateError:
            return None  # run() refuses the call with the reason

    def summarize(self, args: dict[str, Any], root: Any = None) -> tuple[str, dict[str, Any]]:
        """As exec's, but `where` is the tool's own working_dir: the arguments cannot choose it (an argument that
        happens to be named working_dir only fills its placeholder)."""
        command = self.command_for(args)
        if command is None:
            return super().summarize(args, root)
        where = self.working_dir or "."
        if root is not None:
            where = str(root / where) if where != "." else str(root)
        runs = [shlex.join(argv) for argv in extract_simple_commands(command)]
        summary = f"{self.name} in {where}:\n$ {command}\nruns: " + ("; ".join(runs) or "(nothing parseable)")
        return summary, {"command": command, "working_dir": where, "simple_commands": runs}

    def _limits(self, ctx: ToolContext, sandbox):
        return sandbox_limits(ctx, sandbox, tool_name=self.name, timeout=self.command_timeout)

    def timeout_for(self, ctx: ToolContext, args: dict[str, Any]) -> float:
        limits = self._limits(ctx, sandbox_for_call(ctx))
        return limits.timeout_seconds + limits.grace_seconds + OUTER_TIMEOUT_SLACK

    def _env(self) -> dict[str, str]:
        if not self.env_sealed:
            return {}
        try:
            env = crypto.decrypt_json(self.env_sealed, associated_data=env_seal_context(self.row_id))
        except crypto.DecryptionError:
            # Never run with a partial environment; the message names the row, never a value.
            raise ToolError(f"the environment of custom tool {self.name} cannot be decrypted; ask an operator "
                            "to set it again") from None
        return {str(k): str(v) for k, v in env.items()}

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        try:
            compiled = compile_template(self.template)
        except TemplateError as exc:  # saved before the check existed, or written behind the service's back
            raise ToolError(f"custom tool {self.name} cannot run: its command template is refused ({exc}); an "
                            "operator must correct it") from None
        try:
            command = compiled.render(args)
            arguments = compiled.environment(args)
        except TemplateError as exc:
            raise ToolError(str(exc)) from None
        if not command.strip():
            raise ToolError("the rendered command is empty")
        if len(command) > MAX_COMMAND_CHARS:
            raise ToolError(f"the arguments make the command longer than {MAX_COMMAND_CHARS} characters")
        env = self._env()
        with injected_secrets(env.values()) as secrets:
            # The arguments go last: the tool's own env cannot use their names (refused at save time) or shadow them.
            result = run_shell_command(ctx, compiled.script, tool_name=self.name,
                                       working_dir=self.working_dir or None,
                                       limits_for=lambda sandbox: self._limits(ctx, sandbox),
                                       env={**env, **arguments}, judged=command)
            return scrubbed_result(result, secrets)


@contextmanager
def injected_secrets(values: Iterable[str]) -> Iterator[list[str]]:
    """The values a call injects into a child's environment (a custom tool's or a credentialed binary's env), in
    the shared scrubber for the duration of the call; yields them (non-empty ones) for `scrubbed_result`."""
    secrets = [value for value in values if value]
    _scrub_values_add(secrets)
    try:
        yield secrets
    finally:
        _scrub_values_remove(secrets)


def scrubbed_result(result: ToolResult, secrets: list[str]) -> ToolResult:
    """The injected values out of the output now (custom tools, credentialed binaries, MCP servers' env): verbatim
    whatever their length (also JSON-escaped; the shared scrubber ignores values under its minimum length and drops
    these once the call ends), and, for values of 8 or more letters and digits, their common transformations
    (reversed, base64, hex, split by separators, dumps; tools_app/security/scrub/transforms.py)."""
    if not secrets:
        return result
    result.for_llm = scrub_known_values(result.for_llm, secrets)[0]
    if result.for_user:
        result.for_user = scrub_known_values(result.for_user, secrets)[0]
    return result


def custom_tool_list_for_agent(agent: Any) -> list:
    """The enabled custom tools `agent` has: the global ones and its own (its own first)."""
    from tools_app.models import CustomTool

    rows = CustomTool.objects.filter(Q(agent__isnull=True) | Q(agent=agent), enabled=True)
    return sorted(rows, key=lambda row: (row.agent_id is None, row.name))


def tool_from_row(row: Any) -> CustomCommandTool:
    """The tool a row describes (no database access, no decryption: the env stays sealed until a call runs)."""
    return CustomCommandTool(
        row_id=row.pk, template=row.command, command_timeout=row.timeout_seconds, working_dir=row.working_dir,
        env_sealed=row.env_sealed, name=row.name, description=row.description, parameters=row.parameters,
        group=row.group or "custom", requires_approval=row.requires_approval,
        always_require_approval=row.always_require_approval,
        timeout_seconds=float(row.timeout_seconds) + DEFAULT_GRACE + OUTER_TIMEOUT_SLACK,
    )


class CustomToolSource(ToolSource):
    """Custom tools from the database. A name that a built-in (or the agent's own tool) already has is skipped and
    logged: the service refuses such names at save time, so this only meets a collision that appeared later."""

    name = SOURCE_NAME

    def tools_for(self, agent: Any, user_id: str) -> Iterable[Tool]:
        from tools_app.registry import registry

        seen: set[str] = set()
        tools = []
        for row in custom_tool_list_for_agent(agent):
            if registry.get(row.name) is not None:
                logger.warning("custom tool %s (id %s) is shadowed by a built-in tool of that name; left out",
                               row.name, row.pk)
                continue
            if row.name in seen:
                logger.warning("custom tool %s (id %s) is shadowed by agent %s's own tool of that name; left out",
                               row.name, row.pk, agent.key)
                continue
            seen.add(row.name)
            tools.append(tool_from_row(row))
        return tools
