"""Differential test: the restructured shell check against the frozen pre-restructure implementation.

P7 turned the 2,700-line module into a package and then widened it. This test runs both on thousands of commands
generated from the corpora (wrapped, chained, prefixed with sudo, re-spaced, truncated, mixed) and asserts identical
results: the verdict, the observe flag, every reason and group, `extract_simple_commands` and `analyse_for_rules`.
The only differences allowed are the widening classes listed in INTENDED_CHANGES, each with the direction it may
change in and why. Delete this file and tests/tools_app/reference/shell_check_v1.py once they stop being useful.
"""
from __future__ import annotations

import random
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from tests.tools_app.reference import shell_check_v1 as reference
from tools_app.security import shell_check as current

CORPUS = Path(__file__).parent / "corpus"


def _load(name: str) -> list[str]:
    return [ln for ln in (CORPUS / name).read_text(encoding="utf-8").splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


@dataclass(frozen=True)
class IntendedChange:
    """A class of commands whose verdict the widening changes on purpose."""

    name: str
    reason: str
    direction: str  # "deny" (was allowed, now denied) or "allow" (was denied, now allowed)
    matches: Callable[[str], bool]


def _rx(pattern: str) -> Callable[[str], bool]:
    compiled = re.compile(pattern, re.I)
    return lambda cmd: bool(compiled.search(cmd))


# Every verdict the widening changes must fall in one of these classes, in the stated direction. A command still
# denied whose reasons changed must also fall in one (the new rule names itself, or replaced an older reason).
INTENDED_CHANGES: tuple[IntendedChange, ...] = (
    IntendedChange("information_request", "a bare --help/--version (or -h/-V where it means that for the tool) prints "
                   "usage and exits, also under sudo", "allow", _rx(r"(\s|^)(--help|--version|-h|-V|version)\b")),
    IntendedChange("list_status_dry_run", "list/status/print/dry-run/cancel modes change nothing: wipefs without -a, "
                   "zpool status, zfs destroy -n, flashrom -r, sgdisk -p, gdisk -l, shutdown -c and /a", "allow",
                   _rx(r"\b(wipefs|zpool|zfs|flashrom|sgdisk|gdisk|shutdown|mdadm|[lpv]v\w+|nvme|fwupd\w+|cryptsetup|"
                       r"efibootmgr)\b")),
    IntendedChange("encoded_powershell_by_content", "-EncodedCommand is decoded and judged; a readable script "
                   "that neither runs nor downloads code is no longer denied just for being encoded", "allow",
                   _rx(r"\s-(e|ec|enc|encodedcommand)\s")),
    IntendedChange("computed_pid_kill", "killing core services, root's or every process by PIDs from pgrep/pidof/ps "
                   "or pid files", "deny", _rx(r"\b(kill|pkill|killall|xargs)\b")),
    IntendedChange("core_service_stop", "systemctl/service stop of sshd, journald, dbus, networking ...", "deny",
                   _rx(r"\b(systemctl|service|sv|initctl|rc-service)\b")),
    IntendedChange("system_log_erasure", "journalctl --vacuum that keeps less than a day / 1 MiB / 2 files", "deny",
                   _rx(r"journalctl.*--vacuum")),
    IntendedChange("destructive_storage_tools", "wipers, partitioning, LVM, RAID metadata, zpool/zfs, nvme, firmware "
                   "flashing judged by mode", "deny",
                   _rx(r"\b(nwipe|sfill|sswap|scrub|dcfldd|dc3dd|wipefs|sgdisk|gdisk|pv(remove|create)|vg(remove|reduce)|"
                       r"lv(remove|reduce)|mdadm|zpool|zfs|nvme|flashrom|fwupd(mgr|tool)|cryptsetup|efibootmgr|sg_format|"
                       r"sg_sanitize|flash_erase)\b")),
    IntendedChange("wireless_mitm_tools", "Wi-Fi attack and LAN man-in-the-middle tools", "deny",
                   _rx(r"\b(aireplay-ng|airbase-ng|airmon-ng|airodump-ng|mdk[34]|reaver|bully|wifite|hcxdumptool|"
                       r"bettercap|ettercap|arpspoof|mitm6|pixiewps|wifiphisher)\b")),
    IntendedChange("windows_forms", "cmd.exe/PowerShell deletes, power, disk and process commands however delivered",
                   "deny", _rx(r"\b(del|erase|rd|rmdir|cmd|pwsh|powershell|format|diskpart|cipher|vssadmin|wmic|wbadmin|"
                               r"bcdedit|shutdown|taskkill|tskill|psshutdown|rundll32|stop-computer|restart-computer|"
                               r"remove-item|format-volume|clear-disk|initialize-disk|stop-process)(\.exe)?\b")),
    IntendedChange("fork_bombs", "fork bombs in other spellings and interpreter spawn loops", "deny",
                   _rx(r"fork|spawn|Popen|%0|until\s+false|for\s*\(\(|-P\s*0|child_process|Start-Process")),
)


def _mutations(dangerous: list[str], benign: list[str]) -> list[str]:
    """Deterministic variants of the corpus lines: the forms agents really send, plus noise around them."""
    rnd = random.Random(20261122)
    everything = dangerous + benign
    out: list[str] = []
    for cmd in everything:
        out += [cmd, "sudo " + cmd, cmd + " && ls", "cd /tmp; " + cmd, "bash -c " + shlex.quote(cmd), "echo x | " + cmd,
                cmd.replace(" ", "  "), "env FOO=1 " + cmd, "timeout 5 " + cmd, cmd + " &", cmd + " --help", cmd + " -h"]
        words = cmd.split(" ")
        if len(words) > 1:
            k = rnd.randrange(len(words))
            out.append(" ".join(words[:k] + words[k + 1:]))          # one word dropped
            other = rnd.choice(everything).split(" ")
            out.append(" ".join(words[:-1] + [rnd.choice(other)]))   # last word swapped for another line's word
            out.append(" ".join(words[:1] + ["-n"] + words[1:]))     # a flag inserted
        out.append(cmd + " ; " + rnd.choice(everything))
        out.append(rnd.choice(benign) + " | " + cmd)
    return list(dict.fromkeys(out))


CASES = _mutations(_load("shell_dangerous.txt"), _load("shell_benign.txt"))


def _full(module, cmd: str):
    v = module.check_command(cmd)
    return v.verdict, v.observe, tuple(v.reasons), tuple(v.groups)


def _views(module, cmd: str):
    a = module.analyse_for_rules(cmd)
    return (module.extract_simple_commands(cmd), a.syntax, a.problems,
            [(c.argv, c.layers, c.assigns, c.redirects, c.inline_code, c.problems) for c in a.commands])


def test_generated_input_is_large():
    assert len(CASES) >= 5000


def test_same_results_as_reference_except_intended_changes():
    unexplained, explained = [], {}
    for cmd in CASES:
        old, new = _full(reference, cmd), _full(current, cmd)
        if old == new:
            continue
        classes = [c for c in INTENDED_CHANGES if c.matches(cmd)]
        if old[0] != new[0]:
            cls = next((c for c in classes if c.direction == new[0]), None)  # the change must go the class's way
        else:
            cls = classes[0] if classes and old[0] == "deny" else None  # still denied, reasons now name the new rule
        if cls is not None:
            explained.setdefault(cls.name, []).append(cmd)
        else:
            unexplained.append((cmd, old, new))
    assert not unexplained, f"{len(unexplained)} unexplained differences, first: {unexplained[:5]}"
    print("\nintended changes:", {k: len(v) for k, v in explained.items()})


@pytest.mark.parametrize("chunk", range(4))
def test_same_analysis_views_as_reference(chunk):
    """extract_simple_commands and analyse_for_rules feed approvals: the widening must not change them at all."""
    diffs = [cmd for cmd in CASES[chunk::12] if _views(reference, cmd) != _views(current, cmd)]
    assert not diffs, diffs[:5]
