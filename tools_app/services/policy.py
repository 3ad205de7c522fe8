"""Tool policies, profiles and permissions: their checks (malformed entries are errors, unknown names are warnings,
since an MCP server or custom tool may register them later; the same for the `resources` / `prompts` sections) and
their only writers, which also invalidate every process's catalogs (tools_app.policy.policy_changed) inside the
writing transaction."""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.db.models import Model, ProtectedError, QuerySet

from goclaw.errors import Conflict, ValidationError
from tools_app.models import ToolPermission, ToolPolicy, ToolProfile
from tools_app.policy import policy_changed
from tools_app.registry import ToolRegistry, registry

logger = logging.getLogger(__name__)

_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,128}$")
_GROUP_RE = re.compile(r"^group:[A-Za-z0-9_.\-]+(:[A-Za-z0-9_.\-]+)*$")


@dataclass
class SpecCheck:
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def policy_list_check(label: str, value: Any, *, allow_star: bool = False, reg: ToolRegistry = registry,
                      check: SpecCheck | None = None) -> SpecCheck:
    """Validate one list of tool names / `group:x` entries."""
    check = check or SpecCheck()
    if not isinstance(value, list):
        check.errors.append(f"{label}: must be a list of tool names or group:<name> entries")
        return check
    groups = reg.groups()
    for entry in value:
        if not isinstance(entry, str):
            check.errors.append(f"{label}: {entry!r} is not a string")
        elif entry == "*":
            if not allow_star:
                check.errors.append(f"{label}: '*' is only allowed in profiles")
        elif entry.startswith("group:"):
            if not _GROUP_RE.match(entry):
                check.errors.append(f"{label}: {entry!r} is not a valid group reference")
            elif entry[6:] not in groups:
                check.warnings.append(f"{label}: unknown group {entry!r} (no registered tool is in it yet)")
        elif not _NAME_RE.match(entry):
            check.errors.append(f"{label}: {entry!r} is not a valid tool name")
        elif reg.get(entry) is None:
            check.warnings.append(f"{label}: unknown tool {entry!r} (not registered now)")
    if isinstance(value, list) and len({v for v in value if isinstance(v, str)}) != len(value):
        check.warnings.append(f"{label}: contains duplicates")
    return check


def policy_spec_check(*, allow: Any, deny: Any, also_allow: Any, reg: ToolRegistry = registry) -> SpecCheck:
    check = SpecCheck()
    for label, value in (("allow", allow), ("deny", deny), ("also_allow", also_allow)):
        policy_list_check(label, value, reg=reg, check=check)
    if isinstance(allow, list) and isinstance(deny, list):
        both = sorted(set(reg.expand([a for a in allow if isinstance(a, str)])) & set(reg.expand([d for d in deny if isinstance(d, str)])))
        if both:
            check.warnings.append(f"in both allow and deny (deny wins): {', '.join(both)}")
    return check


CONTENT_PATTERNS_MAX = 100
CONTENT_PATTERN_MAX_CHARS = 500
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_URI_PREFIX = "goclaw://"


def policy_content_check(kind: str, value: Any, *, check: SpecCheck | None = None) -> SpecCheck:
    """A spec's `resources` or `prompts` section: empty, or {"allow": [globs], "deny": [globs]} (resource URIs such
    as goclaw://memory/*, prompt names such as pdf-*). A resource pattern that cannot match a goclaw URI is a
    warning (it restricts nothing, or in an allow list everything)."""
    check = check or SpecCheck()
    if value is None or value == {}:
        return check
    if not isinstance(value, dict):
        check.errors.append(f'{kind}: must be an object {{"allow": [patterns], "deny": [patterns]}}')
        return check
    for key in sorted(set(value) - {"allow", "deny"}, key=str):
        check.errors.append(f"{kind}: unknown key {str(key)[:40]!r} (only allow and deny)")
    for key in ("allow", "deny"):
        patterns = value.get(key, [])
        where = f"{kind}.{key}"
        if not isinstance(patterns, list):
            check.errors.append(f"{where}: must be a list of patterns")
            continue
        if len(patterns) > CONTENT_PATTERNS_MAX:
            check.errors.append(f"{where}: at most {CONTENT_PATTERNS_MAX} patterns")
        for pattern in patterns:
            if not isinstance(pattern, str) or not pattern.strip():
                check.errors.append(f"{where}: {pattern!r} is not a non-empty string")
            elif len(pattern) > CONTENT_PATTERN_MAX_CHARS or _CONTROL_RE.search(pattern):
                check.errors.append(f"{where}: {pattern[:60]!r} is longer than {CONTENT_PATTERN_MAX_CHARS} characters "
                                    "or holds control characters")
            elif kind == "resources" and not pattern.startswith(_URI_PREFIX) and pattern[0] not in "*?[":
                check.warnings.append(f"{where}: {pattern[:60]!r} matches no resource (their URIs start with "
                                      f"{_URI_PREFIX}context/ or {_URI_PREFIX}memory/)")
    return check


def tool_profile_check(tools: Any) -> SpecCheck:
    """A profile's list may hold `*` (every tool)."""
    return policy_list_check("tools", tools, allow_star=True)


def tool_permission_check(tool: Any) -> SpecCheck:
    """A permission names one tool or `group:<name>`."""
    return policy_list_check("tool", [tool])


# --- writes: every change to a policy, profile or permission goes through these ---------------------------
def _checked_save(obj: Model, check: SpecCheck, *, actor, code: str, what: str) -> list[str]:
    """Validate (model constraints, then the spec check), save, and drop every process's catalogs with the
    change. Returns the spec check's warnings (unknown names): an MCP server may register them later."""
    try:
        obj.full_clean()
    except DjangoValidationError as exc:
        raise ValidationError(f"invalid {what}", code=code, details=exc.message_dict) from None
    if check.errors:
        raise ValidationError(f"invalid {what}", code=code, details=check.errors)
    obj.save()
    policy_changed()
    logger.info("%s saved %s %s", actor_name(actor), what, obj)
    return check.warnings


def _checked_delete(queryset: QuerySet, *, actor, what: str) -> int:
    """Delete the rows (and what cascades from them) and drop every process's catalogs with the change."""
    count, _ = queryset.delete()
    if count:
        policy_changed()
        logger.info("%s deleted %d %s row(s)", actor_name(actor), count, what)
    return count


def actor_name(actor) -> str:
    """Who made a change, for the log: a user's name, or "system" (management commands, tests, migrations)."""
    return getattr(actor, "get_username", lambda: "system")()


@transaction.atomic
def tool_policy_save(*, actor, policy: ToolPolicy) -> tuple[ToolPolicy, list[str]]:
    """Create or update one policy spec; malformed lists are a ValidationError, unknown names come back as warnings."""
    check = policy_spec_check(allow=policy.allow, deny=policy.deny, also_allow=policy.also_allow)
    for kind in ("resources", "prompts"):
        policy_content_check(kind, getattr(policy, kind), check=check)
    return policy, _checked_save(policy, check, actor=actor, code="invalid_tool_policy", what="tool policy")


@transaction.atomic
def tool_policy_delete(*, actor, queryset: QuerySet[ToolPolicy]) -> int:
    """Delete policy specs (the admin's delete page and bulk action both come here)."""
    return _checked_delete(queryset, actor=actor, what="tool policy")


@transaction.atomic
def tool_profile_save(*, actor, profile: ToolProfile) -> tuple[ToolProfile, list[str]]:
    """Create or update a named starting set of tools (`*` = every tool)."""
    check = tool_profile_check(profile.tools)
    return profile, _checked_save(profile, check, actor=actor, code="invalid_tool_profile", what="tool profile")


@transaction.atomic
def tool_profile_delete(*, actor, queryset: QuerySet[ToolProfile]) -> int:
    """Policies protect the profiles they use: deleting one still in use is a Conflict."""
    try:
        return _checked_delete(queryset, actor=actor, what="tool profile")
    except ProtectedError as exc:
        users = sorted({str(p) for p in exc.protected_objects})
        raise Conflict("a profile in use by a policy cannot be deleted", code="tool_profile_in_use", details=users) from None


@transaction.atomic
def tool_permission_save(*, actor, permission: ToolPermission) -> tuple[ToolPermission, list[str]]:
    """Create or update one allow / ask / deny entry for a tool name or `group:<name>`."""
    check = tool_permission_check(permission.tool)
    return permission, _checked_save(permission, check, actor=actor, code="invalid_tool_permission", what="tool permission")


@transaction.atomic
def tool_permission_delete(*, actor, queryset: QuerySet[ToolPermission]) -> int:
    """Delete permission entries: the tools they covered fall back to the next scope (or to the mode's default)."""
    return _checked_delete(queryset, actor=actor, what="tool permission")
