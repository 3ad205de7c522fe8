"""The bubblewrap backend: each run in fresh user/pid/net/ipc/uts/cgroup/mount namespaces.

What the process sees (everything else of the host is absent, not merely unreadable):
- `/usr` read-only, `/bin` `/sbin` `/lib*` as on the host (symlinks into /usr on a usrmerged system);
- a minimal `/etc`: passwd/group with only root, nobody and the sandbox user, and a fixed list of public
  files programs need (`ETC_FILES`); `resolv.conf` only with network on; no shadow, ssl/private, ...;
- the workspace read-write at `/workspace`, bound from an O_PATH fd the server opened, so the sandbox user
  never needs access to the workspace's ancestors; `spec.ro_binds` read-only at the same path;
- private tmpfs `/tmp`, a fresh `/proc` of its own pid namespace, a minimal `/dev`; `/` is read-only.
The process runs as the unprivileged sandbox uid (see `sandbox_app.identity`), with no capabilities, no
new privileges, in a new session, and may not create further user namespaces. The network namespace is
private (loopback only, nothing listening) unless the spec turns the network on; bubblewrap can't filter
destinations, so network-on without `network_local` is refused (fail closed).

Limits come from `sandbox_app.runner.apply_limits` (cgroup + RLIMITs). On timeout the program gets
SIGTERM, then everything SIGKILL; killing bwrap kills its pid namespace, so nothing survives — not even
a double-forked, `setsid` grandchild.

Exit codes: bwrap reports a program killed by signal N as 128+N (as a shell does), not as -N.
"""
from __future__ import annotations

import errno
import os
import subprocess
import threading
from pathlib import Path

from sandbox_app.identity import SandboxIdentity, passwd_lines, prepare_workspace, sandbox_identity
from sandbox_app.runner import Launch, ProcessRunner, apply_limits, raise_if_wrapper_failed, system_tool
from sandbox_app.runs import WORKSPACE_MOUNT, ExecLimits, ExecResult, SandboxError, SandboxSpec

# Public, secret-free files under /etc that ordinary programs read. Bound read-only when they exist.
ETC_FILES = (
    "hosts", "nsswitch.conf", "host.conf", "gai.conf", "ld.so.cache", "localtime", "timezone", "protocols",
    "services", "mime.types", "magic", "magic.mime", "alternatives", "ssl/certs", "ca-certificates.conf",
)
SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Mount points of our own that an extra read-only bind may not replace (below /tmp or /workspace is fine:
# extra binds are mounted after them; below /proc, /dev and our minimal /etc is not).
_RESERVED = ("/proc", "/dev", "/tmp", WORKSPACE_MOUNT, "/etc")
_SETUP_TIMEOUT = 20.0

# bwrap resolves every bind source with realpath() *as the sandbox user*, even for --bind-fd
# (containers/bubblewrap#569, #570), so a workspace under a directory that user can't search (a 0700
# data dir) can't be bound directly. Then the root part of the launch chain enters a private mount
# namespace (`unshare --mount --propagation private`, nothing leaks to the host or outlives the run),
# binds the workspace onto GATEWAY/ws, and bwrap binds that: GATEWAY is root-owned 0711 (searchable,
# not listable) and GATEWAY/ws is empty outside runs. The workspace is named by path there, not by fd:
# bwrap passes on fds it doesn't consume, and dash can't close fds above 9, so an O_PATH fd handed to
# the gateway step would leak into the sandbox (openat(fd, "..")). The path is safe to resolve as root:
# its ancestors are the server's, and the sandbox user can't replace the workspace entry itself.
GATEWAY = Path("/run/goclaw-sandbox")
# Inside the sandbox the program is started through this step: its marker on stdout proves bwrap finished
# setting up (bwrap prints setup errors and exits 1, like any program could); dash reports a failed exec
# as "goclaw-exec: 1: exec: NAME: not found" with status 127.
_STARTED_MARKER = b"goclaw:started\n"
_EXEC_SCRIPT = 'printf "goclaw:started\\n"; exec "$@"'



def _gateway_root() -> None:
    """GATEWAY exists, is a real directory owned by root, mode 0711 (searchable, not listable)."""
    GATEWAY.mkdir(mode=0o711, exist_ok=True)
    st = os.lstat(GATEWAY)
    if st.st_uid != 0 or not os.path.isdir(GATEWAY) or os.path.islink(GATEWAY):
        raise SandboxError(f"{GATEWAY} is not a root-owned directory")
    os.chmod(GATEWAY, 0o711)


def prepared_etc(identity: SandboxIdentity) -> Path | None:
    """One read-only /etc for every run, built once per content (as root): copies of the public `ETC_FILES`
    (symlinks kept as symlinks) plus the sandbox's own passwd/group, in GATEWAY/etc-<digest>. Binding it is
    one mount instead of ~17 per run. None when it can't be built (not root, ...): runs then bind file by file.
    The digest covers every source's metadata, so a changed host file gives a new directory at the next start."""
    import hashlib
    import shutil
    import uuid

    if not identity.switch:
        return None
    passwd, group = passwd_lines(identity)
    digest = hashlib.sha256((passwd + group).encode())
    sources = [name for name in ETC_FILES if os.path.exists(os.path.join("/etc", name))]
    for name in sources:
        st = os.lstat(os.path.join("/etc", name))
        digest.update(f"{name}:{st.st_mode}:{st.st_size}:{st.st_mtime_ns}:{st.st_ino}\n".encode())
    final = GATEWAY / f"etc-{digest.hexdigest()[:24]}"
    try:
        _gateway_root()
        if final.is_dir() and not final.is_symlink() and final.lstat().st_uid == 0:
            return final
        tmp = GATEWAY / f".etc-{uuid.uuid4().hex}"
        tmp.mkdir(mode=0o755)
        try:
            for name in sources:
                src, dst = Path("/etc", name), tmp / name
                dst.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
                if src.is_dir() and not src.is_symlink():
                    shutil.copytree(src, dst, symlinks=True)
                else:
                    shutil.copy2(src, dst, follow_symlinks=False)
            for name, content in (("passwd", passwd), ("group", group)):
                (tmp / name).write_text(content)
                (tmp / name).chmod(0o644)
            tmp.chmod(0o755)
            os.rename(tmp, final)
        except FileExistsError:
            pass  # another process built the same content first
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    except (OSError, SandboxError):
        return None
    return final if final.is_dir() else None


def bwrap_info(path: str | None = None) -> dict:
    """Path, version and feature flags of the bwrap binary (no sandbox is started)."""
    path = path or system_tool("bwrap")
    info: dict = {"path": path, "version": None, "disable_userns": False, "setuid": False}
    if not path or not os.path.isfile(path) or not os.access(path, os.X_OK):
        info["error"] = "bwrap is not installed"
        return info
    try:
        info["setuid"] = bool(os.stat(path).st_mode & 0o4000)
        version = subprocess.run([path, "--version"], capture_output=True, timeout=10, env={"LC_ALL": "C"})
        info["version"] = version.stdout.decode(errors="replace").strip().removeprefix("bubblewrap ") or None
        helptext = subprocess.run([path, "--help"], capture_output=True, timeout=10, env={"LC_ALL": "C"})
        info["disable_userns"] = b"--disable-userns" in helptext.stdout + helptext.stderr
    except (OSError, subprocess.SubprocessError) as exc:
        info["error"] = f"bwrap could not be run: {exc}"
    return info


class BubblewrapBackend:
    name = "bubblewrap"

    def __init__(self, *, bwrap_path: str | None = None, drain_seconds: float = 2.0,
                 poll_interval: float = 0.05) -> None:
        info = bwrap_info(bwrap_path)
        if info.get("error"):
            raise SandboxError(f"bubblewrap is not usable: {info['error']}")
        if info["setuid"]:
            # A setuid bwrap refuses several of our options and changes the threat model; don't guess.
            raise SandboxError("bubblewrap is not usable: a setuid bwrap is not supported")
        self.bwrap: str = info["path"]
        self.version: str | None = info["version"]
        self.disable_userns: bool = info["disable_userns"]
        self.identity: SandboxIdentity = sandbox_identity()
        self.runner = ProcessRunner(drain_seconds=drain_seconds, poll_interval=poll_interval)
        self.etc_dir: Path | None = prepared_etc(self.identity)
        self._self_test()

    # --- the command line -------------------------------------------------------------------------

    def _isolation_args(self, *, network: bool) -> list[str]:
        args = ["--unshare-all", "--unshare-user"]  # --unshare-all only *tries* the user namespace
        if network:
            args.append("--share-net")
        args += ["--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        if self.disable_userns:
            args.append("--disable-userns")
        args += ["--uid", str(self.identity.uid), "--gid", str(self.identity.gid), "--hostname", "sandbox"]
        return args

    @staticmethod
    def _system_args() -> list[str]:
        args = ["--ro-bind", "/usr", "/usr"]
        for path in SYSTEM_DIRS:
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        return args

    @staticmethod
    def _etc_args(*, network: bool) -> list[str]:
        args = ["--perms", "0755", "--dir", "/etc"]
        names = ETC_FILES + (("resolv.conf",) if network else ())
        for name in names:
            src = os.path.join("/etc", name)
            if os.path.exists(src):  # follows symlinks: a dangling one is skipped
                args += ["--ro-bind", src, src]
        return args

    def _etc_mounts(self, *, network: bool, fds: list[int]) -> tuple[list[str], list[int]]:
        """(bwrap arguments, fds to pass) for /etc: the prepared directory in one bind where there is one and
        the network is off (it has no resolv.conf), else file by file with passwd/group from pipes."""
        if not network and self.etc_dir is not None and self.etc_dir.is_dir():
            return ["--ro-bind", str(self.etc_dir), "/etc"], []
        args, data_fds = self._etc_args(network=network), []
        for name, content in zip(("passwd", "group"), passwd_lines(self.identity)):
            r, w = os.pipe()
            fds.append(r)
            os.write(w, content.encode())  # a few hundred bytes: fits the pipe buffer
            os.close(w)
            data_fds.append(r)
            args += ["--perms", "0644", "--ro-bind-data", str(r), f"/etc/{name}"]
        return args, data_fds

    @staticmethod
    def _ro_bind_args(ro_binds: tuple[str, ...]) -> list[str]:
        args: list[str] = []
        for raw in ro_binds:
            if not isinstance(raw, str) or not os.path.isabs(raw):
                raise SandboxError(f"read-only bind {raw!r} must be an absolute path")
            path = os.path.normpath(raw)
            if path in ("/", *_RESERVED) or any(path.startswith(r + "/") for r in ("/proc", "/dev", "/etc")):
                raise SandboxError(f"read-only bind {raw} would cover a sandbox mount point")
            if not os.path.exists(path):
                raise SandboxError(f"read-only bind {raw} does not exist")
            args += ["--ro-bind", path, path]
        return args

    def _self_test(self) -> None:
        """Start one empty sandbox with the same isolation options: bwrap, user namespaces and the
        sandbox user must all work, else this backend is unavailable (and "auto" won't pick it)."""
        launch = Launch(argv=[self.bwrap, *self._isolation_args(network=False), *self._system_args(),
                              "--proc", "/proc", "--dev", "/dev", "--remount-ro", "/", "--", "/usr/bin/true"],
                        env={"PATH": "/usr/bin:/bin"}, cwd="/", identity=self.identity)
        argv = self.runner.chain(launch)
        try:
            proc = subprocess.run(argv, cwd="/", env=launch.env, stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=_SETUP_TIMEOUT, start_new_session=True)
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxError(f"bubblewrap is not usable: {exc}") from None
        if proc.returncode != 0:
            detail = proc.stderr.decode(errors="replace").strip().splitlines()[:1]
            raise SandboxError("bubblewrap is not usable: " + (detail[0] if detail else f"exit {proc.returncode}"))

    def _searchable_by_sandbox(self, path: Path) -> bool:
        """Can the sandbox user search every ancestor of `path`? (mode bits only; ACLs are not consulted,
        which at worst sends a run through the gateway needlessly)."""
        ident = self.identity
        for parent in path.parents:
            try:
                st = os.stat(parent)
            except OSError:
                return False
            if st.st_uid == ident.uid:
                ok = st.st_mode & 0o100
            elif st.st_gid == ident.gid:
                ok = st.st_mode & 0o010
            else:
                ok = st.st_mode & 0o001
            if not ok:
                return False
        return True

    def _gateway(self) -> str:
        """The mount point for binding a workspace whose ancestors the sandbox user can't search (the run's
        setup step binds the workspace there in its private mount namespace). Fails closed when the gateway
        can't be prepared."""
        unshare, mount = system_tool("unshare"), system_tool("mount")
        if not self.identity.switch or unshare is None or mount is None:
            raise SandboxError("the workspace's parent directories are not searchable by the sandbox user "
                               "and no mount gateway is available (needs root, unshare and mount)")
        target = GATEWAY / "ws"
        try:
            _gateway_root()
            target.mkdir(mode=0o755, exist_ok=True)
        except OSError as exc:
            raise SandboxError(f"cannot prepare the workspace gateway {GATEWAY}: {exc.strerror}") from None
        if not self._searchable_by_sandbox(target):
            raise SandboxError(f"the workspace gateway {GATEWAY} is not searchable by the sandbox user")
        return str(target)

    # --- running ----------------------------------------------------------------------------------

    def run(self, *, argv: list[str], workspace: Path, cwd: Path, env: dict[str, str], limits: ExecLimits,
            spec: SandboxSpec, stdin: bytes | None = None, cancel: threading.Event | None = None) -> ExecResult:
        if spec.network and not spec.network_local:
            raise SandboxError("the bubblewrap backend cannot restrict network destinations: a profile with "
                               "network on must allow local addresses (network_local) or use the docker backend")
        network = bool(spec.network)
        extra_binds = self._ro_bind_args(tuple(spec.ro_binds))
        workspace, cwd = Path(os.path.realpath(workspace)), Path(os.path.realpath(cwd))
        rel = os.path.relpath(cwd, workspace)
        if rel == ".." or rel.startswith("../"):
            raise SandboxError("working directory is not inside the workspace")
        inner_cwd = WORKSPACE_MOUNT if rel == "." else f"{WORKSPACE_MOUNT}/{rel}"
        env = dict(env)
        home = env.get("HOME", "")
        if home == str(workspace) or home.startswith(str(workspace) + "/"):
            env["HOME"] = WORKSPACE_MOUNT + home[len(str(workspace)):]

        prepare_workspace(workspace, self.identity)
        root_binds: tuple[tuple[str, str], ...] = ()
        fds: list[int] = []
        try:
            if self._searchable_by_sandbox(workspace):
                # bound from an O_PATH fd the server opened (bwrap consumes and closes it)
                ws_fd = os.open(workspace, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
                fds.append(ws_fd)
                ws_args = ["--bind-fd", str(ws_fd), WORKSPACE_MOUNT]
                bwrap_fds: tuple[int, ...] = (ws_fd,)
            else:
                target = self._gateway()
                root_binds = ((str(workspace), target),)
                ws_args = ["--bind", target, WORKSPACE_MOUNT]
                bwrap_fds = ()
            etc_args, data_fds = self._etc_mounts(network=network, fds=fds)

            bwrap_argv = [
                self.bwrap, *self._isolation_args(network=network),
                *self._system_args(), *etc_args,
                "--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp",
                *ws_args,
                *extra_binds,
                "--remount-ro", "/",
                "--chdir", inner_cwd,
                "--", "/bin/sh", "-c", _EXEC_SCRIPT, "goclaw-exec", *argv,
            ]
            launch = Launch(argv=bwrap_argv, env=env, cwd="/", pass_fds=(*bwrap_fds, *data_fds),
                            identity=self.identity, term_spares_leader=True, root_binds=root_binds,
                            inner_marker=_STARTED_MARKER)
            enforced, cgroup = apply_limits(launch, limits, overhead_pids=2)  # bwrap monitor + its init
            try:
                done = self.runner.run(launch, limits, stdin, cancel)
            finally:
                if cgroup is not None:
                    cgroup.remove()
        finally:
            for fd in fds:
                os.close(fd)

        raise_if_wrapper_failed(done, "bwrap")
        if not done.inner_marker_seen and not done.timed_out and not done.cancelled:
            detail = done.stderr.text().strip().splitlines()[:1]
            raise SandboxError("bubblewrap could not set up the sandbox; the command was not run: "
                               + (detail[0] if detail else f"exit {done.returncode}"))
        stderr = bytes(done.stderr.buf)
        if done.returncode in (126, 127) and stderr.startswith(b"goclaw-exec: 1: exec: "):
            if done.returncode == 127:
                raise SandboxError(f"executable not found: {argv[0]}")
            raise SandboxError(f"permission denied starting {argv[0]}")
        return ExecResult(
            exit_code=done.returncode, stdout=done.stdout.text(), stderr=done.stderr.text(),
            stdout_truncated=done.stdout.truncated, stderr_truncated=done.stderr.truncated,
            timed_out=done.timed_out, duration_ms=done.duration_ms, backend=self.name, profile=spec.profile,
            limits_enforced=enforced + ("timeout_seconds:pid_namespace",), cancelled=done.cancelled,
        )
