"""Allow-always rules: exact (the hash of every argument), widened exec rules (prefix / glob on the analysed
command) and glob rules on normalised paths, each with a description of exactly what it covers."""
from __future__ import annotations

import json
import logging
import shlex
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from goclaw.errors import NotFound, ValidationError
from tools_app.base import Tool
from tools_app.choices import RuleMatch
from tools_app.models import Agent, ApprovalRequest, ApprovalRule
from tools_app.security.scrub import REDACTED, default_scrubber
from tools_app.services.approvals.decision import arguments_hash, canonical_arguments, normalize_command
from tools_app.services.approvals.effects import (
    DELETE, EFFECT_TEXT, INHERITABLE_EFFECTS, PROGRAMS, WRITE, WordPattern, _path_judge, arguments_glob_match,
    clean_path_pattern, command_effects, is_path_argument, single_command_view, words_cover,
)
from tools_app.services.approvals.identity import call_identity
from tools_app.workspace import workspace_for

logger = logging.getLogger("goclaw.approvals")


# --- allow-always rules -----------------------------------------------------------------------------
def _has_secret(value: Any) -> bool:
    return default_scrubber.scrub_data(value)[1] > 0 or REDACTED in json.dumps(value, ensure_ascii=False)


def _rule_workspace(req: ApprovalRequest):
    """The workspace the request's calls run in (paths of a rule are judged against it)."""
    try:
        return workspace_for(req.agent, call_identity(req)["user_id"])
    except Exception:  # no usable workspace: path checks fail closed
        logger.exception("approval %s: no workspace for the rule check", req.pk)
        return None


def _invalid(message: str) -> ValidationError:
    return ValidationError(message, code="invalid_rule")


def _exec_rule_scope(req: ApprovalRequest, match: str, pattern: Any, command: str) -> tuple[str, list[str]]:
    """Validate a widened exec rule against the approved command; (the pattern as kept, the effects its further
    arguments may have). Refused: fewer than two fixed words, an unclassified program, an approved command that is
    not one plain command or whose arguments run programs, change configuration, upload or reach outside."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise _invalid(f"a {match} rule needs a pattern")
    if _has_secret(pattern) or _has_secret(command):
        raise _invalid("the approved command contains a secret: only an exact rule is possible (rules are shown in clear)")
    wp = WordPattern.parse(match, pattern)
    if wp.literal < 2:
        raise _invalid("a widened rule must fix more than the program name (e.g. 'git push origin')")
    program = wp.words[0]
    if "/" in program:
        raise _invalid("name the program as a word on its own (e.g. git), not by a path")
    if program not in PROGRAMS:
        raise _invalid(f"goclaw cannot tell what the arguments of `{program}` do, so only an exact rule is possible")
    view, why = single_command_view(command)
    if view is None:
        raise _invalid(f"only an exact rule is possible for this command: {why}")
    escapes = _path_judge(_rule_workspace(req), req.arguments.get("working_dir"))
    if escapes is None:
        raise _invalid("the approved command runs outside the workspace: only an exact rule is possible")
    if not wp.matches(view.argv):
        raise _invalid(f"the pattern must cover the approved command (as it runs: {shlex.join(view.argv)})")
    problem = words_cover(wp, view.argv, escapes, allowed=INHERITABLE_EFFECTS)
    if problem:
        raise _invalid(f"only an exact rule is possible for this command: {problem}")
    free = sorted({kind for kind, i in command_effects(view.argv, escapes) if i >= wp.literal} & INHERITABLE_EFFECTS)
    return pattern, free


def _rule_fields(req: ApprovalRequest, *, match: str, pattern: Any, user_only: bool,
                 expires_at: datetime | None) -> dict:
    """The ApprovalRule an allow-always decision would create (validated, with its description); nothing is saved."""
    if req.details.get("always_require_approval"):
        raise ValidationError(f"{req.tool_name} needs a person's approval for every call: allow always is not possible",
                              code="rule_not_allowed")
    match = match or RuleMatch.EXACT
    if match not in RuleMatch.values:
        raise _invalid(f"rule match must be one of {', '.join(RuleMatch.values)}")
    command = req.details.get("command")
    args_hash, free_effects = "", []
    if match == RuleMatch.EXACT:
        if command is not None:
            if pattern not in (None, "", command, normalize_command(command)):
                raise _invalid("an exact rule covers the approved command as it is")
            pattern = command
        else:
            pattern = canonical_arguments(req.arguments)
        args_hash = req.args_hash  # binds every argument: for exec the command, working_dir and timeout
    elif command is not None:
        pattern, free_effects = _exec_rule_scope(req, match, pattern, command)
    elif match == RuleMatch.GLOB:
        try:
            globs = json.loads(pattern) if isinstance(pattern, str) else pattern
        except ValueError:
            raise _invalid("a glob rule pattern must be a JSON object") from None
        if not isinstance(globs, dict) or set(globs) != set(req.arguments):
            raise _invalid("a glob rule is a JSON object with exactly the call's argument names (string values may be "
                           "globs) that matches the approved call")
        globs = {name: clean_path_pattern(value) if isinstance(value, str) and is_path_argument(name) else value
                 for name, value in globs.items()}
        if _has_secret(globs):
            raise _invalid("the pattern contains a secret; rules are shown in clear")
        if not arguments_glob_match(globs, req.arguments, _rule_workspace(req)):
            raise _invalid("the glob rule must match the approved call (paths are compared after normalising them "
                           "inside the workspace)")
        pattern = canonical_arguments(globs)
    else:
        raise _invalid("prefix rules are for commands only")
    fields = {"agent": req.agent, "user_id": req.user_id if user_only else "", "tool_name": req.tool_name,
              "match": match, "pattern": pattern, "args_hash": args_hash, "free_effects": free_effects,
              "expires_at": expires_at}
    fields["description"] = describe_rule(**fields, command_rule=command is not None, arguments=req.arguments)
    return fields


_NOT_COVERED_SHELL = ("Also asked again: anything else in the same command (`;`, `&&`, pipes, redirections, `$…` or "
                      "backquote expansions, unquoted globs or `~`), environment variable assignments, another path to "
                      "the program (`./git`), and wrappers other than `timeout`, `nice`, `nohup`, `time`, a bare "
                      "`env` or `command`, and a plain `sh -c` / `bash -c`.")


def describe_rule(*, agent: Agent, user_id: str, tool_name: str, match: str, pattern: str, free_effects: list,
                  expires_at: datetime | None, command_rule: bool, arguments: dict | None = None, **_: Any) -> str:
    """One paragraph saying exactly what an allow-always rule covers, for the person creating it (and the admin)."""
    who = f"agent {agent.key}, " + (f"user {user_id} only" if user_id else "any of its users")
    until = f"until {timezone.localtime(expires_at):%Y-%m-%d %H:%M %Z}" if expires_at else "until revoked"
    scope = f"({who}; {until})"
    if match == RuleMatch.EXACT and command_rule:
        args = arguments or {}
        where = f"working directory `{args['working_dir']}`" if args.get("working_dir") else "the workspace root"
        timeout = f"a timeout of {args['timeout']} s" if args.get("timeout") is not None else "the default timeout"
        return (f"Covers exactly this `{tool_name}` call again: `{pattern}` in {where} with {timeout} {scope}. Any other "
                "command text (even one more space), working directory or timeout is asked again.")
    if match == RuleMatch.EXACT:
        return (f"Covers exactly this `{tool_name}` call again, with the arguments {pattern} {scope} (values shown as "
                "[REDACTED] are bound by their hash). Any other argument or value is asked again.")
    if command_rule:
        try:
            wp = WordPattern.parse(match, pattern)
        except ValidationError:
            return f"An unreadable {match} rule ({pattern!r}): it covers nothing."
        shape = f"`{shlex.join(wp.words[:wp.literal])}`"
        globs = wp.words[wp.literal:]
        if globs:
            shape += " then " + ", then ".join(f"one argument matching `{g}` (`*`/`?` stay within one path segment)"
                                               for g in globs)
        shape += ", followed by any further arguments" if wp.rest else ", with no further arguments"
        allowed = [k for k in (WRITE, DELETE) if k in (free_effects or [])]
        refused = [EFFECT_TEXT[k] for k in EFFECT_TEXT if k not in allowed]
        text = (f"Covers `{tool_name}` commands that are one call of {shape}, in any directory of the agent's workspace "
                f"and with any timeout {scope}. The arguments after the fixed words may not: " + "; ".join(refused) +
                " — such a command is asked again.")
        if allowed:
            text += (" They may " + " and ".join(EFFECT_TEXT[k].split(" (")[0] for k in allowed) +
                     " inside the workspace, as the approved command's did.")
        return text + " " + _NOT_COVERED_SHELL
    try:
        globs = json.loads(pattern)
    except ValueError:
        globs = None
    if not isinstance(globs, dict):
        return f"An unreadable glob rule ({pattern!r}): it covers nothing."
    parts = []
    for name, value in sorted(globs.items()):
        if isinstance(value, str) and is_path_argument(name):
            parts.append(f"`{name}` is a path that, normalised inside the workspace (`.`, `..` and symlinks resolved; a "
                         f"path leaving the workspace never matches), matches `{value}` (`*`, `?` and `[…]` stay within "
                         "one path segment, `**` spans whole segments)")
        elif value == "*":
            parts.append(f"`{name}` is any text")
        elif isinstance(value, str):
            parts.append(f"`{name}` matches the text glob `{value}` (wildcards stay between `/`)")
        else:
            parts.append(f"`{name}` equals {json.dumps(value, ensure_ascii=False)}")
    return (f"Covers `{tool_name}` calls {scope} with exactly these arguments: " + "; ".join(parts) +
            ". A call with other or more arguments is asked again.")


def approval_rule_description(rule: ApprovalRule) -> str:
    """The stored description, or one made now for rules created before descriptions were kept."""
    if rule.description:
        return rule.description
    source = rule.created_from
    command_rule = bool(source and source.details.get("command") is not None) or (
        rule.match != RuleMatch.EXACT and not rule.pattern.lstrip().startswith("{"))
    return describe_rule(agent=rule.agent, user_id=rule.user_id, tool_name=rule.tool_name, match=rule.match,
                         pattern=rule.pattern, free_effects=rule.free_effects, expires_at=rule.expires_at,
                         command_rule=command_rule, arguments=source.arguments if source else None)


def approval_rule_payload(rule: ApprovalRule) -> dict:
    """What the API answers about a rule: its scope and, in `covers`, exactly what it allows."""
    return {"id": rule.pk, "tool": rule.tool_name, "match": rule.match, "pattern": rule.pattern,
            "user_id": rule.user_id, "expires_at": rule.expires_at, "free_effects": list(rule.free_effects or []),
            "covers": approval_rule_description(rule)}


def approval_rule_preview(*, approval_id, match: str = RuleMatch.EXACT, pattern: Any = None, user_only: bool = False,
                          expires_at: datetime | None = None) -> dict:
    """What allow-always with this rule would cover, without deciding (the admin shows it before confirming).
    Raises the same ValidationError the decision would."""
    req = ApprovalRequest.objects.select_related("agent").filter(pk=approval_id).first()
    if req is None:
        raise NotFound("no such approval request", code="approval_not_found")
    fields = _rule_fields(req, match=match, pattern=pattern, user_only=user_only, expires_at=expires_at)
    return {"match": fields["match"], "pattern": fields["pattern"], "user_only": bool(fields["user_id"]),
            "expires_at": expires_at, "free_effects": fields["free_effects"], "covers": fields["description"]}


def approval_rule_create(req: ApprovalRequest, *, actor, match: str, pattern: Any, user_only: bool,
                 expires_at: datetime | None) -> ApprovalRule:
    fields = _rule_fields(req, match=match, pattern=pattern, user_only=user_only, expires_at=expires_at)
    return ApprovalRule.objects.create(**fields, created_by=actor if getattr(actor, "pk", None) else None,
                                       created_from=req)


def _rule_matches(rule: ApprovalRule, tool: Tool, args: dict, workspace=None) -> bool:
    """exact: the hash of every argument (exec: command, working_dir, timeout). prefix/glob on exec: the analysed
    command (words_cover). glob on other tools: arguments_glob_match on normalised paths. Anything unreadable: no."""
    if rule.match == RuleMatch.EXACT:
        return bool(rule.args_hash) and rule.args_hash == arguments_hash(tool.name, args)
    command = tool.command_for(args)
    if command is not None:
        try:
            wp = WordPattern.parse(rule.match, rule.pattern)
        except ValidationError:
            return False
        if wp.literal < 2 or "/" in wp.words[0]:
            return False
        view, _ = single_command_view(command)
        escapes = _path_judge(workspace, args.get("working_dir"))
        if view is None or escapes is None:
            return False
        allowed = frozenset(rule.free_effects or ()) & INHERITABLE_EFFECTS
        return words_cover(wp, view.argv, escapes, allowed=allowed) is None
    if rule.match == RuleMatch.GLOB:
        try:
            return arguments_glob_match(json.loads(rule.pattern), args, workspace)
        except (ValueError, TypeError):
            return False
    return False


def approval_rule_match(*, agent: Agent, tool: Tool, args: dict, user_id: str, workspace=None) -> ApprovalRule | None:
    """The first active rule of this agent (and user) that covers this call; its use is counted atomically."""
    now = timezone.now()
    rules = (ApprovalRule.objects.filter(agent=agent, tool_name=tool.name, revoked_at__isnull=True)
             .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now)).filter(Q(user_id="") | Q(user_id=user_id))
             .order_by("created_at"))
    for rule in rules:
        if _rule_matches(rule, tool, args, workspace):
            ApprovalRule.objects.filter(pk=rule.pk).update(use_count=F("use_count") + 1, last_used_at=now)
            return rule
    return None


@transaction.atomic
def approval_rule_revoke(*, rule: ApprovalRule, actor) -> ApprovalRule:
    ApprovalRule.objects.filter(pk=rule.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now(), revoked_by=actor if getattr(actor, "pk", None) else None)
    rule.refresh_from_db()
    return rule


