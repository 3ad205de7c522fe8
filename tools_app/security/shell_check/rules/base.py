"""The two records every rule group is built from: the group (a switch agents can turn off) and the rule."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class RuleGroup:
    name: str
    description: str
    default_enabled: bool = True


@dataclass(frozen=True)
class Rule:
    """One check of a rule group.

    `predicate(analysis, command)` runs once per analysed simple command (after unwrapping, including commands inside
    `$(..)`, `sh -c`, interpreter shell-outs ...); with `whole_line=True` it runs once as `predicate(analysis)` over the
    whole command line (pipelines, functions, loops, download-then-run chains). Either way it returns a list of
    `(reason, deny)` pairs: `deny=False` is observe-only (allowed, but flagged).

    `commands`, when given, lists the command names the rule is about; the check skips the predicate for any other
    command, which keeps narrow rules free for the thousands of commands they never concern."""

    name: str
    group: str
    description: str
    predicate: Callable
    whole_line: bool = False
    commands: frozenset | None = None
