"""Rule group `security_disable`: Turning off defences: firewall flush/disable, SELinux/AppArmor off, stopping
auditd/EDR, kernel hardening sysctls.
"""
from __future__ import annotations

import re

from ..command import operands
from ..vocabulary import KERNEL_SYSCTL, SEC_SERVICES
from .base import Rule, RuleGroup

GROUP = RuleGroup(
    "security_disable",
    "Turning off defences: firewall flush/disable, SELinux/AppArmor off, stopping auditd/EDR, kernel hardening sysctls.",
)


def disables_defences(analysis, c):
    """Firewall flushes, SELinux/AppArmor off, stopping audit/EDR agents and weakening kernel hardening."""
    nm, a = c.name, c.args
    low = [x.lower() for x in a]
    if re.fullmatch(r"(ip6?|eb|arp)tables(-legacy|-nft)?", nm):
        shorts = "".join(x[1:] for x in a if x.startswith("-") and not x.startswith("--"))
        pol = next((a[i + 2] for i, x in enumerate(a[:-2]) if x in ("-P", "--policy")), "")
        open_all = set(a) & {"-I", "-A", "--insert", "--append"} and "ACCEPT" in a and not set(a) & {"-s", "--source", "-p", "--protocol", "-i", "-m", "--dport", "-d"}
        if set(shorts) & set("FX") or set(a) & {"--flush", "--delete-chain"} or pol.upper() == "ACCEPT" or open_all:
            return [(f"{nm} {' '.join(a)[:30]} removes firewall rules", True)]
    if nm == "nft" and ("flush" in low or ("delete" in low and set(low) & {"table", "chain", "ruleset"})):
        return [("nft flushes/deletes the firewall ruleset", True)]
    ops = [x.lower() for x in operands(a)]
    if nm == "ufw" and (ops[:1] in (["disable"], ["reset"]) or ops[:2] in (["default", "allow"],)):
        return [(f"ufw {ops[0]} turns off the firewall", True)]
    if nm == "firewall-cmd" and any(x.startswith(("--set-default-zone=trusted", "--panic-off")) for x in low) or nm == "netsh" and "off" in low and "advfirewall" in low:
        return [(f"{nm} opens the firewall", True)]
    if nm == "setenforce" and ops[:1] in (["0"], ["permissive"]):
        return [("setenforce disables SELinux enforcement", True)]
    if nm in ("aa-disable", "aa-complain", "aa-teardown") or (nm == "apparmor_parser" and set(a) & {"-R", "--remove"}):
        return [(f"{nm} disables AppArmor profiles", True)]
    if nm == "auditctl" and ("-D" in a or re.search(r"-e\s*0\b", " ".join(a))):
        return [("auditctl deletes audit rules / disables auditing", True)]
    units = []
    if nm == "systemctl" and set(low) & {"stop", "disable", "mask", "kill"}:
        units = ops[1:]
    elif nm in ("service", "rc-service") and len(ops) >= 2 and ops[1] == "stop":
        units = ops[:1]
    elif nm in ("update-rc.d", "chkconfig") and set(low) & {"disable", "remove", "off"}:
        units = ops[:1]
    elif nm in ("pkill", "killall", "kill"):
        units = ops + [x for s in c.subs if s.name in ("pgrep", "pidof") for x in operands(s.args)]
    bad = next((u for u in units if SEC_SERVICES.match(u.rsplit("/", 1)[-1])), None)
    if bad:
        return [(f"{nm} stops security service {bad}", True)]
    if nm == "sysctl":
        kv = [x.split("=", 1)[0] for x in a if "=" in x and not x.startswith("-")]
        if (x := next((k for k in kv if KERNEL_SYSCTL.match(k)), None)):
            return [(f"sysctl weakens kernel hardening ({x})", True)]
    if c.icode and re.search(r"Set-MpPreference\s+-Disable|Add-MpPreference\s+-ExclusionPath|Stop-Service\s+\S*(WinDefend|Sense)", c.icode, re.I):
        return [("PowerShell disables Windows Defender", True)]
    return []


RULES = (
    Rule(
        "disables_defences",
        GROUP.name,
        "Firewall flushes, SELinux/AppArmor off, stopping audit/EDR services, weakening kernel sysctls, Defender off.",
        disables_defences,
    ),
)
