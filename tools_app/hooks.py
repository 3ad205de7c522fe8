"""Pre- and post-execution hooks. A pre-hook answers Continue, Block(reason), Modify(params) or
Observe(reason); they run in priority order (lower first), a Block stops the call, the last Modify wins,
Observe is recorded and the call goes on. Post-hooks observe results and can never change them."""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from django.conf import settings

from tools_app.security.scrub import default_scrubber
from tools_app.security.shell_check import check_command

if TYPE_CHECKING:
    from tools_app.base import Tool, ToolContext, ToolResult

logger = logging.getLogger("goclaw.hooks")


@dataclass(frozen=True)
class HookResult:
    kind: Literal["continue", "block", "modify", "observe"] = "continue"
    reason: str = ""
    params: dict[str, Any] | None = None

    @classmethod
    def block(cls, reason: str) -> "HookResult":
        return cls("block", reason)

    @classmethod
    def modify(cls, params: dict[str, Any], reason: str = "") -> "HookResult":
        return cls("modify", reason, params)

    @classmethod
    def observe(cls, reason: str) -> "HookResult":
        return cls("observe", reason)


CONTINUE = HookResult()
REASON_MAX_CHARS = 1000


def _safe(reason: str) -> str:
    """A reason as the caller, the audit row and approvers may see it. Reasons quote arguments (the shell check
    quotes the command), so they are scrubbed, then cut (scrubbing first: a cut token may not look like one)."""
    text, _ = default_scrubber.scrub(reason[: REASON_MAX_CHARS + 4096])
    return text if len(text) <= REASON_MAX_CHARS else text[: REASON_MAX_CHARS - 1] + "…"


class PreHook:
    name = "pre-hook"
    priority = 100

    def before(self, ctx: "ToolContext", tool: "Tool", args: dict[str, Any]) -> HookResult:  # pragma: no cover
        return CONTINUE


class PostHook:
    name = "post-hook"

    def after(self, ctx: "ToolContext", tool: "Tool", args: dict[str, Any], result: "ToolResult", status: str) -> None:  # pragma: no cover
        return None


@dataclass
class PreHookOutcome:
    blocked: str | None = None
    blocked_by: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    observations: list[str] = field(default_factory=list)


class HookRegistry:
    def __init__(self) -> None:
        self._pre: list[PreHook] = []
        self._post: list[PostHook] = []
        self._lock = threading.Lock()

    def add_pre(self, hook: PreHook) -> None:
        with self._lock:
            self._pre = sorted([h for h in self._pre if h.name != hook.name] + [hook], key=lambda h: h.priority)

    def add_post(self, hook: PostHook) -> None:
        with self._lock:
            self._post = [h for h in self._post if h.name != hook.name] + [hook]

    def remove(self, name: str) -> None:
        with self._lock:
            self._pre = [h for h in self._pre if h.name != name]
            self._post = [h for h in self._post if h.name != name]

    def run_pre(self, ctx: "ToolContext", tool: "Tool", args: dict[str, Any]) -> PreHookOutcome:
        outcome = PreHookOutcome(args=args)
        modified: dict[str, Any] | None = None
        for hook in self._pre:
            try:
                result = hook.before(ctx, tool, args)
            except Exception:
                # A broken security hook must not wave calls through.
                logger.exception("pre-hook %s failed", hook.name)
                result = HookResult.block(f"{hook.name} failed; the call was refused")
            if result.kind == "block":
                outcome.blocked, outcome.blocked_by = _safe(result.reason or "blocked"), hook.name
                return outcome
            if result.kind == "modify" and result.params is not None:
                modified = result.params
            elif result.kind == "observe":
                outcome.observations.append(_safe(f"{hook.name}: {result.reason}"))
        if modified is not None:
            outcome.args = modified
        return outcome

    def run_post(self, ctx, tool, args, result, status) -> None:
        for hook in self._post:
            try:
                hook.after(ctx, tool, args, result, status)
            except Exception:
                logger.exception("post-hook %s failed (result unchanged)", hook.name)


class SecurityFilterHook(PreHook):
    """Priority 10: globally blocked tool names, and the shell safety check on the command a call will run (the
    tool's `command_for`: exec's argument, a custom tool's rendered template)."""

    name = "security_filter"
    priority = 10

    def before(self, ctx, tool, args):
        if tool.name in settings.TOOL_BLOCKED_NAMES:
            return HookResult.block(f"tool {tool.name} is blocked by the administrator")
        command = tool.command_for(args)
        if command is not None:
            disabled = frozenset(ctx.settings.get("shell_disabled_rule_groups", ()))
            verdict = check_command(command, disabled_groups=disabled)
            if verdict.verdict == "deny":
                return HookResult.block("command denied by safety policy: " + "; ".join(verdict.reasons))
            if verdict.observe:
                return HookResult.observe("; ".join(verdict.reasons) or "suspicious command")
        return CONTINUE


class AccessControlHook(PreHook):
    """Priority 20: the tool must be in the catalog the policy engine resolved for this call (agent,
    provider, channel, subagent depth, per-request allow list; deny wins). The same resolution decides
    what `GET /api/v1/tools` shows, so a hidden tool can never be run."""

    name = "access_control"
    priority = 20

    def before(self, ctx, tool, args):
        if tool.name not in ctx.catalog:
            return HookResult.block(f"tool {tool.name} is not available to agent {ctx.agent_key}")
        return CONTINUE


class CredentialedBinaryHook(PreHook):
    """Priority 15: a binary registered for `credentialed_exec` (docs/credentialed-exec.md) runs only through it.
    Every simple command of a call's `command_for` (exec's command, a custom tool's rendered template; wrappers
    such as env, command, sh -c, bash -c unwrapped) is refused when its program is such a binary by name or by
    path, or is computed at run time (`$(which gh)`) while any binary is registered. credentialed_exec itself has
    no `command_for` (it runs no shell), so no tool is exempted by name: a tool merely called that is judged too."""

    name = "credentialed_binaries"
    priority = 15

    def before(self, ctx, tool, args):
        command = tool.command_for(args)
        if command is None:
            return CONTINUE
        from tools_app.security.shell_check import extract_simple_commands
        from tools_app.services.cli_binaries import program_is_registered, registered_binaries

        names, paths = registered_binaries()
        if not names:
            return CONTINUE
        for argv in extract_simple_commands(command):
            if argv and program_is_registered(argv[0], names, paths):
                return HookResult.block(
                    f"{argv[0][:200]} is a credentialed binary (or a program name computed at run time while "
                    "credentialed binaries exist): run it with credentialed_exec, not through a shell")
        return CONTINUE


hooks = HookRegistry()
hooks.add_pre(SecurityFilterHook())
hooks.add_pre(CredentialedBinaryHook())
hooks.add_pre(AccessControlHook())
