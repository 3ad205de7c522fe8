"""Rule groups of the shell check, one module per group.

Each group module defines `GROUP` (a `RuleGroup`: the name agents can disable and what it covers) and `RULES` (a
tuple of `Rule` records: name, group, description, predicate). This package lists the modules in evaluation order;
reasons are reported in that order. See docs/shell-safety.md, "Adding a rule".
"""
from __future__ import annotations

from . import (
    anti_forensics,
    code_injection,
    container_escape,
    crypto_mining,
    dangerous_paths,
    data_exfiltration,
    destructive_ops,
    disk_write,
    env_dump,
    env_injection,
    filter_bypass,
    fork_bomb,
    network_recon,
    network_tunnel,
    package_install,
    persistence,
    privilege_escalation,
    process_control,
    reverse_shell,
    security_disable,
    system_power,
)
from .base import Rule, RuleGroup

GROUP_MODULES = (
    destructive_ops, data_exfiltration, reverse_shell, code_injection, privilege_escalation, dangerous_paths,
    env_injection, container_escape, crypto_mining, filter_bypass, network_recon, persistence, process_control,
    env_dump, fork_bomb, system_power, disk_write, package_install, anti_forensics, security_disable, network_tunnel,
)
RULE_GROUPS: dict[str, RuleGroup] = {m.GROUP.name: m.GROUP for m in GROUP_MODULES}
RULES: tuple[Rule, ...] = tuple(rule for m in GROUP_MODULES for rule in m.RULES)
# (group, per-command rules, whole-line rules), precomputed once for the evaluation loop.
RULES_BY_GROUP: tuple[tuple[str, tuple[Rule, ...], tuple[Rule, ...]], ...] = tuple(
    (m.GROUP.name, tuple(r for r in m.RULES if not r.whole_line), tuple(r for r in m.RULES if r.whole_line))
    for m in GROUP_MODULES
)


def _check_records() -> None:
    """Fail at import, not at check time, when a group module is inconsistent (wrong group name, duplicate rule)."""
    names = [r.name for r in RULES]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise ImportError(f"shell_check: duplicate rule names {sorted(dupes)}")
    for m in GROUP_MODULES:
        for r in m.RULES:
            if r.group != m.GROUP.name:
                raise ImportError(f"shell_check: rule {r.name} is in module {m.__name__} but names group {r.group}")


_check_records()

__all__ = ["GROUP_MODULES", "RULES", "RULES_BY_GROUP", "RULE_GROUPS", "Rule", "RuleGroup"]
