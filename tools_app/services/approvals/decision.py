"""Deciding allow / ask / deny / hold for one call: tool permissions, the agent's mode, the exec security × ask
matrix and its allowlist. Pure decisions: nothing here writes."""
from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from django.db.models import Q

from goclaw.errors import ValidationError
from tools_app.base import Tool
from tools_app.choices import AgentMode, ApprovalDecision, PermissionScope, RuleMatch
from tools_app.models import Agent, ApprovalRequest, ToolPermission
from tools_app.security.shell_check import analyse_for_rules
from tools_app.policy import cached
from tools_app.registry import ToolRegistry, registry
from tools_app.services.approvals.effects import WordPattern, _path_judge, _view_problem, words_cover

logger = logging.getLogger("goclaw.approvals")

PLAN_TOOL = "submit_plan"
_RANK = {"allow": 0, "ask": 1, "deny": 2}


# --- canonical form ---------------------------------------------------------------------------------
def canonical_arguments(args: Any) -> str:
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def arguments_hash(tool_name: str, args: Any) -> str:
    """Binds an approval to the exact call: sha256 of the tool name and the canonical arguments."""
    return hashlib.sha256(f"{tool_name}\n{canonical_arguments(args)}".encode()).hexdigest()


def normalize_command(command: str) -> str:
    return command.strip()



# --- deciding allow / ask / deny / hold ---------------------------------------------------------------
@dataclass(frozen=True)
class Decision:
    action: str  # allow | ask | deny | hold
    reason: str = ""


def permission_for(agent: Agent, tool_name: str, tools: ToolRegistry | None = None) -> str | None:
    """The ToolPermission verdict for this tool: a deny in any scope wins, else the most specific scope
    (agent > mode > global) that names the tool or one of its groups (groups as the call's tool set has them);
    None when nothing names it."""
    tools = tools if tools is not None else registry
    rows = cached(("permissions", agent.pk, agent.mode), lambda: list(ToolPermission.objects.filter(
        Q(scope=PermissionScope.GLOBAL) | Q(scope=PermissionScope.AGENT, agent=agent) | Q(scope=PermissionScope.MODE, mode=agent.mode)
    ).values_list("scope", "tool", "permission")))
    matching = [(scope, perm) for scope, name, perm in rows if tool_name in tools.expand([name])]
    if any(perm == "deny" for _, perm in matching):
        return "deny"
    for scope in (PermissionScope.AGENT, PermissionScope.MODE, PermissionScope.GLOBAL):
        perms = [perm for s, perm in matching if s == scope]
        if perms:
            return max(perms, key=_RANK.__getitem__)
    return None


_ALLOWLIST_SYNTAX = frozenset({";", "&", "|", "(", ")", "\n"})  # chains and pipelines: each command is judged


def allowlist_covers(patterns: list[str], command: str, *, workspace=None, working_dir: Any = None) -> bool:
    """True when every command the shell would run is covered by an allowlist entry (so `allowed && other` does not
    pass). Entries are word patterns like rules (`git status *`, `echo *`, `make test`): literal words, then
    one-argument globs, a trailing `*` for any further arguments, which must have no effect (write, delete, run,
    …) and name nothing outside the workspace. Redirections, expansions, globs, variables and unknown wrappers miss."""
    entries = []
    for text in patterns or []:
        try:
            wp = WordPattern.parse(RuleMatch.GLOB, text) if isinstance(text, str) else None
        except ValidationError:
            wp = None
        if wp is not None and wp.literal >= 1:
            entries.append(wp)
    analysis = analyse_for_rules(command)
    if not entries or analysis.problems or not analysis.commands or analysis.syntax - _ALLOWLIST_SYNTAX:
        return False
    escapes = _path_judge(workspace, working_dir)
    if escapes is None:
        return False
    for view in analysis.commands:
        if _view_problem(view) is not None:
            return False
        if not any(words_cover(wp, view.argv, escapes, literal_effects_ok=True) is None for wp in entries):
            return False
    return True


def exec_matrix(config: dict, command: str, *, workspace=None, working_dir: Any = None) -> Decision:
    """GoClaw's security (deny|allowlist|full) × ask (off|on-miss|always) matrix, without its safe-bins."""
    security, ask = config.get("exec_security", "full"), config.get("exec_ask", "off")
    if security == "deny":
        return Decision("deny", "exec is disabled for this agent (exec_security=deny)")
    if ask == "always":
        return Decision("ask", "every command needs approval (exec_ask=always)")
    hit = allowlist_covers(config.get("exec_allowlist") or [], command, workspace=workspace, working_dir=working_dir)
    if hit:
        return Decision("allow")
    if security == "allowlist":
        if ask == "on-miss":
            return Decision("ask", "the command is not covered by the exec allowlist")
        return Decision("deny", "the command is not covered by this agent's exec allowlist")
    if ask == "on-miss":
        return Decision("ask", "the command is not covered by the exec allowlist (exec_ask=on-miss)")
    return Decision("allow")


def plan_approved(agent: Agent, user_id: str, session_key: str) -> bool:
    return ApprovalRequest.objects.filter(
        agent=agent, user_id=user_id, session_key=session_key, tool_name=PLAN_TOOL,
        decision__in=[ApprovalDecision.ALLOW_ONCE, ApprovalDecision.ALLOW_ALWAYS],
    ).exists()


def approval_resolve(*, agent: Agent, tool: Tool, args: dict, config: dict, user_id: str = "", session_key: str = "",
                     workspace=None, tools: ToolRegistry | None = None) -> Decision:
    """allow / ask / deny / hold for one call. A deny from any source wins; structural mode rules (plan,
    audit, review holds) are not relaxed by an `allow` permission; an explicit permission replaces the mode's
    default; always_require_approval and the exec matrix can only make it stricter."""
    permission = permission_for(agent, tool.name, tools)
    if permission == "deny":
        return Decision("deny", f"tool {tool.name} is denied by a tool permission")
    mode = agent.mode
    if mode == AgentMode.PLAN and tool.mutating and not plan_approved(agent, user_id, session_key):
        return Decision("deny", f"agent {agent.key} is in plan mode: call {PLAN_TOOL} with your plan and wait for a "
                                f"person to approve it before using {tool.name} in this session")
    if mode == AgentMode.AUDIT and tool.mutating and not tool.held_for_review:
        return Decision("deny", f"agent {agent.key} is in audit mode: only file changes (held for review) are possible")
    command = tool.command_for(args)
    matrix = (exec_matrix(config, command, workspace=workspace, working_dir=args.get("working_dir"))
              if command is not None else Decision("allow"))
    if matrix.action == "deny":
        return matrix
    if mode in (AgentMode.REVIEW, AgentMode.AUDIT) and tool.held_for_review:
        return Decision("hold", f"agent {agent.key} is in {mode} mode: file changes are held for a person's review")

    if permission is not None:
        decision = Decision(permission, f"tool {tool.name} is set to ask by a tool permission" if permission == "ask" else "")
    elif mode == AgentMode.MANUAL or (mode in (AgentMode.CAUTIOUS, AgentMode.REVIEW) and tool.mutating):
        decision = Decision("ask", f"agent {agent.key} is in {mode} mode")
    else:
        decision = Decision("allow")
    if tool.always_require_approval and decision.action == "allow":
        decision = Decision("ask", f"tool {tool.name} requires a person's approval for every call")
    if matrix.action == "ask" and decision.action == "allow":
        decision = matrix
    return decision


