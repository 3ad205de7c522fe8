"""The sandbox probe suite, as data: hostile things a sandboxed process tries, and how we judge "held".

`PROBES` is a list of `Probe` records (name, description, the shell command run inside the sandbox, the
limits it runs under, and the name + wording of its judge). `run_probes(spec, ...)` prepares what the
probes need (a private directory holding the probe workspace, a second fake workspace and a fake data
dir with secret markers, a TCP listener on 127.0.0.1, a "victim" process with a canary in its
environment), runs every probe through `sandbox_exec` with `spec`, and cleans up.

Commands use `@name@` placeholders, filled (shell-quoted) from the run's context. Importable without
Django settings: the admin action / management command / healthz call `run_probes` with their paths.
"""
from __future__ import annotations

import dataclasses
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from sandbox_app.services import ExecLimits, ExecResult, SandboxError, SandboxSpec, safe_child_env, sandbox_exec


@dataclass(frozen=True)
class Probe:
    name: str
    description: str
    command: str                 # /bin/sh script, run in the probe workspace; `@name@` placeholders
    judge: str                   # a key of JUDGES
    held_when: str               # the judge, in words
    limits: ExecLimits = field(default_factory=lambda: ExecLimits(timeout_seconds=20))
    # The limits this probe's verdict depends on: they win over the caller's base limits (run_probes).
    needs: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProbeResult:
    name: str
    held: bool
    detail: str


_CHECK_PATH = (
    'p=@path@; '
    'if [ -d "$p" ]; then ls -A "$p" >/dev/null 2>&1 && echo "BREACH: listed $p"; cat "$p"/* 2>/dev/null; '
    'elif [ -e "$p" ]; then head -c 4096 "$p" 2>/dev/null && echo "BREACH: read $p"; fi; echo HELD'
)
_TCP = ('if bash -c \'exec 3<>/dev/tcp/127.0.0.1/@port@\' 2>/dev/null; '
        'then echo "BREACH: connected to 127.0.0.1:@port@"; else echo HELD; fi')

PROBES: list[Probe] = [
    Probe("write_outside_workspace", "Writes to /, /etc, /usr, /usr/bin, /var, /home, /root and /opt fail.",
          'for d in / /etc /usr /usr/bin /var /home /root /opt; do '
          '  if ( : > "$d/.goclaw-probe-@token@" ) 2>/dev/null; then echo "BREACH: wrote $d"; '
          '  rm -f "$d/.goclaw-probe-@token@"; fi; done; echo HELD',
          "prints_held", "every write fails (no BREACH line) and no probe file appears on the host"),
    Probe("etc_shadow_unreadable", "/etc/shadow can't be read.", _CHECK_PATH.replace("@path@", "/etc/shadow"),
          "prints_held", "reading fails (no BREACH line)"),
    Probe("root_home_unreadable", "/root can't be listed.", _CHECK_PATH.replace("@path@", "/root"),
          "prints_held", "listing fails or /root is absent"),
    Probe("proc_environ_unreachable", "Another process's /proc/<pid>/environ (a victim holding a canary "
          "variable) can't be read, directly or by scanning every visible pid.",
          'cat /proc/@victim_pid@/environ 2>/dev/null | tr "\\0" "\\n"; '
          'for f in /proc/[0-9]*/environ; do tr "\\0" "\\n" < "$f" 2>/dev/null; done | grep -c @token@; echo HELD',
          "prints_held", "the canary never appears in the output"),
    Probe("pid_namespace", "Only the sandbox's own processes are visible in /proc.",
          '[ -e /proc/@victim_pid@ ] && echo "BREACH: host pid @victim_pid@ visible"; '
          'ls -d /proc/[0-9]* | wc -l; echo HELD',
          "prints_held", "the victim's pid is not visible"),
    Probe("tcp_loopback_refused", "TCP to a listener on the host's 127.0.0.1 is refused.",
          _TCP.replace("@port@", "@listener_port@"),
          "tcp_refused", "connecting fails and the listener accepted nothing"),
    Probe("tcp_postgresql_refused", "TCP to the PostgreSQL port on 127.0.0.1 is refused.",
          _TCP.replace("@port@", "@postgres_port@"), "prints_held", "connecting fails"),
    Probe("fork_bomb_contained", "A fork bomb hits the process limit and leaves nothing behind.",
          "sh -c 'bomb() { bomb | bomb & }; bomb; sleep 2; echo bomb-done' goclaw-probe-@token@",
          "fork_contained", "a process limit is enforced, forks fail, the run ends and no bomb process remains",
          ExecLimits(timeout_seconds=20, grace_seconds=1, max_processes=64),
          ("timeout_seconds", "grace_seconds", "max_processes")),
    Probe("memory_hog_killed", "A process allocating far beyond the memory limit is stopped.",
          "a=$(head -c 400000000 /dev/zero | tr '\\0' x); echo SURVIVED ${#a}",
          "memory_killed", "a memory limit is enforced and the hog never finishes (killed or allocation fails)",
          ExecLimits(timeout_seconds=30, grace_seconds=1, memory_bytes=128 * 1024 * 1024),
          ("timeout_seconds", "grace_seconds", "memory_bytes")),
    Probe("grandchild_dies_at_timeout", "At the timeout a double-forked, setsid'd grandchild that ignores "
          "SIGTERM dies with the rest.",
          "( setsid sh -c 'trap \"\" TERM HUP; while :; do sleep 1; done' goclaw-probe-@token@ & ) ; "
          "echo started; sleep 600",
          "tree_killed", "the run times out and no process of it remains on the host",
          ExecLimits(timeout_seconds=2, grace_seconds=1), ("timeout_seconds", "grace_seconds")),
    Probe("environment_only_given", "The environment holds only the variables sandbox_exec was given.",
          "env", "env_only_given", "every variable is one we passed (or PWD/SHLVL/OLDPWD/_ from the shell)"),
    Probe("workspace_usable", "Files written in the workspace are there for the server to read and modify.",
          "echo probe-@token@ > probe-file && mkdir -p probe-dir && echo x > probe-dir/f && cat probe-file",
          "workspace_usable", "the run succeeds and the server reads, rewrites and removes what it wrote"),
]


# --- judges ---------------------------------------------------------------------------------------

@dataclass
class _Context:
    token: str
    workspace: Path
    listener: "_Listener"
    env: dict[str, str]
    values: dict[str, str]


def _leftovers(token: str) -> list[int]:
    """Host pids whose command line carries the probe token (children of a probe that escaped)."""
    found = []
    needle = token.encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                if needle in fh.read():
                    with open(f"/proc/{entry.name}/stat") as st:
                        if st.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                            found.append(int(entry.name))
        except (OSError, IndexError):
            pass
    return found


def _wait_no_leftovers(token: str, seconds: float = 5.0) -> list[int]:
    end = time.monotonic() + seconds
    while True:
        left = _leftovers(token)
        if not left or time.monotonic() >= end:
            return left
        time.sleep(0.05)


def _prints_held(r: ExecResult, ctx: _Context) -> tuple[bool, str]:
    lines = r.stdout.splitlines()
    breaches = [ln for ln in lines if ln.startswith("BREACH")]
    if ctx.token in r.stdout or ctx.token in r.stderr:
        # the canary/marker content itself (the probe token) leaked into the output
        return False, "secret marker visible: " + (breaches[0] if breaches else "token in output")
    if breaches:
        return False, "; ".join(breaches)[:300]
    if "HELD" not in lines:
        return False, f"probe did not complete (exit {r.exit_code}, timed_out={r.timed_out}): {r.stderr[:200]}"
    return True, "refused"


def _tcp_refused(r: ExecResult, ctx: _Context) -> tuple[bool, str]:
    held, detail = _prints_held(r, ctx)
    if ctx.listener.accepted:
        return False, f"the 127.0.0.1 listener accepted {ctx.listener.accepted} connection(s)"
    return held, detail


def _fork_contained(r: ExecResult, ctx: _Context) -> tuple[bool, str]:
    left = _wait_no_leftovers(ctx.token)
    limit = [x for x in r.limits_enforced if x.startswith("max_processes:")]
    if not limit:
        return False, "no process limit is enforced by this backend"
    if left:
        return False, f"{len(left)} bomb process(es) outlived the run"
    text = r.stderr.lower()
    if "fork" not in text and "resource temporarily unavailable" not in text:
        return False, f"forks never failed (exit {r.exit_code})"
    return True, f"forks failed at the limit ({limit[0]}); nothing left behind"


def _memory_killed(r: ExecResult, ctx: _Context) -> tuple[bool, str]:
    limit = [x for x in r.limits_enforced if x.startswith("memory_bytes:")]
    if not limit:
        return False, "no memory limit is enforced by this backend"
    if "SURVIVED" in r.stdout:
        return False, "the hog allocated 400 MB under a 128 MiB limit"
    return True, f"stopped (exit {r.exit_code}) by {limit[0]}"


def _tree_killed(r: ExecResult, ctx: _Context) -> tuple[bool, str]:
    left = _wait_no_leftovers(ctx.token)
    if not r.timed_out:
        return False, f"the run did not time out (exit {r.exit_code}): {r.stderr[:200]}"
    if left:
        return False, f"grandchild pid(s) {left} survived the timeout"
    if "started" not in r.stdout:
        return False, "the probe did not start"
    return True, "timed out; nothing survived"


_SHELL_ADDED = {"PWD", "SHLVL", "OLDPWD", "_"}


def _env_only_given(r: ExecResult, ctx: _Context) -> tuple[bool, str]:
    if r.exit_code != 0:
        return False, f"env failed (exit {r.exit_code})"
    names = {ln.split("=", 1)[0] for ln in r.stdout.splitlines() if "=" in ln}
    extra = sorted(names - set(ctx.env) - _SHELL_ADDED)
    if extra:
        return False, "unexpected variables: " + ", ".join(extra)
    return True, f"{len(names)} variables, all given"


def _workspace_usable(r: ExecResult, ctx: _Context) -> tuple[bool, str]:
    path = ctx.workspace / "probe-file"
    if r.exit_code != 0:
        return False, f"writing failed (exit {r.exit_code}): {r.stderr[:200]}"
    try:
        if path.read_text() != f"probe-{ctx.token}\n":
            return False, "the server read different content"
        path.write_text("rewritten by the server\n")
        shutil.rmtree(ctx.workspace / "probe-dir")
        path.unlink()
    except OSError as exc:
        return False, f"the server cannot use the file: {exc}"
    return True, "written by the sandbox, read/rewritten/removed by the server"


JUDGES: dict[str, Callable[[ExecResult, _Context], tuple[bool, str]]] = {
    "prints_held": _prints_held, "tcp_refused": _tcp_refused, "fork_contained": _fork_contained,
    "memory_killed": _memory_killed, "tree_killed": _tree_killed, "env_only_given": _env_only_given,
    "workspace_usable": _workspace_usable,
}


# --- the runner -----------------------------------------------------------------------------------

class _Listener:
    """A TCP listener on 127.0.0.1 that counts the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sandbox-probe-listener", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


def _fill(command: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        command = command.replace(f"@{key}@", shlex.quote(value))
    return command


def _hostile_probes(paths: dict[str, str]) -> list[Probe]:
    return [Probe(f"hostile_path:{name}", f"{path} can't be listed or read.",
                  _CHECK_PATH.replace("@path@", shlex.quote(str(path))), "prints_held",
                  "listing/reading fails or the path is absent") for name, path in paths.items()]


def _limits_for(probe: Probe, base: ExecLimits | None) -> ExecLimits:
    if base is None:
        return probe.limits
    return dataclasses.replace(base, **{name: getattr(probe.limits, name) for name in probe.needs})


def run_probes(spec: SandboxSpec, *, workspace_parent: Path, hostile_paths: dict | None = None,
               tcp_ports: dict[str, int] | None = None, limits: ExecLimits | None = None) -> list[ProbeResult]:
    """Run every probe under `spec`; one `ProbeResult(name, held, detail)` per probe, in order.

    `workspace_parent`: where a private (0700) scratch directory is made for the probe workspace, a second
    fake workspace and a fake data dir (each holding a secret marker); removed afterwards.
    `hostile_paths`: {name: path} of real places the sandbox must not see (the data dir, the database
    socket dir, the checkout, ...); each becomes a `hostile_path:<name>` probe. `tcp_ports` overrides the
    PostgreSQL port probed (`{"postgresql": 5432}`). `limits`: base limits (e.g. the profile's); a probe
    still uses its own values for the limits its verdict depends on (`Probe.needs`: the fork bomb's process
    limit, the hog's memory limit, the timeouts). A probe that can't even start is reported not held.
    """
    from sandbox_app.identity import prepare_workspace, sandbox_identity

    token = secrets.token_hex(8)
    root = Path(workspace_parent) / f"goclaw-probes-{token}"
    root.mkdir(mode=0o700, parents=True)
    listener = victim = None
    results: list[ProbeResult] = []
    try:
        identity = sandbox_identity()
        workspace = root / "workspace"
        other = root / "other-workspace"
        data = root / "data"
        for d in (workspace, other, data):
            d.mkdir(mode=0o700)
        (other / "secret.txt").write_text(f"other workspace secret {token}\n")
        (data / "marker").write_text(f"data dir secret {token}\n")
        prepare_workspace(other, identity)  # owned like a real workspace would be
        listener = _Listener()
        victim = subprocess.Popen(["sleep", "600"], env={"PATH": "/usr/bin:/bin", "GOCLAW_PROBE_CANARY": token},
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        ports = {"postgresql": 5432, **(tcp_ports or {})}
        values = {"token": token, "listener_port": str(listener.port), "postgres_port": str(ports["postgresql"]),
                  "victim_pid": str(victim.pid)}
        env = safe_child_env({"GOCLAW_PROBE_GIVEN": "1"})
        hostile = {"fake_data_dir": str(data), "other_workspace": str(other), **{
            str(k): str(v) for k, v in (hostile_paths or {}).items()}}
        ctx = _Context(token=token, workspace=workspace, listener=listener, env=env, values=values)
        for probe in PROBES + _hostile_probes(hostile):
            try:
                result = sandbox_exec(command=_fill(probe.command, values), workspace=workspace, env=dict(env),
                                      limits=_limits_for(probe, limits), spec=spec)
            except SandboxError as exc:
                results.append(ProbeResult(probe.name, False, f"could not run: {exc}"))
                continue
            held, detail = JUDGES[probe.judge](result, ctx)
            results.append(ProbeResult(probe.name, held, detail))
        # the write probe also checks the host side: no probe file may have appeared anywhere
        for d in ("/", "/etc", "/usr", "/usr/bin", "/var", "/home", "/root", "/opt"):
            if os.path.exists(os.path.join(d, f".goclaw-probe-{token}")):
                os.unlink(os.path.join(d, f".goclaw-probe-{token}"))
                results = [ProbeResult(r.name, False, f"a probe file appeared in {d} on the host")
                           if r.name == "write_outside_workspace" else r for r in results]
    finally:
        if victim is not None:
            victim.send_signal(signal.SIGKILL)
            victim.wait(timeout=5)
        if listener is not None:
            listener.close()
        shutil.rmtree(root, ignore_errors=True)
    return results
