"""Who sandboxed processes run as.

When the server runs as root, every sandboxed process (bubblewrap and host backends alike) runs as the
dedicated system user `goclaw-sandbox` with no supplementary groups — never as root — so the server's
`/proc/<pid>/environ`, its 0700 data dir and other workspaces stay unreadable. The user is created with
`useradd --system` on first need. When the server is not root, processes run as the current user.
"""
from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from sandbox_app.runs import SandboxError

SANDBOX_USER = "goclaw-sandbox"

# Directories that must never be handed to the sandbox user, whatever a caller passes as workspace.
_NEVER_CHOWN = frozenset({
    "/", "/tmp", "/var/tmp", "/dev/shm", "/home", "/root", "/etc", "/usr", "/var", "/run", "/srv", "/opt",
    "/bin", "/sbin", "/lib", "/lib64", "/boot", "/proc", "/sys", "/dev", "/mnt", "/media", "/work",
})


@dataclass(frozen=True)
class SandboxIdentity:
    """The uid/gid sandboxed processes run as; `switch` says whether we drop from root to it."""

    name: str
    uid: int
    gid: int
    switch: bool


_lock = threading.Lock()
_cached: SandboxIdentity | None = None


def server_is_root() -> bool:
    return os.geteuid() == 0


def sandbox_identity(*, create: bool = True) -> SandboxIdentity:
    """The identity for sandboxed processes; as root, creates `goclaw-sandbox` when missing.

    Raises `SandboxError` (fail closed) when root but the user can neither be found nor created."""
    global _cached
    if _cached is not None:
        return _cached
    with _lock:
        if _cached is not None:
            return _cached
        if not server_is_root():
            entry = _pw_name(os.geteuid())
            _cached = SandboxIdentity(name=entry, uid=os.geteuid(), gid=os.getegid(), switch=False)
            return _cached
        try:
            pw = pwd.getpwnam(SANDBOX_USER)
        except KeyError:
            if not create:
                raise _error(f"the sandbox user {SANDBOX_USER} does not exist") from None
            _create_user()
            try:
                pw = pwd.getpwnam(SANDBOX_USER)
            except KeyError:
                raise _error(f"the sandbox user {SANDBOX_USER} could not be created") from None
        if pw.pw_uid == 0 or pw.pw_gid == 0:
            raise _error(f"the sandbox user {SANDBOX_USER} must not have uid/gid 0")
        _cached = SandboxIdentity(name=SANDBOX_USER, uid=pw.pw_uid, gid=pw.pw_gid, switch=True)
        return _cached


def _pw_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _error(message: str) -> Exception:
    return SandboxError(message)


def _create_user() -> None:
    useradd = shutil.which("useradd", path="/usr/sbin:/sbin:/usr/bin:/bin")
    if useradd is None:
        raise _error("cannot create the sandbox user: useradd is not installed")
    proc = subprocess.run(
        [useradd, "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
         "--user-group", SANDBOX_USER],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"},
    )
    # 9 = the name exists already (a concurrent creator won the race): fine.
    if proc.returncode not in (0, 9):
        raise _error(f"cannot create the sandbox user {SANDBOX_USER}: "
                     f"{proc.stderr.decode(errors='replace').strip()[:200]}")


def prepare_workspace(path: Path, identity: SandboxIdentity) -> None:
    """Make the workspace root directory (only it, never recursively) writable by the sandbox user.

    Opens the directory with O_NOFOLLOW and chowns through that fd, so a symlink can't redirect the
    chown; system directories (/, /tmp, /home, ...) and sticky shared directories are refused."""
    if not identity.switch:
        return
    real = os.path.realpath(path)
    if real in _NEVER_CHOWN:
        raise _error(f"refusing to use {real} as a sandbox workspace (a system directory)")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise _error(f"cannot open workspace {real}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if st.st_uid == identity.uid:
            return
        if st.st_mode & stat.S_ISVTX:
            raise _error(f"refusing to use {real} as a sandbox workspace (a shared sticky directory)")
        if st.st_uid != os.geteuid():
            raise _error(f"workspace {real} belongs to another user (uid {st.st_uid})")
        os.fchown(fd, identity.uid, identity.gid)
    finally:
        os.close(fd)


def passwd_lines(identity: SandboxIdentity) -> tuple[str, str]:
    """/etc/passwd and /etc/group for inside the sandbox: root, nobody and the sandbox user only."""
    passwd = ["root:x:0:0:root:/root:/usr/sbin/nologin",
              "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin"]
    group = ["root:x:0:", "nogroup:x:65534:"]
    if identity.uid not in (0, 65534):
        passwd.append(f"{identity.name}:x:{identity.uid}:{identity.gid}:sandbox:/workspace:/bin/sh")
    if identity.gid not in (0, 65534):
        group.append(f"{identity.name}:x:{identity.gid}:")
    return "\n".join(passwd) + "\n", "\n".join(group) + "\n"
