"""Rule group `destructive_ops`: Recursive deletes / chmod / chown / find -delete / mv aimed at /, ~, system dirs or
empty-able $VAR/.
"""
from __future__ import annotations

import re

from ..command import normalize_path, operands, short_flags, why_critical
from ..vocabulary import UNKNOWN_OUTPUT, UNKNOWN_VALUE, shown, word_set
from ..windows import DELETE_NAMES, windows_critical, windows_statements
from .base import Rule, RuleGroup

GROUP = RuleGroup(
    "destructive_ops",
    "Recursive deletes / chmod / chown / find -delete / mv aimed at /, ~, system dirs or empty-able $VAR/.",
)


def recursive_delete_of_critical_path(analysis, c):
    if c.name not in ("rm", "srm"):
        return []
    rec = bool(re.search(r"[rR]", short_flags(c.args))) or "--recursive" in c.args
    out = [("rm --no-preserve-root", True)] if "--no-preserve-root" in c.args else []
    for t in map(c.path, operands(c.args)):
        why = why_critical(t)
        if why and (rec or "*" in t or t in ("/", "~")):
            out.append((f"rm{' -r' if rec else ''} targets {shown(t)} ({why})", True))
        elif rec and (UNKNOWN_VALUE in t or UNKNOWN_OUTPUT in t) and not why:
            out.append((f"rm -r of unresolved path {shown(t)}", False))
    return out


def destructive_find_chmod_mv_rsync(analysis, c):
    nm, a = c.name, c.args
    if nm == "find":
        roots = [c.path(x) for x in a[:next((i for i, x in enumerate(a) if x.startswith(("-", "(", "!"))), len(a))]]
        if any(why_critical(r) for r in roots) and ("-delete" in a or any(x in a for x in ("-exec", "-execdir", "-ok")) and
                                                  any(x in ("rm", "/bin/rm", "shred", "unlink", "mv", "truncate") for x in a)):
            return [(f"find {shown(roots[0])} deletes files", True)]
    if nm in ("chmod", "chown", "chgrp"):
        rec = "R" in short_flags(a) or "--recursive" in a
        for t in map(c.path, operands(a, word_set("--reference"))[1:]):
            why = why_critical(t)
            if why and (rec or normalize_path(t) in ("/", "~") or why == "filesystem root"):
                if why in ("home credentials/config", "home directory") and _self_only(nm, a):
                    continue  # chmod -R go-rwx ~/.ssh tightens; chown -R $USER ~/.config gives back to the user
                return [(f"{nm}{' -R' if rec else ''} on {shown(t)} ({why})", True)]
    if nm == "mv":
        ops = operands(a, word_set("-t -S"))
        if any(why_critical(t) for t in ops[:-1]) or (ops and ops[-1] == "/dev/null"):
            return [(f"mv of {shown(' '.join(ops))}", True)]
    if nm == "rsync" and any(x.startswith("--delete") for x in a):
        ops = operands(a, word_set("-e --rsh --exclude --include --filter"))
        if ops and why_critical(ops[-1]):
            return [(f"rsync --delete into {shown(ops[-1])}", True)]
    return []


def _self_only(nm: str, a: list) -> bool:
    """chmod that only removes group/other access (go-rwx, 700, 600, u=rwX,go=), or chown to the invoking user
    ($USER, $(id -u), $(whoami)): harmless on the user's own home directories."""
    ops = operands(a, word_set("--reference"))
    if not ops:
        return False
    mode = ops[0]
    if nm == "chmod":
        if re.fullmatch(r"0?[4-7]00", mode):
            return True
        clauses = mode.split(",")
        return all(re.fullmatch(r"[go]+-[rwxXst]+|[go]+=|u[+=][rwxX]+", x) for x in clauses) and any(x[0] in "go" for x in clauses)
    return bool(re.fullmatch(rf"[{UNKNOWN_VALUE}{UNKNOWN_OUTPUT}]([:.][{UNKNOWN_VALUE}{UNKNOWN_OUTPUT}])?:?", mode))


def _delete_targets(args: list) -> list:
    """Paths a del/rd/Remove-Item statement names: PowerShell style (`-Recurse -Force X`, `-Path X`) or cmd style
    (`/s /q X`, where words starting with `/` are switches)."""
    ps_style = any(a.startswith("-") for a in args)
    out = [args[i + 1] for i, a in enumerate(args[:-1]) if a.lower() in ("-path", "-literalpath", "-lp")]
    return out + [a for a in args if not a.startswith("-" if ps_style else ("/", "-")) and a not in out]


def windows_deletes_critical_path_or_backups(analysis, c):
    """cmd.exe and PowerShell deletes of a drive root, the Windows, Program Files or Users folders or a profile
    (`del /f /s /q C:\\*`, `rd /s /q %USERPROFILE%`, `Remove-Item -Recurse -Force C:\\Windows`), and destruction of
    shadow copies, backups and boot recovery (`vssadmin delete shadows`, `wbadmin delete catalog`, `bcdedit /set
    recoveryenabled no`) - however the statement arrives (bare, `cmd /c`, `pwsh -c`, `-EncodedCommand`)."""
    statements = windows_statements(c)
    for st in statements:
        nm, args = st[0], st[1:]
        low = [a.lower() for a in args]
        if nm in DELETE_NAMES:
            for t in _delete_targets(args):
                why = windows_critical(t)
                if why:
                    return [(f"{nm} deletes {shown(t)} ({why})", True)]
        elif (nm == "vssadmin" and ("delete" in low and "shadows" in low or "resize" in low and "shadowstorage" in low)) or \
                (nm == "wmic" and "shadowcopy" in low and "delete" in low) or (nm == "wbadmin" and low[:1] == ["delete"]) or \
                (nm == "bcdedit" and ("/delete" in low or "recoveryenabled" in low and "no" in low or "ignoreallfailures" in low)):
            return [(f"{nm} destroys shadow copies, backups or boot recovery", True)]
    text = (" ".join(c.argv) + " " + (c.icode or "")).lower() if statements else ""
    if "win32_shadowcopy" in text and re.search(r"\.delete\(|remove-(wmiobject|ciminstance)|\brwmi\b", text):
        return [("PowerShell deletes shadow copies", True)]
    return []


RULES = (
    Rule(
        "recursive_delete_of_critical_path",
        GROUP.name,
        "rm/srm (recursive or globbed) of /, ~, a system directory, home credentials, or a path an unset variable would turn into /.",
        recursive_delete_of_critical_path,
    ),
    Rule(
        "destructive_find_chmod_mv_rsync",
        GROUP.name,
        "find -delete / -exec rm, recursive chmod/chown/chgrp, mv and rsync --delete aimed at critical paths.",
        destructive_find_chmod_mv_rsync,
    ),
    Rule(
        "windows_deletes_critical_path_or_backups",
        GROUP.name,
        "cmd.exe/PowerShell deletes (del /f, rd /s, Remove-Item -Recurse) of drive roots, Windows, Program Files, "
        "Users or profile folders, and shadow-copy/backup/boot-recovery destruction, bare or via cmd /c, pwsh -c, "
        "-EncodedCommand.",
        windows_deletes_critical_path_or_backups,
    ),
)
