"""Rule group `reverse_shell`: /dev/tcp redirects, nc -e, socat exec:, network client piped to a shell, socket+exec
one-liners.
"""
from __future__ import annotations

import re

from ..command import is_loopback, short_flags
from ..vocabulary import (
    INLINE_PATTERNS,
    NETCAT,
    SHELLS,
    UNKNOWN_OUTPUT,
    interpreter_name,
    shown,
)
from .base import Rule, RuleGroup

GROUP = RuleGroup(
    "reverse_shell",
    "/dev/tcp redirects, nc -e, socat exec:, network client piped to a shell, socket+exec one-liners.",
)


def network_shell(analysis, c):
    nm, a = c.name, c.args
    out = [(f"network redirect {shown(t)}", True) for _, t in c.redirs if "/dev/tcp/" in t or "/dev/udp/" in t][:1]
    if nm in NETCAT and (re.search(r"[ec]", short_flags([x for x in a if not x.startswith("--")])) or any(x.startswith(("--exec", "--sh-exec", "--lua-exec")) for x in a)):
        out.append((f"{nm} with program execution", True))
    if nm == "socat" and any(re.search(r"(exec|system):", x, re.I) for x in a):
        out.append(("socat exec:/system: address", True))
    if nm == "xterm" and "-display" in a:
        out.append(("xterm -display to a remote X server", True))
    code = " ".join(c.argv) if c.icode else ""
    if code and INLINE_PATTERNS["sock"].search(code) and INLINE_PATTERNS["exec"].search(code):
        out.append((f"{nm} one-liner wires a socket to a shell/exec", True))
    elif code:
        out += _raw_socket(nm, code)
    if (code and INLINE_PATTERNS["pty"].search(code)) or (interpreter_name(nm) == "python" and _python_module(a) == "pty"):
        out.append((f"{nm} spawns a PTY shell (reverse-shell TTY upgrade)", True))
    if nm == "socat" and any(re.search(r"tty|pty|raw,echo=0|^file:" + UNKNOWN_OUTPUT, x, re.I) for x in a) and any(re.match(r"(tcp|udp|ssl|openssl|sctp)[46]?(-listen|-connect)?:", x, re.I) for x in a):
        out.append(("socat bridges a terminal to a network socket", True))
    if nm == "ztcp" and a and not a[0].startswith("-") and not is_loopback(a[0]):
        out.append(("zsh ztcp opens a raw TCP connection", True))
    if nm in NETCAT or (nm == "openssl" and "s_client" in a):
        shells = [u for u in analysis.pipes.get(c.pipe, []) if u is not c and (u.name in SHELLS or interpreter_name(u.name) in SHELLS) and u.code is None]
        if shells:
            out.append((f"{nm} connected to a shell in one pipeline", True))
    return out


def _python_module(args: list) -> str | None:
    """Module run by `python -m MOD` (`python3 -m pty` spawns a shell on a new PTY)."""
    i = args.index("-m") if "-m" in args else -1
    return args[i + 1] if 0 <= i < len(args) - 1 else None


def _raw_socket(nm: str, code: str) -> list:
    """Inline programs that open an outbound raw TCP socket: reverse-shell staging even without an exec yet.

    Denied when they target a literal non-loopback IP, or for perl `use Socket`/IO::Socket (a reverse-shell staple);
    a UDP `connect` + `getsockname` (the "what is my IP" idiom) and loopback-only targets are left alone."""
    if not (INLINE_PATTERNS["rawsock"].search(code) and INLINE_PATTERNS["connect"].search(code)):
        return []
    if "SOCK_DGRAM" in code and "getsockname" in code:
        return []
    ips = [ip for ip in INLINE_PATTERNS["ipv4"].findall(code) if not is_loopback(ip)]
    perl = interpreter_name(nm) == "perl" and re.search(r"use\s+Socket|-M(IO::)?Socket|IO::Socket|Socket::INET", code)
    if ips or (perl and not re.search(r"localhost|127\.0\.0\.1", code)):
        return [(f"{nm} one-liner opens a raw TCP connection{' to ' + ips[0] if ips else ''}", True)]
    return [(f"{nm} one-liner opens a TCP connection", False)]


def named_pipe_to_network_client(analysis):
    names = {c.name for c in analysis.cmds}
    if names & {"mkfifo", "mknod"} and (names & NETCAT or any(c.name == "openssl" and "s_client" in c.args for c in analysis.cmds)):
        return [("named pipe wired to a network client", True)]
    return []


RULES = (
    Rule(
        "network_shell",
        GROUP.name,
        "/dev/tcp redirects, nc -e, socat exec:, PTY upgrades, socket+exec one-liners, network client piped to a shell.",
        network_shell,
    ),
    Rule(
        "named_pipe_to_network_client",
        GROUP.name,
        "mkfifo/mknod in the same line as a network client (the classic FIFO reverse shell).",
        named_pipe_to_network_client,
        whole_line=True,
    ),
)
