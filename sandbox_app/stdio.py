"""Sandboxed launch of a long-lived process that talks over plain stdin/stdout pipes (a stdio MCP server).

`sandbox_exec` runs a command to completion and supervises its pipes itself; a stdio server is instead spawned
by whoever speaks its protocol (the MCP SDK). So this module only builds the command line: the same isolation as
a bubblewrap run (namespaces, minimal /etc, read-only system, the sandbox uid, no capabilities, network off
unless the spec says on) with two differences forced by the pipes — nothing but the program ever writes to
stdout (no start markers: the JSON stream must stay clean), and no fds are handed over (the workdir is bound
by path). Limits are RLIMITs through prlimit (no per-run cgroup: the process outlives any call).
"""
from __future__ import annotations

import os
from pathlib import Path

from sandbox_app import backends
from sandbox_app.identity import prepare_workspace
from sandbox_app.runner import Launch, ProcessRunner, system_tool
from sandbox_app.runs import WORKSPACE_MOUNT, ExecLimits, SandboxError, SandboxSpec
from sandbox_app.services import DEFAULT_PATH, _default_path

# The gateway step for a workdir the sandbox user can't reach (see bubblewrap.GATEWAY): bind it in a private
# mount namespace, then exec the rest — silently (mount's output goes to stderr, never stdout).
_GATEWAY_SCRIPT = 'mnt=$1; "$mnt" --bind -- "$2" "$3" >&2 || exit 125; shift 3; exec "$@"'


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
    """`docker run -i --rm` with the docker backend's isolation. Env values travel in the docker CLI's own
    environment (`-e NAME`), never on its command line."""
    from sandbox_app.backends.docker import DEFAULT_IMAGE, _network_mode

    docker = system_tool("docker") or "/usr/local/bin/docker"
    if not os.path.exists(docker):
        raise SandboxError("the docker CLI is not installed")
    identity = getattr(backend, "identity", None)
    user = f"{identity.uid}:{identity.gid}" if identity is not None else "65534:65534"
    cmd = [docker, "run", "-i", "--rm", "--init", "--network", _network_mode(spec), "--user", user,
           "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--read-only",
           "--tmpfs", "/tmp:rw,nosuid,nodev,mode=1777", "--log-driver", "none",
           "--mount", f"type=bind,source={workdir},target={WORKSPACE_MOUNT}", "--workdir", WORKSPACE_MOUNT]
    for path in spec.ro_binds:
        if not os.path.isabs(path) or "," in path:
            raise SandboxError(f"read-only bind {path!r} must be an absolute path without commas")
        cmd += ["--mount", f"type=bind,source={path},target={path},readonly"]
    rl = stdio_rlimits(limits)
    if limits is not None and limits.memory_bytes:
        cmd += ["--memory", str(limits.memory_bytes)]
    if limits is not None and limits.max_processes:
        cmd += ["--pids-limit", str(limits.max_processes + 1)]
    for name in ("nofile", "fsize", "cpu"):
        if name in rl:
            cmd += ["--ulimit", f"{name}={rl[name]}"]
    cli_env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/nonexistent"}
    if os.environ.get("DOCKER_HOST", "").startswith("unix://"):
        cli_env["DOCKER_HOST"] = os.environ["DOCKER_HOST"]
    for name, value in env.items():
        if name in ("HOME", "PATH"):
            continue
        cmd += ["-e", name]
        cli_env[name] = value
    cmd += ["-e", "HOME=" + WORKSPACE_MOUNT]
    cmd += [spec.image or DEFAULT_IMAGE, *argv]
    return cmd, cli_env
