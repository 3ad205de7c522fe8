"""Checks for policy specs and profiles: malformed entries are errors, unknown names are warnings (an MCP
server or custom tool may register them later)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tools_app.registry import ToolRegistry, registry

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
