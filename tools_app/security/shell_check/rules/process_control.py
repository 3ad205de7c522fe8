"""Rule group `process_control`: kill -1 / PID 1, killall5, killing every root process or init/sshd.
"""
from __future__ import annotations

import re

from ..command import operands
from ..vocabulary import AWKS, CORE_PROCESSES, CORE_SERVICES, HARMLESS_SIGNALS, word_set
from ..windows import windows_pipeline, windows_statements
from .base import Rule, RuleGroup

GROUP = RuleGroup(
    "process_control",
    "kill -1 / PID 1, killall5, killing every root process, every process or a core service (also by PIDs computed "
    "at run time), stopping core services.",
)


def kills_system_processes(analysis, c):
    nm, a = c.name, c.args
    if nm == "kill":
        ops, i = [], 0
        while i < len(a):
            if a[i] in ("-s", "-n", "--signal"):
                i += 2
                continue
            if a[i] != "--" and not (i == 0 and re.fullmatch(r"-(SIG)?[A-Za-z]+\d*|-\d{1,2}", a[i]) and a[i] != "-1"):
                ops.append(a[i])
            i += 1
        if any(x in ("1", "-1") for x in ops):
            return [("kill targets init or every process", True)]
    if nm == "killall5" or (nm in ("pkill", "killall", "slay") and (re.search(r"-u\s*(root|0)\b|--user[= ](root|0)", " ".join(a)) or set(operands(a)) & {"init", "systemd", "sshd", "dockerd", "containerd"})):
        return [(f"{nm} kills system-wide processes", True)]
    return []


KILLERS = ("kill", "pkill", "killall", "skill", "slay")
# pgrep/pidof/ps options whose next argument is a value, not a process name.
_SELECT_VALUE_OPTS = frozenset("-u -U -g -G -P -s -t -F -o -O -p -q --signal --euid --uid --group --parent --session "
                               "--terminal --pidfile --ns --nslist --format --pid --ppid --sort -C".split())


def _signal(c) -> str:
    """The signal a kill/pkill/killall sends (`-9`, `-s KILL`, `--signal=HUP`, `-SIGTERM`); TERM by default."""
    a = c.args
    for i, x in enumerate(a):
        if x in ("-s", "--signal", "-n") and i + 1 < len(a):
            return a[i + 1].upper()
        if x.startswith("--signal="):
            return x.split("=", 1)[1].upper()
        if re.fullmatch(r"-(SIG)?[A-Za-z]+\d*|-\d{1,2}", x) and x not in ("-1", "-f", "-x", "-e", "-u", "-i", "-l", "-v", "-w", "-q", "-r", "-n"):
            return x[1:].upper()
    return "TERM"


def _names_selected(s) -> tuple[list, bool]:
    """(process names, everything-of-root) that a pgrep/pidof/ps/grep/awk in a PID pipeline selects."""
    a = s.args
    if s.name in ("pgrep", "pidof", "pkill", "killall"):
        root = any(re.fullmatch(r"(-[uU]|--euid|--uid)=?(root|0)(,.*)?", x) for x in a) or \
            any(x in ("-u", "-U", "--euid", "--uid") and i + 1 < len(a) and a[i + 1].split(",")[0] in ("root", "0") for i, x in enumerate(a))
        return [o.split()[0].rsplit("/", 1)[-1] for o in operands(a, _SELECT_VALUE_OPTS) if o.strip() and o != s.name], root
    if s.name in ("grep", "egrep", "fgrep", "rg") and not ("-v" in a or "--invert-match" in a):
        pats = [a[i + 1] for i, x in enumerate(a[:-1]) if x in ("-e", "--regexp")] or operands(a, word_set("-e -f -m -A -B -C"))[:1]
        return [re.sub(r"[\\^$\[\]()|.*+?]", "", p) for p in pats], False
    if s.name in AWKS:
        prog = " ".join(a)
        return [re.sub(r"[\\^$\[\]()|.*+?]", "", m) for m in re.findall(r"/([^/]+)/", prog)], False
    if s.name == "ps":
        return [], any(re.fullmatch(r"-?[uU](root|0)", x) for x in a) or any(x in ("-u", "-U", "--user") and a[i + 1:i + 2] in (["root"], ["0"]) for i, x in enumerate(a))
    return [], False


def _lists_every_process(a: list) -> bool:
    """`ps -e`, `ps -ef`, `ps -A`, `ps aux`, `ps axo pid`: every process on the host, not `ps -o pgid= $PID`."""
    return any(re.fullmatch(r"-[a-zA-Z]*[eA][a-zA-Z]*|--all|-?[a-wyzA-Z]*a[a-zA-Z]*x[a-zA-Z]*|-?[a-wyzA-Z]*x[a-zA-Z]*a[a-zA-Z]*", x) for x in a)


def _pid_sources(analysis, c) -> list:
    """Commands whose output becomes this kill's PIDs: `kill $(pgrep x)`, `` kill `pidof x` ``, `pgrep x | xargs kill`,
    `ps aux | grep x | awk '{print $2}' | xargs kill`. Empty when the PIDs are literal."""
    sources = [s for s in c.subs if s.name in ("pgrep", "pidof", "ps", "grep", "egrep", "awk", "gawk", "mawk", "cut", "head", "tail", "cat")]
    if "xargs" in c.wrappers:
        sources += [u for u in analysis.pipes.get(c.pipe, []) if u.stage < c.stage]
    return sources


def kills_by_computed_pid(analysis, c):
    """Killing a core service, PID 1, every root process or every process, with PIDs computed at run time. A PID read
    from a pid file is judged by the file's name (`/run/sshd.pid`); reload and status signals (HUP, USR1, 0) do not
    end a process and stay allowed, as does killing your own programs (`kill $(pgrep -f celery)`)."""
    if c.name not in KILLERS or _signal(c) in HARMLESS_SIGNALS or kills_system_processes(analysis, c):
        return []  # the rule above already reports literal PID 1 / -1, killall5 and pkill -u root
    sources = _pid_sources(analysis, c) + ([c] if c.name != "kill" else [])
    if not sources:
        return []
    names, root, listing, filtered = [], False, False, False
    for s in sources:
        got, all_root = _names_selected(s)
        names += got
        root = root or all_root
        listing = listing or (s.name == "ps" and _lists_every_process(s.args))
        filtered = filtered or bool(got) or s.name in ("grep", "egrep", "fgrep", "rg", "pgrep", "pidof")
        if s.name == "cat":
            names += [o.rsplit("/", 1)[-1].removesuffix(".pid") for o in operands(s.args) if o.endswith(".pid")]
    core = next((n for n in names if n.lower().removesuffix(".service") in CORE_PROCESSES or n in ("1",)), None)
    if core:
        computed = " by a PID computed at run time" if c.name == "kill" or "xargs" in c.wrappers else ""
        return [(f"{c.name} kills core service {core}{computed}", True)]
    if root:
        return [(f"{c.name} kills every root process", True)]
    if listing and not filtered:
        return [(f"{c.name} kills every process listed by ps", True)]
    return []


_SERVICE_MANAGERS = frozenset({"systemctl", "service", "rc-service", "sv", "initctl", "rc-update"})


def stops_core_service(analysis, c):
    """`systemctl stop sshd`, `service ssh stop`, `systemctl kill dbus`: taking down a core service cuts remote access
    or stops the host working. Restarts, reloads and status stay allowed; the agent's own services are not core."""
    nm = c.name
    if nm not in _SERVICE_MANAGERS:
        return []
    a = [x.lower() for x in c.args]
    ops = [x for x in a if not x.startswith("-")]
    units = []
    if nm == "systemctl" and ops[:1] == ["isolate"] and set(ops[1:]) & {"rescue.target", "emergency.target", "rescue", "emergency"}:
        return [(f"systemctl isolate {ops[1]} stops every service but a root shell", True)]
    if nm in ("systemctl",) and ops[:1] and ops[0] in ("stop", "kill", "disable", "mask"):
        units = ops[1:]
    elif nm in ("service", "rc-service") and len(ops) >= 2 and ops[1] in ("stop", "zap"):
        units = ops[:1]
    elif nm in ("sv", "initctl", "rc-update") and len(ops) >= 2 and ops[0] in ("stop", "down", "kill", "del", "force-stop"):
        units = ops[1:]
    core = next((u for u in units if u.rsplit("/", 1)[-1].removesuffix(".service").removesuffix(".socket") in CORE_SERVICES), None)
    if core:
        return [(f"{nm} stops core service {core}", True)]
    return []


_WINDOWS_CORE = frozenset("csrss lsass wininit winlogon smss services svchost system dwm lsm".split())


def _core_image(name: str) -> bool:
    return name.strip("'\"").lower().removesuffix(".exe") in _WINDOWS_CORE


def windows_kills_system_process(analysis, c):
    """Windows kills of critical processes (csrss, lsass, wininit, winlogon, svchost ..), of PID 0/4, of every
    process (`Get-Process | Stop-Process`) or by a SYSTEM filter: taskkill, tskill, Stop-Process/kill, wmic process."""
    for st in windows_statements(c):
        nm, args = st[0], st[1:]
        low = [a.lower() for a in args]
        vals = [low[i + 1] for i, a in enumerate(low[:-1]) if a in ("/im", "/pid", "-name", "-n", "-id", "-processname")]
        if nm in ("taskkill", "tskill", "stop-process", "spps", "kill") and \
                (any(_core_image(v) or v in ("0", "4") for v in vals + [a for a in low if not a.startswith(("/", "-"))]) or
                 nm == "taskkill" and "/fi" in low and "system" in " ".join(low)):
            return [(f"{nm} kills a critical Windows process", True)]
        if nm == "wmic" and "process" in low and ("delete" in low or "terminate" in " ".join(low)) and \
                re.search(r"(csrss|lsass|wininit|winlogon|smss|services|svchost)\.exe", " ".join(low)):
            return [("wmic terminates a critical Windows process", True)]
    for pipeline in windows_pipeline(c):
        names = [st[0].lower() for st in pipeline if st]
        if names[:1] and names[0] in ("get-process", "gps", "ps") and any(n in ("stop-process", "spps", "kill") for n in names[1:]):
            if not any(len(st) > 1 for st in pipeline[:1]):
                return [("PowerShell stops every process", True)]
    return []


RULES = (
    Rule(
        "kills_system_processes",
        GROUP.name,
        "kill -1 / PID 1, killall5, pkill/killall of root-owned or core system processes.",
        kills_system_processes,
    ),
    Rule(
        "kills_by_computed_pid",
        GROUP.name,
        "kill/pkill/killall fed PIDs computed at run time ($(pgrep ..), `pidof ..`, ps | grep | xargs kill, pid "
        "files) that select a core service, every root process or every process.",
        kills_by_computed_pid,
        commands=frozenset(KILLERS),
    ),
    Rule(
        "stops_core_service",
        GROUP.name,
        "systemctl stop/kill/disable/mask, service X stop, sv/initctl stop of core services (sshd, systemd-*, dbus, "
        "networking, docker, cron ...).",
        stops_core_service,
        commands=_SERVICE_MANAGERS,
    ),
    Rule(
        "windows_kills_system_process",
        GROUP.name,
        "taskkill/tskill/Stop-Process/wmic of critical Windows processes, PID 0/4, SYSTEM filters, and "
        "Get-Process | Stop-Process.",
        windows_kills_system_process,
    ),
)
