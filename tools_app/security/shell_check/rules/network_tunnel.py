"""Rule group `network_tunnel`: Exposing local ports to the outside: ssh -R, ngrok tcp, chisel/frp/iodine, tmate,
tunnels of ssh/rdp ports.
"""
from __future__ import annotations

import re

from ..vocabulary import REMOTE_ADMIN_PORTS, TUNNEL_SHARE, TUNNEL_TOOLS
from .base import Rule, RuleGroup

GROUP = RuleGroup(
    "network_tunnel",
    "Exposing local ports to the outside: ssh -R, ngrok tcp, chisel/frp/iodine, tmate, tunnels of ssh/rdp ports.",
)


def _ssh_flag(arg: str, flag: str) -> bool:
    """True when a short-option cluster (`-fNR`, `-R8080:..`) contains `flag` before any value-taking letter."""
    if not arg.startswith("-") or arg.startswith("--"):
        return False
    for ch in arg[1:]:
        if ch == flag:
            return True
        if ch in "bcDEeFIiJLlmOopQRSWwB":
            return False
    return False


def opens_tunnel(analysis, c):
    """Reverse tunnels and public exposure of ssh/rdp/docker ports give outsiders a way in."""
    nm, a = c.name, c.args
    if nm in ("ssh", "autossh") and (any(_ssh_flag(x, "R") for x in a) or re.search(r"RemoteForward", " ".join(a), re.I)):
        return [(f"{nm} -R remote port forward exposes a local port remotely", True)]
    if nm in TUNNEL_TOOLS and a and not set(a) <= {"--help", "-h", "version", "--version", "-v"}:
        return [(f"{nm} tunnels traffic in/out of this host", True)]
    if nm in TUNNEL_SHARE:
        ports = {p for x in a for p in re.findall(r"(?:^|:)(\d{2,5})$", x)}
        if "tcp" in a or ports & REMOTE_ADMIN_PORTS:
            return [(f"{nm} exposes a raw TCP / admin port publicly", True)]
        if set(a) & {"http", "https", "tunnel", "local", "share", "--url", "--port", "funnel"} or ports:
            return [(f"{nm} exposes a local service publicly", False)]
    return []


RULES = (
    Rule(
        "opens_tunnel",
        GROUP.name,
        "ssh -R, tunnel tools (chisel, frp, iodine ...) and public exposure of local ports.",
        opens_tunnel,
    ),
)
