"""Rule group `system_power`: shutdown/reboot/halt/poweroff, init 0/6, systemctl power verbs, sysrq-trigger.
"""
from __future__ import annotations

import re

from ..command import normalize_path, written_paths
from ..vocabulary import POWER, word_set
from ..windows import windows_statements
from .base import Rule, RuleGroup

GROUP = RuleGroup(
    "system_power",
    "shutdown/reboot/halt/poweroff, init 0/6, systemctl power verbs, sysrq-trigger.",
)


def changes_power_state(analysis, c):
    nm, a = c.name, c.args
    if nm == "shutdown" and (set(a) & {"-c", "--cancel", "/a", "/A"} or "-k" in a and not _has_power_flag(a)):
        return []  # `shutdown -c` cancels a pending shutdown, `shutdown -k` only warns logged-in users
    if nm in POWER or (nm in ("init", "telinit") and a[:1] in (["0"], ["6"], ["1"], ["s"])) or \
            (nm in ("systemctl", "loginctl") and set(a) & word_set("poweroff reboot halt suspend hibernate hybrid-sleep kexec rescue emergency soft-reboot")):
        return [(f"{nm} {' '.join(a)[:30]} changes power state", True)]
    if any(normalize_path(t).startswith("/proc/sysrq-trigger") for t in written_paths(c)):
        return [("writes /proc/sysrq-trigger", True)]
    return []


def _has_power_flag(a: list) -> bool:
    """`shutdown -k -r now` still reboots: -r/-h/-H/-P (or their long forms) act even next to -k."""
    return any(x in ("--reboot", "--halt", "--poweroff") or x.startswith("-") and not x.startswith("--") and set(x[1:]) & set("rhHP") for x in a)


_WINDOWS_SHUTDOWN_ACTS = frozenset("/s /r /p /h /g /sg /l /hybrid /fw /o -s -r -p -h -g -l".split())


def windows_power_change(analysis, c):
    """Windows power control: `shutdown /s|/r|/p|/h` (not `/a`, which aborts), Stop-/Restart-Computer, psshutdown,
    rundll32 SetSuspendState and WMI shutdown calls, bare or via cmd /c, pwsh -c, -EncodedCommand."""
    if c.name in POWER:
        return []  # the Unix rule above already judges `shutdown ..` itself
    for st in windows_statements(c):
        nm, low = st[0], [a.lower() for a in st[1:]]
        text = " ".join(low)
        if (nm == "shutdown" and set(low) & _WINDOWS_SHUTDOWN_ACTS and not set(low) & {"/a", "/?", "-a"}) or \
                nm in ("stop-computer", "restart-computer") or (nm == "psshutdown" and not set(low) & {"-a", "-?", "/?"}) or \
                (nm == "rundll32" and re.search(r"setsuspendstate|exitwindowsex", text)) or \
                (nm in ("wmic", "invoke-cimmethod", "invoke-wmimethod") and re.search(r"\b(win32shutdown|shutdown|reboot)\b", text) and "os" in text):
            return [(f"{nm} {' '.join(low)[:30]} changes power state", True)]
    return []


RULES = (
    Rule(
        "changes_power_state",
        GROUP.name,
        "shutdown/reboot/halt/poweroff, init 0/6, systemctl power verbs, sysrq-trigger writes.",
        changes_power_state,
    ),
    Rule(
        "windows_power_change",
        GROUP.name,
        "Windows shutdown /s /r /p /h, Stop-Computer, Restart-Computer, psshutdown, rundll32 SetSuspendState, WMI "
        "shutdown, bare or via cmd /c, pwsh -c, -EncodedCommand.",
        windows_power_change,
    ),
)
