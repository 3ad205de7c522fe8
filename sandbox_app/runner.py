"""The shared process runner behind every backend that starts a local process (host, bubblewrap).

`ProcessRunner.run(launch, limits, stdin)` builds the launch chain and supervises it:

    /bin/sh -c JOIN (root, joins the run's cgroups, then exec)  ->  prlimit (RLIMITs, exec)
        ->  setpriv (drop to the sandbox user, no groups, no new privileges, exec)  ->  the program

Everything is exec'd in place, so one pid (the leader of a new session/process group) carries the run
from before its first instruction: it is inside its cgroup before it can fork. No `preexec_fn` (the
server is multi-threaded). The JOIN step reports success on a status pipe it closes before exec'ing,
so the program can't forge it; without that report the run fails closed with `SandboxError`.

Supervision guarantees (unchanged from the original host backend):
- stdout/stderr are read concurrently (one selector loop), the first `max_output_bytes` of each are
  kept and the rest is drained and discarded, so the child never blocks on a full pipe;
- on timeout the whole tree gets SIGTERM (process group + cgroup), then SIGKILL after `grace_seconds`;
- when the leader exits, descendants still holding the pipes get `drain_seconds` to finish writing,
  then everything is SIGKILLed and we stop reading — a `sleep 100 &` can't hang the call;
- nothing of a run outlives it: the process group is killed, and every process left in the run's
  cgroup (which also catches `setsid` escapes) is killed before the cgroup is removed. The leader is
  only reaped after that, so its pid (= the pgid) can't have been reused.
"""
from __future__ import annotations

import errno
import os
import selectors
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field

from sandbox_app.cgroups import RunCgroup
from sandbox_app.identity import SandboxIdentity
from sandbox_app.services import ExecLimits, SandboxError

_READ_CHUNK = 65536
_WRITE_CHUNK = 65536
# After SIGKILL, how long we wait for the leader to go before giving up on it (uninterruptible sleep).
_KILL_WAIT_SECONDS = 5.0
_SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"

# $1 = status fd, $2 = number of cgroup.procs files, then the files, then the program's argv.
_JOIN_SCRIPT = (
    'fd=$1; n=$2; shift 2; '
    'while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; '
    'echo ok >&"$fd" || exit 125; '
    'eval "exec $fd>&-"; exec "$@"'
)


def system_tool(name: str) -> str | None:
    """Absolute path of a util-linux tool from the system directories only (never the caller's PATH)."""
    return shutil.which(name, path=_SYSTEM_PATH)


class _Stream:
    __slots__ = ("buf", "limit", "truncated")

    def __init__(self, limit: int) -> None:
        self.buf = bytearray()
        self.limit = limit
        self.truncated = False

    def feed(self, data: bytes) -> None:
        room = self.limit - len(self.buf)
        if room >= len(data):
            self.buf += data
        else:
            if room > 0:
                self.buf += data[:room]
            self.truncated = True

    def text(self) -> str:
        return bytes(self.buf).decode("utf-8", errors="replace")


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _leader_exited(pid: int) -> bool:
    """Has the leader exited? Uses WNOWAIT so it stays a zombie (its pid, our pgid, stays reserved)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None and info.si_pid == pid


@dataclass
class Launch:
    """One process to start. `argv[0]` is resolved with env's PATH (after the wrappers have run)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None = None
    pass_fds: tuple[int, ...] = ()
    identity: SandboxIdentity | None = None  # setpriv to it when identity.switch
    rlimits: dict[str, str] = field(default_factory=dict)  # prlimit long option -> value, e.g. {"nofile": "64"}
    cgroup: RunCgroup | None = None
    # bubblewrap: on timeout SIGTERM reaches the program inside first, not the bwrap leader (whose
    # death would SIGKILL the sandbox at once); the SIGKILL after the grace period hits everything.
    term_spares_leader: bool = False


@dataclass
class Completed:
    returncode: int | None
    timed_out: bool
    stdout: _Stream
    stderr: _Stream
    duration_ms: float


class ProcessRunner:
    def __init__(self, *, drain_seconds: float = 2.0, poll_interval: float = 0.05) -> None:
        self.drain_seconds = drain_seconds
        self.poll_interval = poll_interval

    # --- building the chain -----------------------------------------------------------------------

    @staticmethod
    def chain(launch: Launch, status_fd: int | None) -> list[str]:
        argv: list[str] = []
        if launch.cgroup is not None:
            files = launch.cgroup.procs_files
            argv += ["/bin/sh", "-c", _JOIN_SCRIPT, "goclaw-join", str(status_fd), str(len(files)), *files]
        if launch.rlimits:
            prlimit = system_tool("prlimit")
            if prlimit is None:
                raise SandboxError("cannot apply resource limits: util-linux prlimit is not installed")
            argv += [prlimit, *(f"--{name}={value}" for name, value in launch.rlimits.items()), "--"]
        if launch.identity is not None and launch.identity.switch:
            setpriv = system_tool("setpriv")
            if setpriv is None:
                raise SandboxError("cannot drop privileges: util-linux setpriv is not installed")
            argv += [setpriv, f"--reuid={launch.identity.uid}", f"--regid={launch.identity.gid}",
                     "--clear-groups", "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]
        return argv + list(launch.argv)

    # --- running ----------------------------------------------------------------------------------

    def run(self, launch: Launch, limits: ExecLimits, stdin: bytes | None) -> Completed:
        status_r = status_w = None
        if launch.cgroup is not None:
            status_r, status_w = os.pipe()
        try:
            argv = self.chain(launch, status_w)
            pass_fds = tuple(launch.pass_fds) + ((status_w,) if status_w is not None else ())
            start = time.monotonic()
            try:
                proc = subprocess.Popen(
                    argv, cwd=launch.cwd, env=launch.env,
                    stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True, start_new_session=True,
                    pass_fds=pass_fds,
                )
            except FileNotFoundError:
                raise SandboxError(f"executable not found: {argv[0]}") from None
            except PermissionError:
                raise SandboxError(f"permission denied starting {argv[0]}") from None
            except OSError as exc:
                raise SandboxError(f"could not start process: {exc.strerror or exc}") from None
            if status_w is not None:
                os.close(status_w)
                status_w = None

            pgid = proc.pid  # start_new_session=True: the child is the leader of a new group
            try:
                timed_out, out, err = self._supervise(proc, pgid, launch, limits, stdin, start)
            except BaseException:
                self._kill_tree(pgid, launch, signal.SIGKILL)
                try:
                    proc.wait(timeout=_KILL_WAIT_SECONDS)
                except Exception:
                    pass
                raise
            finally:
                for pipe in (proc.stdin, proc.stdout, proc.stderr):
                    if pipe is not None:
                        try:
                            pipe.close()
                        except OSError:
                            pass

            try:
                returncode = proc.wait(timeout=_KILL_WAIT_SECONDS)
            except subprocess.TimeoutExpired:  # stuck in uninterruptible sleep; report it as killed
                returncode = None
            duration_ms = (time.monotonic() - start) * 1000.0
            if status_r is not None:
                os.set_blocking(status_r, False)
                try:
                    joined = os.read(status_r, 16).startswith(b"ok")
                except OSError:
                    joined = False
                if not joined:
                    raise SandboxError("could not place the process in its cgroup; it was not run")
            return Completed(returncode=None if timed_out else returncode, timed_out=timed_out,
                             stdout=out, stderr=err, duration_ms=duration_ms)
        finally:
            for fd in (status_r, status_w):
                if fd is not None:
                    os.close(fd)

    @staticmethod
    def _kill_tree(pgid: int, launch: Launch, sig: int) -> None:
        if launch.cgroup is not None:
            launch.cgroup.signal_all(sig)
        _killpg(pgid, sig)

    @staticmethod
    def _terminate(pgid: int, launch: Launch) -> None:
        if launch.term_spares_leader and launch.cgroup is not None:
            launch.cgroup.signal_all(signal.SIGTERM, spare=pgid)
        elif launch.term_spares_leader:
            # Without a cgroup we can't reach inside the pid namespace: TERM to the bwrap leader
            # tears the sandbox down at once (its children have PDEATHSIG=SIGKILL).
            _killpg(pgid, signal.SIGTERM)
        else:
            ProcessRunner._kill_tree(pgid, launch, signal.SIGTERM)

    def _supervise(self, proc: subprocess.Popen, pgid: int, launch: Launch, limits: ExecLimits,
                   stdin: bytes | None, start: float) -> tuple[bool, _Stream, _Stream]:
        out, err = _Stream(limits.max_output_bytes), _Stream(limits.max_output_bytes)
        sel = selectors.DefaultSelector()
        pidfd = None
        try:
            assert proc.stdout is not None and proc.stderr is not None
            for pipe, stream in ((proc.stdout, out), (proc.stderr, err)):
                os.set_blocking(pipe.fileno(), False)
                sel.register(pipe.fileno(), selectors.EVENT_READ, stream)
            pending = memoryview(stdin) if stdin else None
            if proc.stdin is not None:
                if pending:
                    os.set_blocking(proc.stdin.fileno(), False)
                    sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE, "stdin")
                else:
                    proc.stdin.close()
            if hasattr(os, "pidfd_open"):
                try:
                    pidfd = os.pidfd_open(proc.pid)
                    sel.register(pidfd, selectors.EVENT_READ, "exit")
                except OSError:
                    pidfd = None

            deadline = start + limits.timeout_seconds
            timed_out = False
            term_at: float | None = None
            kill_at: float | None = None
            exited_at: float | None = None

            def readers_open() -> bool:
                return any(isinstance(k.data, _Stream) for k in sel.get_map().values())

            while True:
                now = time.monotonic()
                if exited_at is None and _leader_exited(proc.pid):
                    exited_at = now
                    if pidfd is not None:
                        sel.unregister(pidfd)
                        os.close(pidfd)
                        pidfd = None
                if exited_at is None:
                    if not timed_out and now >= deadline:
                        timed_out = True
                        term_at = now
                        self._terminate(pgid, launch)
                    if timed_out and kill_at is None and now >= term_at + limits.grace_seconds:
                        kill_at = now
                        self._kill_tree(pgid, launch, signal.SIGKILL)
                    if kill_at is not None and now >= kill_at + _KILL_WAIT_SECONDS:
                        break  # the leader ignores SIGKILL (D state); stop supervising
                    next_event = deadline if not timed_out else (
                        term_at + limits.grace_seconds if kill_at is None else kill_at + _KILL_WAIT_SECONDS)
                else:
                    if not readers_open() or now >= exited_at + self.drain_seconds:
                        break
                    next_event = exited_at + self.drain_seconds
                wait = max(0.0, next_event - now)
                if pidfd is None and exited_at is None:
                    wait = min(wait, self.poll_interval)
                if not sel.get_map():
                    time.sleep(wait)
                    continue
                for key, _ in sel.select(wait):
                    if key.data == "exit":
                        continue  # handled at the top of the loop
                    if key.data == "stdin":
                        pending = self._write_stdin(sel, proc, pending)
                        continue
                    self._read(sel, key.fd, key.data)

            # Leader gone (or unkillable): nothing of this run may outlive it.
            self._kill_tree(pgid, launch, signal.SIGKILL)
            self._final_drain(sel)
            return timed_out, out, err
        finally:
            if pidfd is not None:
                os.close(pidfd)
            sel.close()

    @staticmethod
    def _read(sel: selectors.BaseSelector, fd: int, stream: _Stream) -> bool:
        """Read once; returns False (and unregisters) at EOF."""
        try:
            data = os.read(fd, _READ_CHUNK)
        except BlockingIOError:
            return True
        except OSError as exc:
            if exc.errno == errno.EINTR:
                return True
            data = b""
        if not data:
            sel.unregister(fd)
            return False
        stream.feed(data)
        return True

    @staticmethod
    def _write_stdin(sel: selectors.BaseSelector, proc: subprocess.Popen, pending: memoryview | None):
        assert proc.stdin is not None
        fd = proc.stdin.fileno()
        try:
            if pending:
                written = os.write(fd, pending[:_WRITE_CHUNK])
                pending = pending[written:]
        except BlockingIOError:
            return pending
        except OSError:  # EPIPE: the child closed stdin / exited
            pending = None
        if not pending:
            sel.unregister(fd)
            proc.stdin.close()
        return pending

    def _final_drain(self, sel: selectors.BaseSelector) -> None:
        """After the group kill: take what is already buffered / arrives within a short moment."""
        for key in list(sel.get_map().values()):
            if not isinstance(key.data, _Stream):
                sel.unregister(key.fd)
        end = time.monotonic() + min(0.5, self.drain_seconds)
        while True:
            keys = [k for k in sel.get_map().values() if isinstance(k.data, _Stream)]
            if not keys:
                return
            remaining = end - time.monotonic()
            if remaining <= 0:
                return
            ready = sel.select(remaining)
            for key, _ in ready:
                if isinstance(key.data, _Stream):
                    self._read(sel, key.fd, key.data)
