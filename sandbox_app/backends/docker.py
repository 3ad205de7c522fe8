"""The docker backend: each run is one throw-away container on the local engine (docker SDK, DOCKER_HOST).

The container sees the workspace read-write at /workspace and nothing else of the host beyond the
profile's read-only binds. It runs as the sandbox identity (never root) with every capability dropped,
no-new-privileges, the engine's default seccomp profile, a read-only root filesystem with a tmpfs /tmp,
network "none" (or the host's network, only for profiles with network *and* local access on), cgroup
memory / pids / CPU limits and rlimits (nofile, fsize, cpu). docker-init (tini) is PID 1: when the main
process exits or is killed, the PID namespace goes with it, so no grandchild outlives the run.

Output comes from an attach made before the start (the log driver is "none": nothing of the output is
written to the engine's disk); each stream keeps `max_output_bytes` and the rest is read and dropped.
On timeout: SIGTERM, then SIGKILL after `grace_seconds`; on cancellation (the caller's event): SIGKILL at once.
The container is removed in every case.
"""
from __future__ import annotations

import logging
import os
import posixpath
import socket
import struct
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from sandbox_app.runner import CANCEL_POLL_SECONDS, PIDS_BACKSTOP, OutputStream
from sandbox_app.runs import ExecLimits, ExecResult, SandboxError, SandboxSpec

logger = logging.getLogger(__name__)

DEFAULT_IMAGE = "goclaw-sandbox:latest"
IMAGE_BUILD_COMMAND = "python manage.py sandbox_image"
CONTAINER_WORKSPACE = "/workspace"
LABEL = "org.goclaw.sandbox"
LABEL_DEADLINE = "org.goclaw.sandbox.deadline"

_CONNECT_TIMEOUT = 5.0      # engine discovery + ping: a hung engine must not hang the factory
_API_TIMEOUT = 30.0         # create / start / kill / remove under load
_KILL_WAIT_SECONDS = 10.0   # after SIGKILL, how long we wait for the engine to report the exit
_DRAIN_SECONDS = 2.0        # after the exit, how long we wait for the attach stream to end
_SWEEP_EVERY_SECONDS = 60.0
_SWEEP_SLACK_SECONDS = 60.0
_MIN_MEMORY_BYTES = 6 * 1024 * 1024  # the engine refuses smaller memory limits
_READ_CHUNK = 65536

# Paths a read-only bind must not cover: the container's own mounts and kernel file systems.
_RESERVED_TARGETS = ("/", CONTAINER_WORKSPACE, "/tmp", "/proc", "/sys", "/dev", "/etc/hosts",
                     "/etc/hostname", "/etc/resolv.conf")


def engine_client(*, timeout: float = _CONNECT_TIMEOUT):
    """A docker SDK client for the local engine (DOCKER_HOST or the default socket), pinged once.

    Raises SandboxError("docker engine not reachable: ...") when no engine answers, and refuses engines
    that are not on a local unix socket (bind mounts name this machine's paths)."""
    try:
        import docker
    except ImportError:  # pragma: no cover - pinned in requirements.txt
        raise SandboxError("docker engine not reachable: the docker Python SDK is not installed") from None
    remote = SandboxError("docker engine not reachable: the docker backend needs a local engine on a unix "
                          "socket (DOCKER_HOST=unix:///path), not a remote one")
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        raise remote  # checked before connecting: a tcp:// or ssh:// engine is never contacted
    where = host or "the default socket"
    try:
        client = docker.from_env(timeout=timeout, max_pool_size=32)
    except Exception as exc:
        raise SandboxError(f"docker engine not reachable at {where}: {_short_error(exc)}") from None
    try:
        if client.api.base_url != "http+docker://localhost":  # e.g. a remote docker context
            raise remote
        client.ping()
    except SandboxError:
        client.close()
        raise
    except Exception as exc:
        client.close()
        raise SandboxError(f"docker engine not reachable at {where}: {_short_error(exc)}") from None
    client.api.timeout = _API_TIMEOUT
    return client


def _short_error(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]


def _sandbox_user(workspace_real: str) -> tuple[int, int]:
    """The uid/gid the container runs as — the sandbox identity (goclaw-sandbox when the server is root,
    else the server's own user) — after making the workspace root writable for it."""
    from sandbox_app.identity import prepare_workspace, sandbox_identity

    identity = sandbox_identity()
    if identity.uid == 0 or identity.gid == 0:  # the identity module refuses this too; never run as root
        raise SandboxError("refusing to run a sandbox container as root")
    prepare_workspace(Path(workspace_real), identity)
    return identity.uid, identity.gid


class _Demux:
    """Splits the engine's multiplexed attach stream (8-byte frame headers) into stdout and stderr."""

    def __init__(self, out: OutputStream, err: OutputStream) -> None:
        self.streams = {1: out, 2: err}
        self.header = bytearray()
        self.remaining = 0
        self.target: OutputStream | None = None

    def feed(self, data: memoryview) -> None:
        while data:
            if self.remaining == 0:
                need = 8 - len(self.header)
                self.header += data[:need]
                data = data[need:]
                if len(self.header) == 8:
                    kind, size = self.header[0], struct.unpack(">I", self.header[4:8])[0]
                    self.target = self.streams.get(kind)  # 0 (stdin echo) never happens without a tty
                    self.remaining = size
                    self.header.clear()
                continue
            chunk = data[:self.remaining]
            if self.target is not None:
                self.target.feed(chunk)
            self.remaining -= len(chunk)
            data = data[len(chunk):]


class DockerBackend:
    """Runs each process in a fresh locked-down container on the local docker engine."""

    name = "docker"

    def __init__(self, client: Any = None, *, default_image: str = DEFAULT_IMAGE, cpus: float = 1.0,
                 tmp_bytes: int = 64 * 1024 * 1024) -> None:
        self.client = client if client is not None else engine_client()
        self.default_image = default_image
        self.nano_cpus = int(cpus * 1e9) if cpus and cpus > 0 else 0
        self.tmp_bytes = int(tmp_bytes)
        self._sweep_lock = threading.Lock()
        self._next_sweep = 0.0
        self._sweep()

    # --- the run ----------------------------------------------------------------------------------

    def run(self, *, argv: list[str], workspace: Path, cwd: Path, env: dict[str, str], limits: ExecLimits,
            spec: SandboxSpec, stdin: bytes | None, cancel: threading.Event | None = None) -> ExecResult:
        started = time.monotonic()
        self._sweep()
        from docker.errors import APIError, ImageNotFound

        api = self.client.api
        image = spec.image or self.default_image
        workspace_real, workdir = _map_cwd(workspace, cwd)
        mounts = _mounts(workspace_real, spec.ro_binds)
        network_mode = _network_mode(spec)
        uid, gid = _sandbox_user(workspace_real)
        environment = self._environment(image, env)
        host_config, enforced = self._host_config(mounts, network_mode, limits)

        name = f"goclaw-sbx-{uuid.uuid4().hex[:16]}"
        deadline_label = str(int(time.time() + limits.timeout_seconds + limits.grace_seconds + _SWEEP_SLACK_SECONDS))
        try:
            created = api.create_container(
                image, entrypoint=[argv[0]], command=list(argv[1:]), user=f"{uid}:{gid}", working_dir=workdir,
                environment=environment, host_config=host_config, hostname="sandbox", name=name,
                stdin_open=stdin is not None, tty=False, labels={LABEL: "1", LABEL_DEADLINE: deadline_label},
                healthcheck={"test": ["NONE"]}, use_config_proxy=False,  # no proxy variables from ~/.docker
            )
        except ImageNotFound:
            raise _missing_image(image) from None
        except APIError as exc:
            raise SandboxError(f"docker could not create the sandbox container: {_api_message(exc)}") from None
        except Exception as exc:  # connection refused / reset, timeouts: the engine went away
            raise SandboxError(f"docker engine not reachable: {_short_error(exc)}") from None
        cid = created["Id"]
        for warning in created.get("Warnings") or ():
            enforced = _drop_discarded(enforced, warning)

        raw = sock = None
        threads: list[threading.Thread] = []
        try:
            out, err = OutputStream(limits.max_output_bytes), OutputStream(limits.max_output_bytes)
            try:
                raw, sock = self._attach(cid, stdin is not None)
            except SandboxError:
                raise
            except Exception as exc:
                raise SandboxError(f"docker could not attach to the sandbox container: {_short_error(exc)}") from None
            reader = threading.Thread(target=_read_frames, args=(sock, _Demux(out, err)), daemon=True,
                                      name=f"{name}-out")
            reader.start()
            threads.append(reader)
            try:
                api.start(cid)
            except Exception as exc:
                raise SandboxError(f"docker could not start the sandbox container: {_api_message(exc)}") from None
            if stdin is not None:
                writer = threading.Thread(target=_write_stdin, args=(sock, bytes(stdin)), daemon=True,
                                          name=f"{name}-in")
                writer.start()
                threads.append(writer)

            status: dict[str, Any] = {}
            exited = threading.Event()
            hard_cap = limits.timeout_seconds + limits.grace_seconds + _KILL_WAIT_SECONDS + _API_TIMEOUT
            waiter = threading.Thread(target=self._wait, args=(cid, hard_cap, status, exited), daemon=True,
                                      name=f"{name}-wait")
            waiter.start()
            threads.append(waiter)

            timed_out = cancelled = False
            if not _exited_within(exited, limits.timeout_seconds, cancel):
                cancelled = cancel is not None and cancel.is_set()
                timed_out = not cancelled
                if timed_out:
                    self._kill(cid, "SIGTERM")
                if cancelled or not _exited_within(exited, limits.grace_seconds, cancel):
                    cancelled = cancel is not None and cancel.is_set()
                    self._kill(cid, "SIGKILL")
                    exited.wait(_KILL_WAIT_SECONDS)
            reader.join(_DRAIN_SECONDS)

            exit_code: int | None = None
            oom_killed = False
            if not timed_out and not cancelled:
                if "error" in status or "StatusCode" not in status:
                    raise SandboxError("docker did not report how the sandbox container ended: "
                                       f"{status.get('error', 'no status')}")
                exit_code = _exit_code(int(status["StatusCode"]))
                if exit_code != 0 and limits.memory_bytes:
                    try:
                        oom_killed = bool(api.inspect_container(cid)["State"].get("OOMKilled"))
                    except Exception:  # the exit code stands; only the OOM note is lost
                        oom_killed = False
                if exit_code == 127:
                    _raise_if_exec_failed(err, argv[0])
            stderr = err.text()
            if oom_killed:
                stderr += (f"\n[sandbox] killed: the run exceeded its memory limit "
                           f"({limits.memory_bytes} bytes)\n")
            return ExecResult(
                exit_code=exit_code, stdout=out.text(), stderr=stderr,
                stdout_truncated=out.truncated, stderr_truncated=err.truncated, timed_out=timed_out,
                duration_ms=(time.monotonic() - started) * 1000.0, backend=self.name, profile=spec.profile,
                limits_enforced=tuple(enforced) + ("timeout_seconds:container",), cancelled=cancelled,
            )
        finally:
            if sock is not None:
                _close_socket(sock)
                _close_socket(raw)
            self._remove(cid)
            for thread in threads:
                thread.join(1.0)

    # --- pieces -----------------------------------------------------------------------------------

    def _environment(self, image: str, env: dict[str, str]) -> list[str]:
        """The caller's env, and nothing else: the image's ENV entries and the engine's PATH / HOSTNAME
        defaults are unset by naming them without a value (the engine's "remove this variable" form)."""
        from docker.errors import APIError, ImageNotFound

        try:
            config = self.client.api.inspect_image(image).get("Config") or {}
        except ImageNotFound:
            raise _missing_image(image) from None
        except APIError as exc:
            raise SandboxError(f"docker image {image} is not usable: {_api_message(exc)}") from None
        except Exception as exc:
            raise SandboxError(f"docker engine not reachable: {_short_error(exc)}") from None
        result = [f"{key}={value}" for key, value in env.items()]
        unset = {entry.split("=", 1)[0] for entry in (config.get("Env") or ())} | {"PATH", "HOSTNAME"}
        result += sorted(name for name in unset if name and name not in env)
        return result

    def _host_config(self, mounts: list, network_mode: str, limits: ExecLimits) -> tuple[dict, list[str]]:
        from docker.types import LogConfig, Ulimit

        enforced: list[str] = []
        kwargs: dict[str, Any] = {}
        if limits.memory_bytes:
            if limits.memory_bytes < _MIN_MEMORY_BYTES:
                raise SandboxError(f"memory_bytes {limits.memory_bytes} is below the docker minimum of "
                                   f"{_MIN_MEMORY_BYTES} bytes")
            kwargs.update(mem_limit=limits.memory_bytes, memswap_limit=limits.memory_bytes)
            enforced.append("memory_bytes:cgroup")
        # docker-init (PID 1) counts against the pids cgroup; unset, the same backstop as the other backends.
        kwargs["pids_limit"] = limits.max_processes + 1 if limits.max_processes else PIDS_BACKSTOP
        if limits.max_processes:
            enforced.append("max_processes:cgroup")
        ulimits = []
        if limits.cpu_seconds:  # soft limit -> SIGXCPU, one second later the hard limit -> SIGKILL
            ulimits.append(Ulimit(name="cpu", soft=limits.cpu_seconds, hard=limits.cpu_seconds + 1))
            enforced.append("cpu_seconds:rlimit")
        if limits.max_open_files:
            ulimits.append(Ulimit(name="nofile", soft=limits.max_open_files, hard=limits.max_open_files))
            enforced.append("max_open_files:rlimit")
        if limits.max_file_bytes:
            ulimits.append(Ulimit(name="fsize", soft=limits.max_file_bytes, hard=limits.max_file_bytes))
            enforced.append("max_file_bytes:rlimit")
        if self.nano_cpus:
            kwargs["nano_cpus"] = self.nano_cpus
        tmp_size = self.tmp_bytes
        host_config = self.client.api.create_host_config(
            mounts=mounts, network_mode=network_mode, ulimits=ulimits or None,
            security_opt=["no-new-privileges"], cap_drop=["ALL"], read_only=True, privileged=False,
            tmpfs={"/tmp": f"rw,nosuid,nodev,size={tmp_size},mode=1777"}, init=True, ipc_mode="private",
            log_config=LogConfig(type="none"), oom_score_adj=1000, **kwargs,
        )
        return host_config, enforced

    def _attach(self, cid: str, with_stdin: bool) -> tuple[Any, socket.socket]:
        """(the SDK's socket object, kept referenced so nothing closes it early; the socket under it)."""
        params = {"stdout": 1, "stderr": 1, "stream": 1, "stdin": 1 if with_stdin else 0}
        raw = self.client.api.attach_socket(cid, params=params)
        sock = getattr(raw, "_sock", raw)  # socket.SocketIO over a unix socket
        if not isinstance(sock, socket.socket):
            _close_socket(raw)
            raise SandboxError("docker attach did not return a socket (the engine must be on a unix socket)")
        sock.settimeout(None)  # a quiet process is not an error; the run's deadline is enforced elsewhere
        return raw, sock

    def _wait(self, cid: str, timeout: float, status: dict, exited: threading.Event) -> None:
        try:
            status.update(self.client.api.wait(cid, timeout=timeout))
        except Exception as exc:
            status["error"] = _short_error(exc)
        finally:
            exited.set()

    def _kill(self, cid: str, sig: str) -> None:
        from docker.errors import APIError

        try:
            self.client.api.kill(cid, signal=sig)
        except APIError:  # already gone: fine
            pass
        except Exception as exc:  # the final forced removal still runs
            logger.warning("could not signal sandbox container %s: %s", cid[:12], _short_error(exc))

    def _remove(self, cid: str) -> None:
        from docker.errors import NotFound

        try:
            self.client.api.remove_container(cid, force=True, v=True)
        except NotFound:
            pass
        except Exception as exc:  # the sweep removes it later (it carries a deadline label)
            logger.warning("could not remove sandbox container %s: %s", cid[:12], _short_error(exc))

    def _sweep(self) -> None:
        """Remove sandbox containers past their deadline (left behind by a crashed server process)."""
        now = time.monotonic()
        if now < self._next_sweep or not self._sweep_lock.acquire(blocking=False):
            return
        try:
            self._next_sweep = now + _SWEEP_EVERY_SECONDS
            wall = time.time()
            for row in self.client.api.containers(all=True, filters={"label": LABEL}):
                try:
                    deadline = float((row.get("Labels") or {}).get(LABEL_DEADLINE, "0"))
                except ValueError:
                    deadline = 0.0
                if deadline < wall:
                    self._remove(row["Id"])
        except Exception as exc:
            logger.warning("sandbox container sweep failed: %s", _short_error(exc))
        finally:
            self._sweep_lock.release()


# --- helpers ----------------------------------------------------------------------------------------

def _exited_within(exited: threading.Event, seconds: float, cancel: threading.Event | None) -> bool:
    """Whether the container exited within `seconds`; False as soon as `cancel` is set (looked at every
    CANCEL_POLL_SECONDS), so a cancelled run is killed without waiting for its deadline."""
    if cancel is None:
        return exited.wait(seconds)
    end = time.monotonic() + seconds
    while not cancel.is_set():
        remaining = end - time.monotonic()
        if exited.wait(max(0.0, min(CANCEL_POLL_SECONDS, remaining))):
            return True
        if remaining <= CANCEL_POLL_SECONDS:
            return exited.is_set()
    return False


def _missing_image(image: str) -> SandboxError:
    if image == DEFAULT_IMAGE:
        hint = f"build it with `{IMAGE_BUILD_COMMAND}`"
    else:
        hint = f"build or load it into the local engine (`{IMAGE_BUILD_COMMAND}` builds {DEFAULT_IMAGE})"
    return SandboxError(f"docker image {image} is missing: {hint}; nothing is pulled from a registry")


def _api_message(exc: Exception) -> str:
    explanation = getattr(exc, "explanation", None)
    return _short_error(Exception(explanation) if explanation else exc)


def _map_cwd(workspace: Path, cwd: Path) -> tuple[str, str]:
    """(real workspace path, working directory inside the container) — cwd must lie inside the workspace."""
    ws = Path(workspace)
    if not ws.is_absolute():
        raise SandboxError(f"workspace must be an absolute path: {workspace}")
    ws_real = os.path.realpath(ws)
    if ws_real == "/":
        raise SandboxError("refusing to use / as a sandbox workspace")
    if not os.path.isdir(ws_real):
        raise SandboxError(f"workspace does not exist: {workspace}")
    cwd_real = os.path.realpath(cwd)
    rel = os.path.relpath(cwd_real, ws_real)
    if rel == os.pardir or rel.startswith(os.pardir + os.sep) or os.path.isabs(rel):
        raise SandboxError(f"working directory {cwd} is outside the workspace")
    return ws_real, CONTAINER_WORKSPACE if rel == "." else posixpath.join(CONTAINER_WORKSPACE, rel)


def _mounts(workspace_real: str, ro_binds: tuple[str, ...]) -> list:
    from docker.types import Mount

    mounts = [Mount(target=CONTAINER_WORKSPACE, source=workspace_real, type="bind", read_only=False)]
    seen = {CONTAINER_WORKSPACE}
    for path in ro_binds or ():
        if not isinstance(path, str) or not path.startswith("/") or "\x00" in path:
            raise SandboxError(f"read-only bind must be an absolute path: {path!r}")
        target = posixpath.normpath(path)
        if target != path.rstrip("/") and path != "/":
            raise SandboxError(f"read-only bind must be a normalised path: {path}")
        for reserved in _RESERVED_TARGETS:
            covered = target == reserved or (reserved not in ("/", "/tmp") and target.startswith(reserved + "/"))
            if covered:
                raise SandboxError(f"read-only bind {path} would cover {reserved} inside the sandbox")
        if not os.path.exists(target):
            raise SandboxError(f"read-only bind {path} does not exist")
        if target in seen:
            continue
        seen.add(target)
        mounts.append(Mount(target=target, source=target, type="bind", read_only=True))
    return mounts


def _network_mode(spec: SandboxSpec) -> str:
    if not spec.network:
        return "none"
    if spec.network_local:
        return "host"
    raise SandboxError("the docker backend cannot give network access without local access: its only "
                       "networked mode is the host's network; allow local access in the profile or use bubblewrap")


def _drop_discarded(enforced: list[str], warning: str) -> list[str]:
    """The engine warns (instead of failing) when the kernel lacks a cgroup controller: report truthfully."""
    text = warning.lower()
    if "memory limit" in text and "discard" in text:
        return [e for e in enforced if not e.startswith("memory_bytes")]
    if "pids limit" in text and "discard" in text:
        return [e for e in enforced if not e.startswith("max_processes")]
    return enforced


def _exit_code(status: int) -> int:
    """docker-init exits 128+N when the process died from signal N; ExecResult wants -N for that."""
    if 128 < status <= 128 + 64:
        return -(status - 128)
    return status


def _raise_if_exec_failed(err: OutputStream, program: str) -> None:
    """docker-init reports a failed exec as exit 127 and "[FATAL tini (N)] exec X failed: <reason>":
    that is a process that could not be started, so SandboxError, as on the other backends."""
    text = bytes(err.buf[:400]).decode("utf-8", errors="replace").strip()
    if not (text.startswith("[FATAL tini") and " exec " in text and " failed: " in text):
        return
    reason = text.split(" failed: ", 1)[1].splitlines()[0]
    if "No such file" in reason:
        raise SandboxError(f"executable not found: {program}")
    if "Permission denied" in reason:
        raise SandboxError(f"permission denied starting {program}")
    raise SandboxError(f"could not start process: {reason[:200]}")


def _read_frames(sock: socket.socket, demux: _Demux) -> None:
    buf = bytearray(_READ_CHUNK)
    view = memoryview(buf)
    while True:
        try:
            n = sock.recv_into(buf)
        except InterruptedError:
            continue
        except OSError:
            return
        if n == 0:
            return
        demux.feed(view[:n])


def _write_stdin(sock: socket.socket, data: bytes) -> None:
    try:
        if data:
            sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)  # EOF on the process's stdin (stdin_once)
    except OSError:  # the process exited without reading everything
        pass


def _close_socket(sock: Any) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)  # wakes a reader blocked in recv
    except (OSError, AttributeError):
        pass
    try:
        sock.close()
    except OSError:
        pass


__all__ = ["DockerBackend", "engine_client", "DEFAULT_IMAGE", "IMAGE_BUILD_COMMAND"]
