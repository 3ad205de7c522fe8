"""Rule group `persistence`: crontab installs and writes to shell rc files, authorized_keys, cron/systemd/rc.local.
"""
from __future__ import annotations

from ..command import is_persistence_path, written_paths
from ..vocabulary import shown
from .base import Rule, RuleGroup

GROUP = RuleGroup(
    "persistence",
    "crontab installs and writes to shell rc files, authorized_keys, cron/systemd/rc.local.",
)


def installs_persistence(analysis, c):
    out = [(f"writes {shown(t)}", True) for t in written_paths(c) if is_persistence_path(t)][:1]
    if c.name == "crontab" and not any(x in ("-l", "-u") and x == "-l" for x in c.args) and "-l" not in c.args:
        out.append(("crontab installs/changes scheduled jobs", True))
    if c.name in ("at", "batch") or (c.name in ("systemctl", "launchctl") and c.args[:1] in (["enable"], ["load"], ["link"])):
        out.append((f"{c.name} schedules/enables a service", False))
    return out


RULES = (
    Rule(
        "installs_persistence",
        GROUP.name,
        "Writes to shell rc files, authorized_keys, cron/systemd/autostart; crontab installs; service enables (observe).",
        installs_persistence,
    ),
)
