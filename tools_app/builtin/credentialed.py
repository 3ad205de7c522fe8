"""`credentialed_exec` (docs/credentialed-exec.md): run a registered CLI binary (gh, aws, …) with its sealed
credentials, directly (no shell), through the agent's sandbox. The tool comes from a tool source: an agent has it only
when at least one binary is enabled for it, and its description lists those binaries with their tips.

Arguments are one string, parsed like a shell would split words (quotes work) but never run by a shell: a shell
operator (`;`, `|`, `&`, `&&`, `||`, `<`, `>`, parentheses, `$(…)`, backticks, a newline) is refused, not passed on."""
from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from goclaw import crypto
from sandbox_app.services import SandboxError, resolve_backend, safe_child_env, sandbox_exec
from tools_app.base import Tool, ToolContext, ToolError, ToolResult
from tools_app.builtin.custom import injected_secrets, scrubbed_result
from tools_app.builtin.runtime import DEFAULT_GRACE, OUTER_TIMEOUT_SLACK, format_exec_result, sandbox_limits
from tools_app.sandboxing import sandbox_for_call
from tools_app.services.cli_binaries import TOOL_NAME
from tools_app.toolsets import ToolSource
from tools_app.workspace import workspace_required

logger = logging.getLogger("goclaw.credentialed_exec")
SOURCE_NAME = "credentialed-binaries"
MAX_ARGS_CHARS = 20_000
OPERATOR_CHARS = ";&|<>()"
# Refused anywhere, quoted or not: nothing expands them here, and a caller writing them expects a shell.
_ALWAYS_REFUSED = {"\n": "a newline", "\r": "a carriage return", "\x00": "a NUL byte", "`": "a backtick",
                   "$(": "$( … )"}
# Directories every sandbox backend shows at the same path; a binary elsewhere is bound read-only for the call.
_SYSTEM_PREFIXES = ("/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/")
# HOME of a credentialed binary under bubblewrap and docker: the run's own private /tmp, empty at every call. Not the
# workspace: there the agent could write the CLI's configuration (gh aliases `!sh`, aws cli aliases and
# credential_process, kubeconfig exec plugins), which would run its own commands with the credentials.
_ISOLATED_HOME = "/tmp"


class ShellOperatorError(ToolError):
    pass


def parse_arguments(text: str) -> list[str]:
    """`text` split into argv words (shell quoting rules), or ShellOperatorError naming the first operator found.
    A quoted word that is only operator characters (`'|'`) is refused too: the lexer cannot tell it from the
    operator, and refusing is the safe side."""
    if not isinstance(text, str):
        raise ToolError("args must be a string")
    if len(text) > MAX_ARGS_CHARS:
        raise ToolError(f"args must be at most {MAX_ARGS_CHARS} characters")
    for needle, label in _ALWAYS_REFUSED.items():
        if needle in text:
            raise ShellOperatorError(f"args contain {label}: credentialed_exec runs one command with no shell; "
                                     "shell operators, substitutions and several lines are refused")
    lexer = shlex.shlex(text, posix=True, punctuation_chars=OPERATOR_CHARS)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError as exc:
        raise ToolError(f"args cannot be parsed: {exc} (check the quotes)") from None
    for word in words:
        if word and all(ch in OPERATOR_CHARS for ch in word):
            raise ShellOperatorError(f"args contain the shell operator {word!r}: credentialed_exec runs one command "
                                     "with no shell; pipes, redirections, && || ; & and subshells are refused — "
                                     "run one command per call")
    return words


class CredentialedExecTool(Tool):
    """The tool one agent gets: `binaries` maps each name it may use to its row as loaded when the tool set was built
    (a write bumps the tool-set generation, so every process rebuilds within a second). No database access at call
    time; the env stays sealed until a call runs, and the path is checked again then."""

    read_only = False
    starts_processes = True

    def __init__(self, *, binaries: dict[str, Any], **metadata: Any) -> None:
        super().__init__(**metadata)
        self.binaries = binaries

    def _row(self, name: Any):
        if not isinstance(name, str) or name not in self.binaries:
            raise ToolError(f"unknown binary {str(name)[:80]!r}; available: {', '.join(sorted(self.binaries))}")
        return self.binaries[name]

    def summarize(self, args: dict[str, Any], root: Any = None) -> tuple[str, dict[str, Any]]:
        binary, text = args.get("binary"), args.get("args", "")
        summary = f"{TOOL_NAME}: {binary} {text}"
        return summary, {"binary": binary, "args": text}

    def timeout_for(self, ctx: ToolContext, args: dict[str, Any]) -> float:
        try:
            row = self._row(args.get("binary"))
        except ToolError:
            return DEFAULT_GRACE + OUTER_TIMEOUT_SLACK
        limits = sandbox_limits(ctx, sandbox_for_call(ctx), tool_name=TOOL_NAME, timeout=row.timeout_seconds)
        return limits.timeout_seconds + limits.grace_seconds + OUTER_TIMEOUT_SLACK

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        from tools_app.services.cli_binaries import (
            cli_binary_denied,
            cli_binary_env,
            cli_binary_path_problem,
            cli_binary_risk_problem,
        )

        row = self._row(args.get("binary"))
        argv = parse_arguments(args.get("args", ""))
        if denied := cli_binary_denied(row, argv):
            raise ToolError(denied)
        workspace = Path(workspace_required(ctx).ensure())
        if problem := cli_binary_path_problem(row.path, workspaces=[workspace], all_agents=False):
            logger.warning("credentialed binary %s (id %s) refused at call time: %s", row.name, row.pk, problem)
            raise ToolError(f"binary {row.name} failed its path check ({problem}); ask an operator to fix it")
        if cli_binary_risk_problem(row.path, row.risk_acknowledged):
            # a row saved before the check existed, or a file replaced by another program since it was saved
            logger.warning("credentialed binary %s (id %s) refused at call time: it can reveal its credentials and "
                           "the risk is not acknowledged", row.name, row.pk)
            raise ToolError(f"binary {row.name} can start other programs or print its environment, so it could reveal "
                            "its credentials; it runs only once an operator acknowledges that risk on it")
        try:
            env = cli_binary_env(row)
        except crypto.DecryptionError:
            raise ToolError(f"the environment of binary {row.name} cannot be decrypted; ask an operator to set it "
                            "again") from None
        sandbox = sandbox_for_call(ctx)
        spec = sandbox.spec
        if not row.path.startswith(_SYSTEM_PREFIXES):
            spec = dataclasses.replace(spec, ro_binds=tuple(spec.ro_binds) + (row.path,))
        limits = sandbox_limits(ctx, sandbox, tool_name=TOOL_NAME, timeout=row.timeout_seconds)
        with injected_secrets(env.values()) as secrets, _private_home(spec) as home:
            child_env = safe_child_env(env)
            child_env["HOME"] = home
            try:
                result = sandbox_exec(argv=[row.path, *argv], workspace=workspace, cwd=workspace,
                                      env=child_env, limits=limits, spec=spec, cancel=ctx.cancel)
            except SandboxError as exc:
                return scrubbed_result(ToolResult(for_llm=f"command not run: {exc}", is_error=True,
                                            sandbox=sandbox.audit(spec.backend)), secrets)
            text = format_exec_result(result, limits)
            return scrubbed_result(
                ToolResult(for_llm=text, is_error=result.timed_out or result.cancelled or result.exit_code != 0,
                           sandbox=sandbox.audit(result.backend)), secrets)


@contextmanager
def _private_home(spec) -> Iterator[str]:
    """An empty HOME only this run sees: the isolated backends' private /tmp, else (the host backend, sandbox off) a
    new directory the sandbox user cannot write to, removed afterwards."""
    try:
        isolated = resolve_backend(spec) in ("bubblewrap", "docker")
    except SandboxError:
        isolated = False  # sandbox_exec will say why it cannot run
    if isolated:
        yield _ISOLATED_HOME
        return
    home = tempfile.mkdtemp(prefix="goclaw-cli-home-")
    os.chmod(home, 0o555)
    try:
        yield home
    finally:
        os.chmod(home, 0o700)
        shutil.rmtree(home, ignore_errors=True)


def tool_for_binaries(rows: list) -> CredentialedExecTool:
    """The tool for these binaries (one agent's): its description lists them with their tips."""
    lines = [f"- {row.name}" + (f": {row.tips.strip()}" if row.tips.strip() else "") for row in rows]
    description = (
        "Run a CLI that holds credentials goclaw keeps for you (you never see them). Pass `binary` (one of the "
        "names below) and `args`: its arguments as one string, without the binary name, quoted as in a shell "
        "(e.g. `pr list --repo a/b`). It runs directly, with no shell: pipes, redirections, ;, &&, ||, $(…), "
        "backticks and newlines are refused; some subcommands that print or change credentials are refused too. "
        "These binaries cannot be run through exec or custom tools.\nAvailable binaries:\n" + "\n".join(lines))
    timeout = max((row.timeout_seconds for row in rows), default=60)
    return CredentialedExecTool(
        binaries={row.name: row for row in rows}, name=TOOL_NAME, description=description, group="runtime",
        parameters={"type": "object", "additionalProperties": False, "required": ["binary"],
                    "properties": {"binary": {"type": "string", "enum": sorted(row.name for row in rows)},
                                   "args": {"type": "string", "default": "",
                                            "description": "the arguments, without the binary name"}}},
        requires_approval=True, timeout_seconds=float(timeout) + DEFAULT_GRACE + OUTER_TIMEOUT_SLACK)


class CredentialedBinarySource(ToolSource):
    """`credentialed_exec` for agents that have at least one enabled binary (global or their own)."""

    name = SOURCE_NAME
    reserved_names = frozenset({TOOL_NAME})

    def tools_for(self, agent: Any, user_id: str) -> Iterable[Tool]:
        from tools_app.services.cli_binaries import cli_binaries_for_agent

        rows = cli_binaries_for_agent(agent)
        return [tool_for_binaries(rows)] if rows else []

