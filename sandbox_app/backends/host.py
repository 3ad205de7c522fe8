"""The host backend: runs the process directly on this machine, in its own session / process group.

No isolation beyond what the caller gives it (minimal env, cwd, limits). Guarantees:
- stdout/stderr are read concurrently (one selector loop), the first `max_output_bytes` of each are
  kept and the rest is drained and discarded, so the child never blocks on a full pipe;
- on timeout the WHOLE process group gets SIGTERM, then SIGKILL after `grace_seconds`;
- when the main process exits, descendants still holding the pipes get `drain_seconds` to finish
  writing, then the group is SIGKILLed and we stop reading — a `sleep 100 &` can't hang the call;
- any processes left in the group after the main process exits are killed (a run leaves nothing
  behind). The leader is only reaped after that kill, so its pid (= the pgid) can't have been reused.
"""
from __future__ import annotations

import errno
import os
import selectors
import signal
import subprocess
import time
from pathlib import Path

from sandbox_app.services import ExecLimits, ExecResult, SandboxError

_READ_CHUNK = 65536
_WRITE_CHUNK = 65536
# After SIGKILL, how long we wait for the leader to go before giving up on it (uninterruptible sleep).
_KILL_WAIT_SECONDS = 5.0


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


class HostBackend:
    name = "host"

    def __init__(self, *, drain_seconds: float = 2.0, poll_interval: float = 0.05) -> None:
        self.drain_seconds = drain_seconds
        self.poll_interval = poll_interval

    def run(self, *, argv: list[str], cwd: Path, env: dict[str, str], limits: ExecLimits,
            stdin: bytes | None) -> ExecResult:
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv, cwd=str(cwd), env=env, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True, start_new_session=True,
            )
        except FileNotFoundError:
            raise SandboxError(f"executable not found: {argv[0]}") from None
        except PermissionError:
            raise SandboxError(f"permission denied starting {argv[0]}") from None
        except OSError as exc:
            raise SandboxError(f"could not start process: {exc.strerror or exc}") from None

        pgid = proc.pid  # start_new_session=True: the child is the leader of a new group
        try:
            timed_out, out, err = self._supervise(proc, pgid, limits, stdin, start)
        except BaseException:
            _killpg(pgid, signal.SIGKILL)
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
        return ExecResult(
            exit_code=None if timed_out else returncode,
            stdout=out.text(), stderr=err.text(),
            stdout_truncated=out.truncated, stderr_truncated=err.truncated,
            timed_out=timed_out, duration_ms=(time.monotonic() - start) * 1000.0, backend=self.name,
        )

    def _supervise(self, proc: subprocess.Popen, pgid: int, limits: ExecLimits, stdin: bytes | None,
                   start: float) -> tuple[bool, _Stream, _Stream]:
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
                        _killpg(pgid, signal.SIGTERM)
                    if timed_out and kill_at is None and now >= term_at + limits.grace_seconds:
                        kill_at = now
                        _killpg(pgid, signal.SIGKILL)
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
            _killpg(pgid, signal.SIGKILL)
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
