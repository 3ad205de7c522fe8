"""Rule group `package_install`: Package installs (observe only: approvals handle them elsewhere).
"""
from __future__ import annotations

from ..vocabulary import PACKAGE_INSTALL_VERBS
from .base import Rule, RuleGroup

GROUP = RuleGroup(
    "package_install",
    "Package installs (observe only: approvals handle them elsewhere).",
)


def installs_packages(analysis, c):
    verb = PACKAGE_INSTALL_VERBS.get(c.name)
    if verb and (verb in c.args or "install" in c.args or "add" in c.args or "i" in c.args[:1]):
        return [(f"{c.name} installs packages", False)]
    return []


RULES = (
    Rule(
        "installs_packages",
        GROUP.name,
        "Package installs (observe only: approvals handle them).",
        installs_packages,
    ),
)
