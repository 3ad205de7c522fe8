"""The `exec` tool (alias `bash`): run a shell command in the agent's workspace via `sandbox_exec`.

The process runs in the agent's sandbox profile (`tools_app.sandboxing`): bubblewrap or docker with the
workspace at /workspace, or the host only when the profile switches the sandbox off; a broken sandbox fails
the call (never a silent fall back to the host). Further configuration comes from `ctx.settings`:
- `exec_timeout_seconds` (default: the profile's timeout, 300 s): default command timeout, never above the
  profile's timeout; `tool_timeouts["exec"]`, if set, caps it;
- `exec_grace_seconds` (default 3): SIGTERM → grace → SIGKILL;
- `exec_max_output_bytes` (default 1 MiB): kept per stream;
- `shell_disabled_rule_groups`: passed to the shell safety check.
The workspace (`ctx.workspace`, a `tools_app.workspace.Workspace`) gives the directory and the denied prefixes that
`working_dir` is resolved against.
"""
from __future__ import annotations

import logging
import math
import os
import signal
from pathlib import Path
from typing import Any, Callable

from sandbox_app.services import ExecLimits, ExecResult, SandboxError, safe_child_env, sandbox_exec
from tools_app.base import Tool, ToolContext, ToolError, ToolResult
from tools_app.paths import PathError, is_within
from tools_app.sandboxing import CallSandbox, sandbox_for_call
from tools_app.workspace import Workspace, workspace_required

logger = logging.getLogger(__name__)

MAX_COMMAND_CHARS = 100_000
MIN_TIMEOUT, MAX_TIMEOUT = 1.0, 3600.0
DEFAULT_TIMEOUT = 300.0  # the default profile's timeout; the agent's profile decides
DEFAULT_GRACE = 3.0
DEFAULT_MAX_OUTPUT = 1024 * 1024
# Slack on top of command timeout + grace for the pipeline's outer limit (startup, drain, reaping).
OUTER_TIMEOUT_SLACK = 10.0


def _number(value: Any, default: float) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return default
    return default if math.isnan(value) else value


def _format_bytes(n: int) -> str:
    if n % (1024 * 1024) == 0:
        return f"{n // (1024 * 1024)} MiB"
    if n % 1024 == 0:
        return f"{n // 1024} KiB"
    return f"{n} bytes"


def _resolve_working_dir(ws: Workspace, root: str, user_path: str) -> Path:
    """`working_dir` → real directory inside the workspace (symlinks, `..`, absolute paths and denied prefixes
    checked); `root` is the workspace's real path."""
    try:
        target = ws.resolve(user_path)
    except PathError as exc:
        raise ToolError(f"working_dir refused: {exc}") from None
    real = os.path.realpath(target)
    if not is_within(root, real):  # belt and braces
        raise ToolError("working_dir refused: it is outside the workspace")
    if not os.path.exists(real):
        raise ToolError(f"working_dir does not exist: {user_path}")
    if not os.path.isdir(real):
        raise ToolError(f"working_dir is not a directory: {user_path}")
    return Path(real)


def format_exec_result(result: ExecResult, limits: ExecLimits) -> str:
    parts: list[str] = []
    if result.stdout:
        parts.append(result.stdout if result.stdout.endswith("\n") else result.stdout + "\n")
    if result.stderr:
        stderr = result.stderr if result.stderr.endswith("\n") else result.stderr + "\n"
        parts.append("STDERR:\n" + stderr)
    cap = _format_bytes(limits.max_output_bytes)
    if result.stdout_truncated:
        parts.append(f"[stdout truncated at {cap}]\n")
    if result.stderr_truncated:
        parts.append(f"[stderr truncated at {cap}]\n")
    if result.timed_out:
        parts.append(f"[timed out after {limits.timeout_seconds:g}s; process group killed]")
    elif result.exit_code is None:
        parts.append("[killed; no exit code]")
    elif result.exit_code < 0:
        try:
            sig_name = signal.Signals(-result.exit_code).name
        except ValueError:
            sig_name = f"signal {-result.exit_code}"
        parts.append(f"[exit code {result.exit_code} (killed by {sig_name})]")
    else:
        parts.append(f"[exit code {result.exit_code}]")
    return "".join(parts)


def sandbox_limits(ctx: ToolContext, sandbox: CallSandbox, *, tool_name: str, timeout: float) -> ExecLimits:
    """The limits for one process-starting call: the requested `timeout`, capped by `tool_timeouts[tool_name]` and
    the sandbox profile's ceiling; grace and output caps from the agent's settings (shared by exec and custom tools)."""
    settings = ctx.settings or {}
    ceiling = float(sandbox.profile.timeout_seconds)
    cap = (settings.get("tool_timeouts") or {}).get(tool_name)
    if cap is not None:
        timeout = min(timeout, _number(cap, MAX_TIMEOUT))
    timeout = min(max(timeout, MIN_TIMEOUT), ceiling, MAX_TIMEOUT)
    return sandbox.profile.limits(
        timeout_seconds=timeout,
        grace_seconds=_number(settings.get("exec_grace_seconds", DEFAULT_GRACE), DEFAULT_GRACE),
        max_output_bytes=int(_number(settings.get("exec_max_output_bytes", DEFAULT_MAX_OUTPUT), DEFAULT_MAX_OUTPUT)),
    )


def run_shell_command(ctx: ToolContext, command: str, *, tool_name: str, working_dir: str | None,
                      limits_for: Callable[[CallSandbox], ExecLimits],
                      env: dict[str, str] | None = None, judged: str | None = None) -> ToolResult:
    """Run `command` with /bin/sh -c in the agent's sandbox, the way `exec` does: the shell safety check again
    (defence in depth: the pipeline's security hook ran it on `command_for`; `judged` is the text it judges when the
    command takes its values from `env`, as a custom tool's does), `working_dir` resolved through the Workspace, a
    minimal environment (`safe_child_env`, plus the trusted `env`: a custom tool's decrypted values and arguments),
    the profile's limits, process-group kill on timeout or cancel, and the formatted, audited result."""
    try:
        from tools_app.security.shell_check import check_command
    except ImportError:
        logger.error("%s refused: tools_app.security.shell_check is unavailable", tool_name)
        return ToolResult.error("command refused: the shell safety checker is unavailable")
    disabled = frozenset(ctx.settings.get("shell_disabled_rule_groups", ()) or ())
    verdict = check_command(command if judged is None else judged, disabled_groups=disabled)
    if verdict.verdict != "allow":
        return ToolResult.error("command denied by safety policy: " + "; ".join(verdict.reasons))
    if verdict.observe:
        from tools_app.pipeline import labels_of  # late: the pipeline imports the tools

        logger.warning("%s: suspicious command allowed (agent=%s request=%s): %s",
                       tool_name, ctx.agent_key, labels_of(ctx).request_id, "; ".join(verdict.reasons))

    ws = workspace_required(ctx)
    root = ws.ensure()  # creates it (0o700) if missing; returns the real path
    workspace = Path(root)
    cwd = _resolve_working_dir(ws, root, working_dir) if working_dir else workspace

    sandbox = sandbox_for_call(ctx)
    limits = limits_for(sandbox)
    try:
        result = sandbox_exec(command=command, workspace=workspace, cwd=cwd, env=safe_child_env(env), limits=limits,
                              spec=sandbox.spec, cancel=ctx.cancel)
    except SandboxError as exc:
        return ToolResult(for_llm=f"command not run: {exc}", is_error=True, sandbox=sandbox.audit(sandbox.spec.backend))
    text = format_exec_result(result, limits)
    return ToolResult(for_llm=text, is_error=result.timed_out or result.cancelled or result.exit_code != 0,
                      sandbox=sandbox.audit(result.backend))


class ExecTool(Tool):
    """Runs a shell command with a minimal environment, a timeout and bounded output."""

    name = "exec"
    aliases = ("bash",)
    group = "runtime"
    read_only = False
    requires_approval = True
    command_argument = "command"
    starts_processes = True
    timeout_seconds = DEFAULT_TIMEOUT + DEFAULT_GRACE + OUTER_TIMEOUT_SLACK
    description = (
        "Run a shell command (/bin/sh -c) in your workspace and get its stdout, stderr and exit code. "
        "The working directory is the workspace root unless working_dir (relative to the workspace) is "
        "given; HOME is the workspace. The environment is minimal (no credentials). Each call is a fresh "
        "shell: cd/export do not persist. No interactive programs (stdin is empty). The command is killed "
        "with everything it started after `timeout` seconds (default and maximum: the sandbox's, 300 s unless "
        "configured); background processes do not survive the call. It runs in a sandbox: the workspace is "
        "/workspace, nothing else of the machine is writable, and the network is off unless the sandbox allows "
        "it. Output beyond 1 MiB per stream is cut. Dangerous commands are refused."
    )
    parameters = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "maxLength": MAX_COMMAND_CHARS,
                        "description": "shell command to run with /bin/sh -c"},
            "timeout": {"type": "number", "minimum": MIN_TIMEOUT, "maximum": MAX_TIMEOUT,
                        "description": "seconds before the command is killed (default: the sandbox's timeout)"},
            "working_dir": {"type": "string", "minLength": 1, "maxLength": 4096,
                            "description": "directory to run in, relative to the workspace (default: its root)"},
        },
        "required": ["command"],
        "additionalProperties": False,
    }

    # --- limits -------------------------------------------------------------------------------
    def _limits(self, ctx: ToolContext, args: dict[str, Any], sandbox: CallSandbox) -> ExecLimits:
        settings = ctx.settings or {}
        ceiling = float(sandbox.profile.timeout_seconds)
        timeout = _number(args.get("timeout"), 0.0) if args.get("timeout") is not None else 0.0
        if timeout <= 0:
            timeout = _number(settings.get("exec_timeout_seconds", ceiling), ceiling)
        return sandbox_limits(ctx, sandbox, tool_name=self.name, timeout=timeout)

    def timeout_for(self, ctx: ToolContext, args: dict[str, Any]) -> float:
        limits = self._limits(ctx, args, sandbox_for_call(ctx))
        return limits.timeout_seconds + limits.grace_seconds + OUTER_TIMEOUT_SLACK

    # --- run ----------------------------------------------------------------------------------
    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        command = args.get("command")
        if not isinstance(command, str) or not command.strip():
            raise ToolError("command must be a non-empty string")
        if len(command) > MAX_COMMAND_CHARS:
            raise ToolError(f"command is longer than {MAX_COMMAND_CHARS} characters")
        if "\x00" in command:
            raise ToolError("command contains a NUL byte")
        working_dir = args.get("working_dir")
        if working_dir is not None and (not isinstance(working_dir, str) or "\x00" in working_dir):
            raise ToolError("working_dir must be a string without NUL bytes")

        return run_shell_command(ctx, command, tool_name=self.name, working_dir=working_dir,
                                 limits_for=lambda sandbox: self._limits(ctx, args, sandbox))


TOOLS = [ExecTool()]
