"""Rule group `privilege_escalation`: sudo/su/doas/pkexec, setuid bits, mount, kernel modules, user and sudoers/shadow
changes.
"""
from __future__ import annotations

import re

from ..command import normalize_path, operands, short_flags, written_paths
from ..vocabulary import PRIVILEGE_TOOLS, SHELLS, interpreter_name, word_set
from .base import Rule, RuleGroup

GROUP = RuleGroup(
    "privilege_escalation",
    "sudo/su/doas/pkexec, setuid bits, mount, kernel modules, user and sudoers/shadow changes.",
)


def changes_privileges(analysis, c):
    nm, a = c.name, c.args
    if nm == "sudo" and a and set(a) <= {"-l", "-ll", "--list", "-k", "-K", "--reset-timestamp", "--remove-timestamp"}:
        return []  # lists what sudo would allow, or forgets cached credentials: runs nothing as anyone
    w = [x for x in c.wrappers if x in PRIVILEGE_TOOLS]
    if w:
        return [(f"runs via {w[0]}", True)]
    if nm in PRIVILEGE_TOOLS:
        return [(f"{nm} changes identity/privileges", True)]
    if (nm in SHELLS or interpreter_name(nm) in SHELLS) and "p" in short_flags(a[:next((i for i, x in enumerate(a) if not x.startswith(("-", "+"))), len(a))]):
        return [(f"{nm} -p keeps setuid privileges", True)]
    if nm == "find" and re.search(r"-perm\s+[-/+]?(u=s|g=s|[0-7]*[246]000|-u=s)", " ".join(a)):
        return [("searches for setuid binaries (privilege-escalation recon)", False)]
    if nm == "rsync" and any(re.match(r"^(sudo|doas|su|pkexec)\b", v) for i, x in enumerate(a) for v in [a[i + 1] if x == "--rsync-path" and i + 1 < len(a) else x.split("=", 1)[1] if x.startswith("--rsync-path=") else ""]):
        return [("rsync --rsync-path runs the remote side via sudo", True)]
    if nm == "mount" and operands(a, word_set("-t -o -L -U")) or nm == "umount":
        return [(f"{nm} changes mounts", True)]
    if nm == "chmod":
        mode = next((x for x in a if not x.startswith("-") or re.fullmatch(r"-[rwxXst]+", x)), "")
        if re.fullmatch(r"0*[2-7][0-7]{3}", mode) and int(mode[-4]) & 6 or re.search(r"[ugoa]*[+=][rwxXt]*s", mode):
            return [(f"chmod sets setuid/setgid bit ({mode})", True)]
    for t in written_paths(c):
        if normalize_path(t).startswith(("/etc/sudoers", "/etc/shadow", "/etc/passwd", "/etc/group", "/etc/gshadow")):
            return [(f"modifies {normalize_path(t)}", True)]
    return []


RULES = (
    Rule(
        "changes_privileges",
        GROUP.name,
        "sudo/su/doas/pkexec, privilege tools, setuid bits, mounts, sudoers/shadow/passwd edits.",
        changes_privileges,
    ),
)
