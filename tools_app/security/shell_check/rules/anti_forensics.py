"""Rule group `anti_forensics`: Erasing traces: shell history clearing/disabling, tampering with auth/audit logs and
wtmp.
"""
from __future__ import annotations

import re

from ..command import home_relative, normalize_path, short_flags, written_paths
from ..vocabulary import HIST_FILES, HIST_VARS, SEC_LOGS, shown
from .base import Rule, RuleGroup

GROUP = RuleGroup(
    "anti_forensics",
    "Erasing traces: shell history clearing/disabling, tampering with auth/audit logs and wtmp.",
)


def _hist_value_off(k: str, v: str) -> bool:
    v = v.strip("'\"")
    if k == "HISTFILE":
        return True
    if k == "HISTIGNORE":
        return v in ("*", "*:*", "'*'")
    return v in ("", "0") or v.startswith("-")


_TIME_UNITS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800, "month": 2629800, "months": 2629800,
               "y": 31557600, "year": 31557600, "years": 31557600, "": 1, "us": 1e-6, "ms": 1e-3}
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3, "t": 1024 ** 4}


def _vacuums_everything(a: list) -> bool:
    """`journalctl --vacuum-time=2d` keeps two days of logs (retention, everyday maintenance); `--vacuum-time=1s`,
    `--vacuum-size=1` or `--vacuum-files=1` erases the journal. Less than a day, 1 MiB or two files is erasure, as is a
    value we cannot read."""
    for i, x in enumerate(a):
        if not x.startswith("--vacuum-"):
            continue
        key, _, val = x.partition("=")
        if not val and i + 1 < len(a):
            val = a[i + 1]
        m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([a-zA-Z]*)", val.strip())
        if not m:
            return True
        n, unit = float(m.group(1)), m.group(2).lower()
        if key == "--vacuum-time":
            unit = unit[:-1] if unit.endswith("s") and unit not in ("s", "us", "ms") else unit
            unit = {"second": "s", "minute": "min", "hour": "h", "day": "d", "week": "w"}.get(unit, unit)
            if unit not in _TIME_UNITS or n * _TIME_UNITS[unit] < 86400:
                return True
        elif key == "--vacuum-size":
            if unit[:1] not in _SIZE_UNITS or n * _SIZE_UNITS[unit[:1]] < 1024 ** 2:
                return True
        elif key == "--vacuum-files" and n < 2:
            return True
    return False


def erases_traces(analysis, c):
    """Clearing or disabling shell history and tampering with auth/audit logs hides what was done."""
    nm, a = c.name, c.args
    out = []
    if nm == "history" and set(short_flags(a)) & set("cdw"):
        out.append((f"history {' '.join(a)[:20]} erases/rewrites shell history", True))
    if nm == "unset" and set(a) & HIST_VARS:
        out.append(("unset disables shell history", True))
    if nm == "set" and "+o" in a and "history" in a:
        out.append(("set +o history disables shell history", True))
    for k, v in c.assigns.items():
        if k in HIST_VARS and _hist_value_off(k, v):
            out.append((f"sets {k}={shown(v)} to disable history", True))
    for t in written_paths(c) + ([a[-1]] if nm == "ln" and a else []):
        h, n = home_relative(t), normalize_path(t)
        if (h and h[2:] in HIST_FILES) or n in SEC_LOGS or n.startswith(tuple(x + "/" for x in SEC_LOGS)) or re.match(r"/var/log/(wtmp|btmp|auth\.log|secure|syslog|messages)[.*\d-]", n):
            out.append((f"tampers with {shown(t)}", True))
            break
    if nm == "journalctl" and _vacuums_everything(a):
        out.append(("journalctl --vacuum deletes (nearly) all of the system journal", True))
    if nm.lower().removesuffix(".exe") == "wevtutil" and set(x.lower() for x in a) & {"cl", "clear-log", "sl"}:
        out.append(("wevtutil clears Windows event logs", True))
    if c.icode and re.search(r"Clear-EventLog|Remove-EventLog|Clear-History", c.icode, re.I):
        out.append(("PowerShell clears event logs/history", True))
    return out


RULES = (
    Rule(
        "erases_traces",
        GROUP.name,
        "Clearing or disabling shell history, tampering with auth/audit logs, clearing Windows event logs.",
        erases_traces,
    ),
)
