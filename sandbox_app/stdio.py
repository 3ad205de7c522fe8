"""Sandboxed launch of a long-lived process that talks over plain stdin/stdout pipes (a stdio MCP server).

`sandbox_exec` runs a command to completion and supervises its pipes itself; a stdio server is instead spawned
by whoever speaks its protocol (the MCP SDK). So this module only builds the command line: the same isolation as
a bubblewrap run (namespaces, minimal /etc, read-only system, the sandbox uid, no capabilities, network off
unless the spec says on) with two differences forced by the pipes — nothing but the program ever writes to
stdout (no start markers: the JSON stream must stay clean), and no fds are handed over (the workdir is bound
by path). Limits are RLIMITs through prlimit (no per-run cgroup: the process outlives any call).

The docker backend instead gives `docker run -i --rm --init` on the engine its client talks to, as the sandbox
user, with the docker backend's isolation and cgroup limits, under a guard that removes the container when the
CLI dies (see `_DOCKER_GUARD_SCRIPT`). Its containers carry `STDIO_LABEL` and names starting `goclaw-stdio-`.
"""
from __future__ import annotations

import os
import uuid
from pathlib import Path

from sandbox_app import backends
from sandbox_app.identity import prepare_workspace
from sandbox_app.runner import Launch, ProcessRunner, system_tool
from sandbox_app.runs import WORKSPACE_MOUNT, ExecLimits, SandboxError, SandboxSpec
from sandbox_app.services import DEFAULT_PATH, _default_path

# The gateway step for a workdir the sandbox user can't reach (see bubblewrap.GATEWAY): bind it in a private
# mount namespace, then exec the rest — silently (mount's output goes to stderr, never stdout).
_GATEWAY_SCRIPT = 'mnt=$1; "$mnt" --bind -- "$2" "$3" >&2 || exit 125; shift 3; exec "$@"'

# Docker stdio servers: the container outlives a docker CLI that is SIGKILLed (the SDK's last resort) when its
# process ignores both the end of stdin and SIGTERM. So the CLI runs with the write end of a pipe on fd 9, and a
# watcher in its own session (out of reach of the SDK's process-group kill) reads the other end: EOF means the
# CLI is gone, and the watcher removes the container by name. Nothing but the CLI ever writes to stdout.
# $1 setsid, $2 docker, $3 engine host, $4 container name, the rest: `docker run` arguments.
_DOCKER_GUARD_SCRIPT = (
    'setsid=$1 docker=$2 host=$3 name=$4; shift 4; exec 3>&1; '
    '( exec 9>&1 1>&3 3>&-; exec "$docker" -H "$host" "$@" ) | '
    '"$setsid" /bin/sh -c \'cat >/dev/null; exec "$0" -H "$1" rm -f "$2"\' "$docker" "$host" "$name" '
    '>/dev/null 2>&1 3>&-'
)
STDIO_CONTAINER_PREFIX = "goclaw-stdio-"
# Not the docker backend's label: its sweep removes labelled containers past a deadline, and a stdio server has none.
STDIO_LABEL = "org.goclaw.sandbox.stdio"


def stdio_rlimits(limits: ExecLimits | None) -> dict[str, str]:
    """prlimit options for a long-lived process. RLIMIT_NPROC counts every process of the sandbox uid on the
    machine (not just this one's), so `max_processes` is a ceiling shared with concurrent runs."""
    if limits is None:
        return {}
    rlimits: dict[str, str] = {}
    if limits.memory_bytes:
        rlimits["as"] = str(limits.memory_bytes)
    if limits.max_processes:
        rlimits["nproc"] = str(limits.max_processes + 2)  # bwrap's monitor and init
    if limits.cpu_seconds:
        rlimits["cpu"] = f"{limits.cpu_seconds}:{limits.cpu_seconds + 1}"
    if limits.max_open_files:
        rlimits["nofile"] = str(limits.max_open_files)
    if limits.max_file_bytes:
        rlimits["fsize"] = str(limits.max_file_bytes)
    return rlimits


def sandbox_stdio_command(*, argv: list[str], spec: SandboxSpec, workdir: Path, env: dict[str, str],
                          limits: ExecLimits | None = None) -> tuple[list[str], dict[str, str]]:
    """(argv, env) that start `argv` as a long-lived process in `spec`'s sandbox with stdin/stdout as plain
    pipes; the caller spawns it (cwd "/"). `host` returns argv unchanged. Raises `SandboxError` (fail closed)."""
    if not isinstance(spec, SandboxSpec):
        raise SandboxError("spec must be a SandboxSpec")
    if not argv or not all(isinstance(a, str) and "\x00" not in a for a in argv):
        raise SandboxError("argv must be a non-empty list of strings without NUL bytes")
    backend = backends.resolve_backend(spec.backend)  # fail closed: "auto" never resolves to host
    if backend.name == "host":
        return list(argv), dict(env)
    workdir = Path(os.path.realpath(workdir))
    if not workdir.is_dir():
        raise SandboxError(f"working directory {workdir} does not exist")
    if backend.name == "docker":
        return _docker_command(argv=argv, spec=spec, workdir=workdir, env=env, backend=backend, limits=limits)
    if backend.name != "bubblewrap":
        raise SandboxError(f"sandbox backend {backend.name} cannot start a stdio process")
    return _bubblewrap_command(argv=argv, spec=spec, workdir=workdir, env=env, backend=backend, limits=limits)


def _bubblewrap_command(*, argv: list[str], spec: SandboxSpec, workdir: Path, env: dict[str, str], backend,
                        limits: ExecLimits | None) -> tuple[list[str], dict[str, str]]:
    """The bubblewrap backend's own argument builders, minus its fds and stdout marker."""
    if spec.network and not spec.network_local:
        raise SandboxError("the bubblewrap backend cannot restrict network destinations: a profile with "
                           "network on must allow local addresses (network_local) or use the docker backend")
    network = bool(spec.network)
    extra_binds = backend._ro_bind_args(tuple(spec.ro_binds))
    prepare_workspace(workdir, backend.identity)
    gateway: tuple[str, str] | None = None
    if backend._searchable_by_sandbox(workdir):
        ws_args = ["--bind", str(workdir), WORKSPACE_MOUNT]
    else:
        target = backend._gateway()
        gateway = (str(workdir), target)
        ws_args = ["--bind", target, WORKSPACE_MOUNT]
    etc_dir = backend.etc_dir if backend.etc_dir is not None and backend.etc_dir.is_dir() else None
    if not network and etc_dir is not None:
        etc_args = ["--ro-bind", str(etc_dir), "/etc"]
    else:
        # file by file; passwd/group from the prepared directory (no data fds: the SDK spawns the process)
        etc_args = backend._etc_args(network=network)
        if etc_dir is not None:
            for name in ("passwd", "group"):
                etc_args += ["--ro-bind", str(etc_dir / name), f"/etc/{name}"]
    bwrap_argv = [
        backend.bwrap, *backend._isolation_args(network=network), *backend._system_args(), *etc_args,
        "--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp",
        *ws_args, *extra_binds, "--remount-ro", "/", "--chdir", WORKSPACE_MOUNT,
        "--", *argv,
    ]
    child_env = dict(env)
    home = child_env.get("HOME", "/nonexistent")
    if home == "/nonexistent":
        child_env["HOME"] = WORKSPACE_MOUNT
    elif home == str(workdir) or home.startswith(str(workdir) + "/"):
        child_env["HOME"] = WORKSPACE_MOUNT + home[len(str(workdir)):]
    # safe_child_env's PATH names the server's own directories: meaningless inside, as in sandbox_exec
    if child_env.get("PATH") == _default_path():
        child_env["PATH"] = DEFAULT_PATH
    launch = Launch(argv=bwrap_argv, env=child_env, cwd="/", identity=backend.identity,
                    rlimits=stdio_rlimits(limits))
    chain = ProcessRunner.chain(launch)  # prlimit -> setpriv -> bwrap: every step exec's, none prints
    if gateway is not None:
        unshare, mount = system_tool("unshare"), system_tool("mount")
        if unshare is None or mount is None:
            raise SandboxError("cannot make the workdir's mount: util-linux unshare and mount are needed")
        chain = [unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", _GATEWAY_SCRIPT,
                 "goclaw-stdio-setup", mount, gateway[0], gateway[1], *chain]
    return chain, child_env


def _docker_command(*, argv: list[str], spec: SandboxSpec, workdir: Path, env: dict[str, str], backend,
                    limits: ExecLimits | None) -> tuple[list[str], dict[str, str]]:
    """`docker run -i --rm --init` with the docker backend's isolation, on the engine the backend's client talks
    to, under a guard that removes the container once the CLI is gone (even SIGKILLed). Env values travel in
    the CLI's own environment (`-e NAME`), never on its command line; nothing else of goclaw's goes in."""
    from sandbox_app.backends.docker import (
        _MIN_MEMORY_BYTES, DEFAULT_IMAGE, _missing_image, _mounts, _network_mode, _sandbox_user,
    )

    docker = system_tool("docker") or ("/usr/local/bin/docker" if os.path.exists("/usr/local/bin/docker") else None)
    setsid = system_tool("setsid")
    if docker is None:
        raise SandboxError("the docker CLI is not installed")
    if setsid is None:
        raise SandboxError("cannot guard a docker stdio server: util-linux setsid is needed")
    for name in env:
        if name.upper().startswith("DOCKER_"):  # it would steer the docker CLI itself, which reads the same env
            raise SandboxError(f"environment variable {name} cannot be given to a server in a docker sandbox")
    network = _network_mode(spec)
    host = _engine_host(backend)
    image = spec.image or getattr(backend, "default_image", "") or DEFAULT_IMAGE
    _require_image(backend, image, _missing_image)
    mounts = _mounts(str(workdir), tuple(spec.ro_binds))  # validated as for a docker run: reserved, existing
    uid, gid = _sandbox_user(str(workdir))  # the sandbox identity (never root); the workdir made writable for it
    name = f"{STDIO_CONTAINER_PREFIX}{uuid.uuid4().hex[:16]}"
    run = ["run", "-i", "--rm", "--init", "--pull", "never", "--name", name, "--label", f"{STDIO_LABEL}=1",
           "--network", network, "--user", f"{uid}:{gid}", "--hostname", "sandbox", "--ipc", "private",
           "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--read-only", "--no-healthcheck",
           "--tmpfs", f"/tmp:rw,nosuid,nodev,size={int(getattr(backend, 'tmp_bytes', 64 * 1024 * 1024))},mode=1777",
           "--log-driver", "none", "--oom-score-adj", "1000"]
    for mount in mounts:
        source, target = str(mount["Source"]), str(mount["Target"])
        if any(c in source for c in ',"\n'):
            raise SandboxError(f"cannot bind {source} into a docker sandbox: commas, quotes and newlines are refused")
        run += ["--mount", f"type=bind,source={source},target={target}" + (",readonly" if mount["ReadOnly"] else "")]
    run += _docker_limit_args(limits, getattr(backend, "nano_cpus", 0), _MIN_MEMORY_BYTES)

    child_env = {k: v for k, v in env.items() if k not in ("HOME", "PATH")}
    path = env.get("PATH", "")
    run += ["-e", "PATH=" + (DEFAULT_PATH if not path or path == _default_path() else path)]
    run += ["-e", "HOME=" + _home_inside(env.get("HOME", "/nonexistent"), workdir)]
    for key in child_env:
        run += ["-e", key]  # the value comes from the CLI's environment below
    run += ["--workdir", WORKSPACE_MOUNT, image, *argv]

    cli_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent", "DOCKER_CLI_HINTS": "false",
               **child_env}
    guard = ["/bin/sh", "-c", _DOCKER_GUARD_SCRIPT, "goclaw-stdio-guard", setsid, docker, host, name]
    return [*guard, *run], cli_env


def _engine_host(backend) -> str:
    """The unix socket of the engine the docker backend's client talks to (so the CLI can't pick another
    through a context or config); a non-unix engine is refused, as the backend refuses it."""
    adapter = getattr(getattr(getattr(backend, "client", None), "api", None), "_custom_adapter", None)
    socket_path = getattr(adapter, "socket_path", "")
    if isinstance(socket_path, str) and socket_path.startswith("/"):
        return "unix://" + socket_path
    host = os.environ.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        return host
    if not host:
        return "unix:///var/run/docker.sock"
    raise SandboxError("the docker backend needs a local engine on a unix socket (DOCKER_HOST=unix:///path)")


def _require_image(backend, image: str, missing) -> None:
    """Refuse to launch when the image is not in the engine (`--pull never`: no registry is ever asked)."""
    client = getattr(backend, "client", None)
    if client is None:
        return
    from docker.errors import ImageNotFound

    try:
        client.api.inspect_image(image)
    except ImageNotFound:
        raise missing(image) from None
    except Exception as exc:
        raise SandboxError(f"docker engine not reachable: {exc}") from None


def _docker_limit_args(limits: ExecLimits | None, nano_cpus: int, min_memory: int) -> list[str]:
    """cgroup limits (memory, pids, CPU share) and rlimits (nofile, fsize, cpu) as `docker run` options."""
    from sandbox_app.runner import PIDS_BACKSTOP

    args: list[str] = []
    if nano_cpus:
        args += ["--cpus", f"{nano_cpus / 1e9:g}"]
    if limits is not None and limits.memory_bytes:
        if limits.memory_bytes < min_memory:
            raise SandboxError(f"memory_bytes {limits.memory_bytes} is below the docker minimum of {min_memory} bytes")
        args += ["--memory", str(limits.memory_bytes), "--memory-swap", str(limits.memory_bytes)]
    # docker-init (PID 1) counts against the pids cgroup; unset, the same backstop as the other backends
    pids = limits.max_processes + 1 if limits is not None and limits.max_processes else PIDS_BACKSTOP
    args += ["--pids-limit", str(pids)]
    if limits is not None:
        if limits.cpu_seconds:
            args += ["--ulimit", f"cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}"]
        if limits.max_open_files:
            args += ["--ulimit", f"nofile={limits.max_open_files}:{limits.max_open_files}"]
        if limits.max_file_bytes:
            args += ["--ulimit", f"fsize={limits.max_file_bytes}:{limits.max_file_bytes}"]
    return args


def _home_inside(home: str, workdir: Path) -> str:
    """HOME as the process sees it: the workspace unless the caller named a directory inside the workdir."""
    if home == str(workdir) or home.startswith(str(workdir) + "/"):
        return WORKSPACE_MOUNT + home[len(str(workdir)):]
    if home == "/nonexistent" or not home:
        return WORKSPACE_MOUNT
    return home
