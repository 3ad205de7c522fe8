"""The shared process runner behind every backend that starts a local process (host, bubblewrap).

`ProcessRunner.run(launch, limits, stdin)` builds the launch chain and supervises it:

    /bin/sh -c JOIN (root, joins the run's cgroups, then exec)  ->  prlimit (RLIMITs, exec)
        ->  setpriv (drop to the sandbox user, no groups, no new privileges, exec)  ->  the program

Everything is exec'd in place, so one pid (the leader of a new session/process group) carries the run
from before its first instruction: it is inside its cgroup before it can fork. No `preexec_fn` (the
server is multi-threaded). The JOIN step reports success by writing a marker to stdout before it
exec's anything, so the program (whose output can only follow) can't forge it; the runner strips the
marker, and without it the run fails closed with `SandboxError`.

Supervision guarantees (unchanged from the original host backend):
- stdout/stderr are read concurrently (one selector loop), the first `max_output_bytes` of each are
  kept and the rest is drained and discarded, so the child never blocks on a full pipe;
- on timeout the whole tree gets SIGTERM (process group + cgroup), then SIGKILL after `grace_seconds`;
- on cancellation (the caller's `cancel` event, looked at every CANCEL_POLL_SECONDS at the latest) the whole
  tree gets SIGKILL at once: nobody waits for that output any more;
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
import threading
import time
from dataclasses import dataclass, field

from sandbox_app.cgroups import RunCgroup
from sandbox_app.identity import SandboxIdentity
from sandbox_app.runs import ExecLimits, SandboxError

_READ_CHUNK = 65536
_WRITE_CHUNK = 65536
# After SIGKILL, how long we wait for the leader to go before giving up on it (uninterruptible sleep).
_KILL_WAIT_SECONDS = 5.0
# How long a cancelled run may go on at most before the supervisor notices (it wakes at least this often).
CANCEL_POLL_SECONDS = 0.1
_SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"

# The setup step's success report (dash: no fds > 9, so it goes to stdout, ahead of anything the program writes).
_JOINED_MARKER = b"goclaw:cgroup-joined\n"
# The one root step before the rest of the chain: join the run's cgroups (before anything can fork), make the
# run's bind mounts (inside the private mount namespace `unshare` gave it, so nothing leaks to the host or outlives
# the run), print the marker, exec the rest. Arguments: MOUNT N CGROUP_FILE... M SRC DST ..., then the chain.
_SETUP_SCRIPT = (
    'mnt=$1; n=$2; shift 2; '
    'while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; '
    'm=$1; shift; '
    'while [ "$m" -gt 0 ]; do "$mnt" --bind -- "$1" "$2" >/dev/null || exit 125; shift 2; m=$((m-1)); done; '
    'printf "goclaw:cgroup-joined\\n" || exit 125; exec "$@"'
)


def system_tool(name: str) -> str | None:
    """Absolute path of a util-linux tool from the system directories only (never the caller's PATH)."""
    return shutil.which(name, path=_SYSTEM_PATH)


class OutputStream:
    """One output stream: keeps the first `limit` bytes (minus an expected marker prefix), drops the rest."""

    __slots__ = ("buf", "limit", "truncated", "prefix", "seen", "expecting")

    def __init__(self, limit: int, prefix: bytes = b"") -> None:
        self.buf = bytearray()
        self.limit = limit
        self.truncated = False
        self.prefix = prefix  # expected first bytes (our own markers): consumed, not kept
        self.seen = bytearray()  # how much of it actually arrived, in order
        self.expecting = bool(prefix)

    @property
    def matched(self) -> int:
        return len(self.seen)

    def feed(self, data: bytes) -> None:
        if self.expecting:
            expected = self.prefix[len(self.seen):]
            chunk = data[:len(expected)]
            same = 0
            while same < len(chunk) and chunk[same] == expected[same]:
                same += 1
            self.seen += chunk[:same]
            data = data[same:]
            if same < len(chunk) or len(self.seen) == len(self.prefix):
                self.expecting = False  # complete, or something else arrived first: the rest is output
            if not data:
                return
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
    # (source, target) bind mounts made as the server's user in a private mount namespace before the RLIMITs /
    # privilege drop, e.g. bubblewrap's workspace gateway.
    root_binds: tuple[tuple[str, str], ...] = ()
    # A marker the innermost step prints to stdout right before exec'ing the program (bubblewrap: proof
    # that the sandbox was set up and the program was about to start); stripped from the output.
    inner_marker: bytes = b""
    # bubblewrap: on timeout SIGTERM reaches the program inside first, not the bwrap leader (whose
    # death would SIGKILL the sandbox at once); the SIGKILL after the grace period hits everything.
    term_spares_leader: bool = False


@dataclass
class Completed:
    returncode: int | None
    timed_out: bool
    stdout: OutputStream
    stderr: OutputStream
    duration_ms: float
    inner_marker_seen: bool = True
    cancelled: bool = False


class ProcessRunner:
    def __init__(self, *, drain_seconds: float = 2.0, poll_interval: float = 0.05) -> None:
        self.drain_seconds = drain_seconds
        self.poll_interval = poll_interval

    # --- building the chain -----------------------------------------------------------------------

    @staticmethod
    def chain(launch: Launch) -> list[str]:
        argv: list[str] = []
        if launch.root_binds:
            unshare, mount = system_tool("unshare"), system_tool("mount")
            if unshare is None or mount is None:
                raise SandboxError("cannot make the run's mounts: util-linux unshare and mount are needed")
            argv += [unshare, "--mount", "--propagation", "private", "--"]
        if launch.cgroup is not None or launch.root_binds:
            files = launch.cgroup.procs_files if launch.cgroup is not None else []
            binds = [path for pair in launch.root_binds for path in pair]
            argv += ["/bin/sh", "-c", _SETUP_SCRIPT, "goclaw-setup", system_tool("mount") or "mount",
                     str(len(files)), *files, str(len(launch.root_binds)), *binds]
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

    def run(self, launch: Launch, limits: ExecLimits, stdin: bytes | None,
            cancel: threading.Event | None = None) -> Completed:
        argv = self.chain(launch)
        join_marker = _JOINED_MARKER if launch.cgroup is not None or launch.root_binds else b""
        marker = join_marker + launch.inner_marker
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv, cwd=launch.cwd, env=launch.env,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True, start_new_session=True,
                pass_fds=tuple(launch.pass_fds),
            )
        except FileNotFoundError:
            raise SandboxError(f"executable not found: {argv[0]}") from None
        except PermissionError:
            raise SandboxError(f"permission denied starting {argv[0]}") from None
        except OSError as exc:
            raise SandboxError(f"could not start process: {exc.strerror or exc}") from None

        pgid = proc.pid  # start_new_session=True: the child is the leader of a new group
        try:
            timed_out, cancelled, out, err = self._supervise(proc, pgid, launch, limits, stdin, start, marker, cancel)
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
        if out.matched < len(join_marker) and not cancelled:  # a run cancelled during its setup step is just cancelled
            raise SandboxError("could not place the process in its cgroup or make its mounts; it was not run")
        return Completed(returncode=None if timed_out or cancelled else returncode, timed_out=timed_out,
                         stdout=out, stderr=err, duration_ms=duration_ms,
                         inner_marker_seen=out.matched == len(marker), cancelled=cancelled)

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
                   stdin: bytes | None, start: float, marker: bytes,
                   cancel: threading.Event | None) -> tuple[bool, bool, OutputStream, OutputStream]:
        """(timed out, cancelled, stdout, stderr). Cancelled only when the event ended a leader still running."""
        out, err = OutputStream(limits.max_output_bytes, marker), OutputStream(limits.max_output_bytes)
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
            timed_out = cancelled = False
            term_at: float | None = None
            kill_at: float | None = None
            exited_at: float | None = None

            def readers_open() -> bool:
                return any(isinstance(k.data, OutputStream) for k in sel.get_map().values())

            while True:
                now = time.monotonic()
                if exited_at is None and _leader_exited(proc.pid):
                    exited_at = now
                    if pidfd is not None:
                        sel.unregister(pidfd)
                        os.close(pidfd)
                        pidfd = None
                if exited_at is None:
                    if not cancelled and cancel is not None and cancel.is_set():
                        cancelled = True
                        kill_at = now
                        self._kill_tree(pgid, launch, signal.SIGKILL)
                    if not timed_out and not cancelled and now >= deadline:
                        timed_out = True
                        term_at = now
                        self._terminate(pgid, launch)
                    if timed_out and kill_at is None and now >= term_at + limits.grace_seconds:
                        kill_at = now
                        self._kill_tree(pgid, launch, signal.SIGKILL)
                    if kill_at is not None and now >= kill_at + _KILL_WAIT_SECONDS:
                        break  # the leader ignores SIGKILL (D state); stop supervising
                    if kill_at is not None:
                        next_event = kill_at + _KILL_WAIT_SECONDS
                    else:
                        next_event = term_at + limits.grace_seconds if timed_out else deadline
                else:
                    # A cancelled caller no longer waits for what background processes still write.
                    abandoned = cancel is not None and cancel.is_set()
                    if abandoned or not readers_open() or now >= exited_at + self.drain_seconds:
                        break
                    next_event = exited_at + self.drain_seconds
                wait = max(0.0, next_event - now)
                if pidfd is None and exited_at is None:
                    wait = min(wait, self.poll_interval)
                if cancel is not None and not cancelled:
                    wait = min(wait, CANCEL_POLL_SECONDS)
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
            return timed_out, cancelled, out, err
        finally:
            if pidfd is not None:
                os.close(pidfd)
            sel.close()

    @staticmethod
    def _read(sel: selectors.BaseSelector, fd: int, stream: OutputStream) -> bool:
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
            if not isinstance(key.data, OutputStream):
                sel.unregister(key.fd)
        end = time.monotonic() + min(0.5, self.drain_seconds)
        while True:
            keys = [k for k in sel.get_map().values() if isinstance(k.data, OutputStream)]
            if not keys:
                return
            remaining = end - time.monotonic()
            if remaining <= 0:
                return
            ready = sel.select(remaining)
            for key, _ in ready:
                if isinstance(key.data, OutputStream):
                    self._read(sel, key.fd, key.data)


# --- limits -----------------------------------------------------------------------------------------

# With max_processes unset, a run's pids cgroup still gets this ceiling, so a fork bomb can't take the
# machine down even when the caller forgot a limit.
PIDS_BACKSTOP = 1024


def apply_limits(launch: Launch, limits: ExecLimits, *, overhead_pids: int) -> tuple[tuple[str, ...], RunCgroup | None]:
    """Put `limits` on `launch`: pids/memory through a per-run cgroup where usable, else RLIMITs; CPU
    seconds, open files and file size always through RLIMITs. Returns (limits_enforced, cgroup); the
    caller removes the cgroup after the run. `overhead_pids` = processes the backend itself needs
    inside the cgroup (bwrap's monitor and init)."""
    from sandbox_app.cgroups import cgroup_support, create_run_cgroup

    support = cgroup_support()
    enforced: list[str] = []
    rlimits: dict[str, str] = {}
    use_pids = "pids" in support.controllers
    use_memory = "memory" in support.controllers and limits.memory_bytes > 0
    cgroup = None
    if use_pids or use_memory:
        max_pids = (limits.max_processes + overhead_pids) if limits.max_processes else PIDS_BACKSTOP
        try:
            cgroup = create_run_cgroup(max_pids=max_pids if use_pids else 0,
                                       memory_bytes=limits.memory_bytes if use_memory else 0)
        except OSError as exc:
            raise SandboxError(f"could not create the run's cgroup: {exc.strerror or exc}") from None
        if cgroup is None:
            use_pids = use_memory = False
    if limits.max_processes:
        if use_pids:
            enforced.append("max_processes:cgroup")
        else:
            rlimits["nproc"] = str(limits.max_processes + overhead_pids)
            enforced.append("max_processes:rlimit")
    if limits.memory_bytes:
        if use_memory:
            enforced.append("memory_bytes:cgroup")
        else:
            rlimits["as"] = str(limits.memory_bytes)
            enforced.append("memory_bytes:rlimit")
    if limits.cpu_seconds:
        # soft limit -> SIGXCPU, one second later the hard limit -> SIGKILL
        rlimits["cpu"] = f"{limits.cpu_seconds}:{limits.cpu_seconds + 1}"
        enforced.append("cpu_seconds:rlimit")
    if limits.max_open_files:
        rlimits["nofile"] = str(limits.max_open_files)
        enforced.append("max_open_files:rlimit")
    if limits.max_file_bytes:
        rlimits["fsize"] = str(limits.max_file_bytes)
        enforced.append("max_file_bytes:rlimit")
    launch.cgroup = cgroup
    launch.rlimits = rlimits
    return tuple(enforced), cgroup


_WRAPPER_FAILURES = (b"setpriv: failed to execute", b"prlimit: failed to execute")


def raise_if_wrapper_failed(done: Completed, program: str) -> None:
    """setpriv/prlimit could not exec the program (126/127 and their own message): the program never ran."""
    if done.returncode in (126, 127) and bytes(done.stderr.buf).startswith(_WRAPPER_FAILURES):
        if done.returncode == 127:
            raise SandboxError(f"executable not found: {program}")
        raise SandboxError(f"permission denied starting {program}")
