"""Rule group `network_recon`: Port/host scanners and password crackers (loopback-only scans are observe).
"""
from __future__ import annotations

import re

from ..command import is_loopback, operands
from ..vocabulary import CRACKERS, MITM_TOOLS, SCANNERS, URL, WIRELESS_ATTACK, word_set
from .base import Rule, RuleGroup

GROUP = RuleGroup(
    "network_recon",
    "Port/host scanners and password crackers (loopback-only scans are observe), Wi-Fi attack and LAN "
    "man-in-the-middle tools.",
)


def scanner_or_cracker(analysis, c):
    nm = c.name
    if nm in CRACKERS:
        return [(f"{nm} password cracking / payload tool", True)]
    if nm in SCANNERS:
        tg = [m.group(1) for m in map(URL.match, c.args) if m] + [h for h in operands(c.args, word_set("-p -oN -oX -oG -oA -iL --script -e -S -w -u -l -P -L")) if not re.fullmatch(r"[\d,-]+", h)]
        local = bool(tg) and all(is_loopback(re.sub(r"/\d+$", "", h.split(":")[0])) for h in tg)
        return [(f"{nm} scan{' of loopback' if local else ''}", not local)]
    return []


def wireless_or_mitm_attack(analysis, c):
    """Wi-Fi attack tools (deauthentication, WPS brute force, rogue access points, handshake capture) and LAN
    man-in-the-middle tools. `airmon-ng` alone only lists interfaces; `start`/`check kill` prepare an attack."""
    nm, a = c.name, c.args
    if nm in WIRELESS_ATTACK or nm in MITM_TOOLS:
        return [(f"{nm} attacks wireless networks or intercepts LAN traffic", True)]
    if nm == "airmon-ng" and a[:1] in (["start"], ["check"]) and (a[0] == "start" or "kill" in a):
        return [(f"airmon-ng {a[0]} prepares a wireless attack", True)]
    return []


RULES = (
    Rule(
        "scanner_or_cracker",
        GROUP.name,
        "Port/host scanners (observe when only loopback) and password crackers.",
        scanner_or_cracker,
    ),
    Rule(
        "wireless_or_mitm_attack",
        GROUP.name,
        "Wi-Fi attack tools (aireplay-ng, mdk4, reaver, wifite ...), airmon-ng start/check kill, and LAN "
        "man-in-the-middle tools (bettercap, ettercap, arpspoof ...).",
        wireless_or_mitm_attack,
        commands=WIRELESS_ATTACK | MITM_TOOLS | {"airmon-ng"},
    ),
)
