"""Workspace path confinement: the security core of every tool that touches files.

Everything an agent names by path goes through this module. The rules:

* A user path is text: no NUL, no control characters, valid UTF-8, at most 4096 bytes, no component
  longer than 255 bytes. Relative paths are relative to the workspace; absolute paths are accepted
  only when they name something inside the workspace.
* Paths are resolved component by component like the kernel does (``..`` after a symlink applies to
  the symlink's target), with a bounded number of symlink expansions (loops are refused cleanly).
  Missing components are resolved lexically, so a dangling symlink is judged by where it *would*
  land. The result must be the workspace's real path or lie beneath it (compared by path
  components, never by string prefix).
* Writes never go through a symlink: the final component may not be a symlink at all.
* Opening is done by walking the *real* relative path one component at a time from a descriptor
  of the workspace root, each directory with ``O_DIRECTORY | O_NOFOLLOW`` relative to its parent
  (``dir_fd``) and the file with ``O_NOFOLLOW``; so a symlink swapped in after the check makes the
  open fail instead of redirecting it (TOCTOU-safe).
* Only regular files are read or written (FIFOs, sockets and devices are refused, checked with
  ``lstat`` before and ``fstat`` after a non-blocking open), and a regular file with more than one
  hard link is refused (a hard link may share its inode with a file outside the workspace).
* Denied prefixes (workspace-relative, e.g. ``.goclaw/``) are checked against both the relative
  form of the real path and the lexical form the caller typed.

Error messages only ever show workspace-relative paths or the caller's own relative input.
"""
from __future__ import annotations

import errno
import functools
import os
import posixpath
import secrets
import stat
import unicodedata
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from tools_app.base import ToolError

__all__ = [
    "PathError",
    "MAX_PATH_BYTES",
    "MAX_COMPONENT_BYTES",
    "MAX_SYMLINKS",
    "DEFAULT_DENIED",
    "validate_user_path",
    "workspace_root",
    "ensure_workspace",
    "is_within",
    "normalize_denied",
    "is_denied",
    "refuse_denied",
    "lexical_relative",
    "resolve_in_workspace",
    "relative_display",
    "open_dir",
    "open_for_read",
    "open_for_write",
    "opened",
    "atomic_write",
    "check_regular",
]

MAX_PATH_BYTES = 4096
MAX_COMPONENT_BYTES = 255
MAX_SYMLINKS = 40
DEFAULT_DENIED: tuple[str, ...] = (".goclaw/",)
WORKSPACE_MODE = 0o700
DIR_MODE = 0o700
FILE_MODE = 0o644

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_DIR_FLAGS = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC


# Bidirectional-text controls can make a displayed path read differently from what it is.
_BIDI_CONTROLS = frozenset("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


class PathError(ToolError):
    """A path was refused or could not be used; the message is safe to show to the model."""


# --------------------------------------------------------------------------------------------
# validation and small helpers
# --------------------------------------------------------------------------------------------
def validate_user_path(user_path: object) -> str:
    """Check the raw text of a path; return it unchanged or raise PathError."""
    if not isinstance(user_path, str):
        raise PathError("path must be a string")
    if user_path == "":
        raise PathError("path is empty")
    if "\x00" in user_path:
        raise PathError("path contains a NUL byte")
    try:
        encoded = user_path.encode("utf-8")
    except UnicodeEncodeError:
        raise PathError("path is not valid UTF-8 text") from None
    if len(encoded) > MAX_PATH_BYTES:
        raise PathError(f"path is too long ({len(encoded)} bytes; the limit is {MAX_PATH_BYTES})")
    for ch in user_path:
        if unicodedata.category(ch) in ("Cc", "Zl", "Zp") or ch in _BIDI_CONTROLS:
            raise PathError("path contains a control character")
    for part in user_path.split("/"):
        if len(part.encode("utf-8")) > MAX_COMPONENT_BYTES:
            raise PathError(f"a path component is longer than {MAX_COMPONENT_BYTES} bytes")
    return user_path


def _safe_echo(user_path: str) -> str:
    """How a caller's path may be echoed back: relative input only, shortened."""
    if user_path.startswith("/"):
        return "(absolute path)"
    return user_path if len(user_path) <= 200 else user_path[:200] + "..."


def workspace_root(workspace: Path | str) -> str:
    """The workspace's real absolute path (the workspace itself may be a symlink)."""
    if workspace is None or str(workspace) == "":
        raise PathError("no workspace is configured")
    return os.path.realpath(os.path.abspath(os.fspath(workspace)))


def ensure_workspace(workspace: Path | str) -> str:
    """Create the workspace (mode 0o700) if it does not exist yet; return its real path."""
    root = workspace_root(workspace)
    if not os.path.lexists(root):
        try:
            os.makedirs(root, mode=WORKSPACE_MODE, exist_ok=True)
            os.chmod(root, WORKSPACE_MODE)
        except OSError:
            raise PathError("the workspace directory could not be created") from None
    if not os.path.isdir(root):
        raise PathError("the workspace is not a directory")
    workspace_owner_ensure(root)
    return root


def _adopt(dir_fd: int, name: str | None = None, fd: int | None = None) -> None:
    """A new entry takes the owner of the directory it was created in (when the server runs as root and that
    directory belongs to someone else: the sandbox user owns workspaces, so its processes can use what the
    file tools write). Never follows a symlink: `fd` is chowned directly, `name` with follow_symlinks=False."""
    if os.geteuid() != 0:
        return
    st = os.fstat(dir_fd)
    if st.st_uid == 0:
        return
    if fd is not None:
        os.fchown(fd, st.st_uid, st.st_gid)
    elif name is not None:
        os.chown(name, st.st_uid, st.st_gid, dir_fd=dir_fd, follow_symlinks=False)


def _adopt_tree(root: str, uid: int, gid: int) -> None:
    """Hand a workspace created before the sandbox user owned it (every entry the server created) to that user.

    fd-based walk that never follows symlinks, so nothing outside the workspace can be reached."""
    for dirpath, dirnames, filenames, dfd in os.fwalk(root, follow_symlinks=False):
        for name in (*dirnames, *filenames):
            try:
                if os.stat(name, dir_fd=dfd, follow_symlinks=False).st_uid == 0:
                    os.chown(name, uid, gid, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                continue


def workspace_owner_ensure(root: str) -> None:
    """As root: the workspace (and what the server created in it before) belongs to the sandbox user, so
    sandboxed processes can write it. Not root: nothing to do (processes run as the server's own user)."""
    if os.geteuid() != 0:
        return
    from sandbox_app.identity import prepare_workspace, sandbox_identity
    from sandbox_app.services import SandboxError

    try:
        identity = sandbox_identity()
        if os.stat(root, follow_symlinks=False).st_uid == identity.uid:
            return
        prepare_workspace(Path(root), identity)  # refuses system and shared directories, then hands the root over
        _adopt_tree(root, identity.uid, identity.gid)
    except (SandboxError, OSError) as exc:
        raise PathError(f"the workspace could not be prepared for the sandbox: {exc}") from None


def is_within(root: str, path: str) -> bool:
    """True if `path` is `root` or beneath it (both absolute, normalised). Component-wise."""
    try:
        return os.path.commonpath([root, path]) == root
    except ValueError:
        return False


def normalize_denied(denied: Sequence[str] | None) -> tuple[str, ...]:
    """Denied entries as clean workspace-relative POSIX paths (no leading ./ or /, no trailing /). Memoized: every
    call's workspace normalises the same few lists."""
    entries = tuple(denied or ())
    try:
        return _normalize_denied(entries)
    except TypeError:  # an unhashable entry: it is dropped below anyway
        return _normalize_denied(tuple(e for e in entries if isinstance(e, str)))


@functools.lru_cache(maxsize=1024)
def _normalize_denied(denied: tuple) -> tuple[str, ...]:
    out: list[str] = []
    for entry in denied:
        if not isinstance(entry, str):
            continue
        entry = entry.strip()
        if not entry or "\x00" in entry:
            continue
        norm = posixpath.normpath("/" + entry.lstrip("/")).lstrip("/")
        if norm and norm != ".":
            out.append(norm)
    return tuple(out)


def is_denied(rel: str, denied: Sequence[str]) -> bool:
    """Is the workspace-relative path `rel` (POSIX, "." for the root) denied?

    An entry denies the path itself and everything beneath it (a trailing "/" on an entry just
    says it is a directory). Matching is case-sensitive and by whole components, so ".git" does
    not deny ".gitignore".
    """
    if rel in ("", "."):
        return False
    for entry in normalize_denied(denied):
        if rel == entry or rel.startswith(entry + "/"):
            return True
    return False


def refuse_denied(rel: str, user_path: str, denied: Sequence[str]) -> None:
    """Raise the one "protected location" PathError if the workspace-relative `rel` is denied (`user_path` is what
    the caller typed, echoed safely)."""
    if is_denied(rel, denied):
        raise PathError(f"access denied: {_safe_echo(user_path)} is in a protected location")


def _rel(root: str, real: str) -> str:
    if real == root:
        return "."
    return os.path.relpath(real, root).replace(os.sep, "/")


def relative_display(workspace: Path | str, path: Path | str) -> str:
    """Workspace-relative POSIX form of `path` for messages ("." for the root).

    Accepts the real path or the path spelled through the (possibly symlinked) workspace; never
    returns an absolute host path (anything outside becomes "(outside workspace)").
    """
    p = os.path.abspath(os.fspath(path))
    for base in (workspace_root(workspace), os.path.abspath(os.fspath(workspace))):
        if is_within(base, p):
            return _rel(base, p)
    return "(outside workspace)"


# --------------------------------------------------------------------------------------------
# resolution
# --------------------------------------------------------------------------------------------
def _lexical_rel(root: str, ws_given: str, user_path: str) -> list[str] | None:
    """Components of the user path relative to the workspace, or None for an absolute path outside."""
    if not user_path.startswith("/"):
        return user_path.split("/")
    parts = [p for p in user_path.split("/") if p not in ("", ".")]
    for base in (root, ws_given):
        bparts = [p for p in base.split("/") if p]
        if parts[: len(bparts)] == bparts:
            return parts[len(bparts):]
    return None


def lexical_relative(workspace: Path | str, user_path: str) -> str | None:
    """`user_path` as a clean workspace-relative POSIX path judged by its text alone ("." for the root): empty and
    `.` components dropped, `..` folded, an absolute path mapped through the workspace's real or given path; no
    symlink is followed. None when the text leaves the workspace at any point (`../x`, `a/../../x`, an absolute
    path elsewhere): such a path is only ever judged by full resolution. Raises PathError for malformed text."""
    validate_user_path(user_path)
    parts = _lexical_rel(workspace_root(workspace), os.path.abspath(os.fspath(workspace)), user_path)
    if parts is None:
        return None
    out: list[str] = []
    for part in parts:
        if part in ("", "."):
            continue
        if part == "..":
            if not out:
                return None
            out.pop()
        else:
            out.append(part)
    return "/".join(out) or "."


def _outside(user_path: str) -> PathError:
    return PathError(f"access denied: {_safe_echo(user_path)} is outside the workspace")


def _walk(start: str, parts: list[str], user_path: str, root: str | None = None) -> str:
    """Resolve `parts` from the absolute directory `start` following symlinks like the kernel,
    resolving missing components lexically. Bounded; never recurses.

    While the walk is outside `root`, every failure is reported as "outside the workspace", so
    error messages cannot be used to probe what exists on the host.
    """
    root = start if root is None else root
    stack = [p for p in reversed(parts)]
    cur = start
    links = 0
    steps = 0
    while stack:
        steps += 1
        if steps > 100_000:  # pathological symlink fan-out
            raise PathError(f"path could not be resolved: {_safe_echo(user_path)}")
        part = stack.pop()
        if part in ("", "."):
            continue
        if part == "..":
            cur = os.path.dirname(cur) if cur != "/" else "/"
            continue
        nxt = cur + part if cur.endswith("/") else cur + "/" + part
        inside = is_within(root, nxt)
        try:
            st = os.lstat(nxt)
        except FileNotFoundError:
            cur = nxt
            continue
        except NotADirectoryError:
            if not inside:
                raise _outside(user_path) from None
            raise PathError(f"not a directory: a component of {_safe_echo(user_path)} is a file") from None
        except PermissionError:
            if not inside:
                raise _outside(user_path) from None
            raise PathError(f"permission denied: {_safe_echo(user_path)}") from None
        except OSError as exc:
            if not inside:
                raise _outside(user_path) from None
            if exc.errno == errno.ENAMETOOLONG:
                raise PathError("path is too long") from None
            raise PathError(f"path could not be resolved: {_safe_echo(user_path)}") from None
        if stat.S_ISLNK(st.st_mode):
            links += 1
            if links > MAX_SYMLINKS:
                if not inside:
                    raise _outside(user_path)
                raise PathError(f"too many levels of symbolic links (symlink loop?): {_safe_echo(user_path)}")
            try:
                target = os.readlink(nxt)
            except OSError:
                if not inside:
                    raise _outside(user_path) from None
                raise PathError(f"symlink could not be read: {_safe_echo(user_path)}") from None
            if not target:
                raise PathError(f"broken symlink: {_safe_echo(user_path)}")
            if target.startswith("/"):
                cur = "/"
            stack.extend(reversed(target.split("/")))
            continue
        cur = nxt
    return cur


def _resolve(workspace: Path | str, user_path: str, for_write: bool, denied: Sequence[str]) -> tuple[str, str]:
    """Return (root, real) for a confined path, or raise PathError."""
    validate_user_path(user_path)
    root = workspace_root(workspace)
    parts = _lexical_rel(root, os.path.abspath(os.fspath(workspace)), user_path)
    if parts is None:
        raise PathError("access denied: absolute path is outside the workspace")
    shown = _safe_echo(user_path)

    # Lexical denied check on what the caller typed (catches a denied name that is itself a symlink).
    lexical = posixpath.normpath("/" + "/".join(parts)).lstrip("/") or "."
    refuse_denied(lexical, user_path, denied)

    if for_write:
        if user_path.endswith("/"):
            raise PathError(f"not a file path (ends with '/'): {shown}")
        clean = [p for p in parts if p != ""]
        while clean and clean[-1] == ".":
            clean.pop()
        if not clean or clean[-1] == "..":
            raise PathError(f"not a file path: {shown}")
        name = clean[-1]
        parent = _walk(root, clean[:-1], user_path, root)
        if not is_within(root, parent):
            raise PathError(f"access denied: {shown} is outside the workspace")
        real = parent.rstrip("/") + "/" + name
        try:
            st = os.lstat(real)
        except FileNotFoundError:
            st = None
        except NotADirectoryError:
            if not is_within(root, parent):
                raise _outside(user_path) from None
            raise PathError(f"not a directory: a component of {shown} is a file") from None
        except OSError:
            if not is_within(root, parent):
                raise _outside(user_path) from None
            raise PathError(f"permission denied: {shown}") from None
        if st is not None and stat.S_ISLNK(st.st_mode):
            raise PathError(f"refusing to write through a symlink: {shown}")
    else:
        real = _walk(root, parts, user_path, root)
    if not is_within(root, real):
        raise PathError(f"access denied: {shown} is outside the workspace")
    refuse_denied(_rel(root, real), user_path, denied)
    return root, real


def resolve_in_workspace(
    workspace: Path | str, user_path: str, *, for_write: bool = False, denied: Sequence[str] = ()
) -> Path:
    """Resolve `user_path` against `workspace` and return the real, absolute, confined path.

    Raises PathError if the path is malformed, escapes the workspace (via ``..``, an absolute path,
    a symlink, a dangling symlink or a symlink loop), is denied, or - with `for_write` - its final
    component is a symlink. The path need not exist.
    """
    _, real = _resolve(workspace, user_path, for_write, denied)
    return Path(real)


# --------------------------------------------------------------------------------------------
# descriptor-based opening (TOCTOU-safe)
# --------------------------------------------------------------------------------------------
def _root_fd(root: str) -> int:
    try:
        return os.open(root, _DIR_FLAGS)
    except FileNotFoundError:
        raise PathError("the workspace does not exist yet") from None
    except OSError:
        raise PathError("the workspace could not be opened") from None


def _open_error(exc: OSError, shown: str) -> PathError:
    if isinstance(exc, FileNotFoundError):
        return PathError(f"file not found: {shown}")
    if isinstance(exc, IsADirectoryError):
        return PathError(f"is a directory: {shown}")
    if isinstance(exc, NotADirectoryError):
        return PathError(f"not a directory: {shown}")
    if isinstance(exc, PermissionError):
        return PathError(f"permission denied: {shown}")
    if exc.errno == errno.ELOOP:
        return PathError(f"refusing to follow a symlink: {shown}")
    if exc.errno == errno.ENXIO:
        return PathError(f"not a regular file: {shown}")
    if exc.errno == errno.ENOSPC:
        return PathError("no space left on device")
    if exc.errno == errno.EDQUOT:
        return PathError("disk quota exceeded")
    if exc.errno == errno.EROFS:
        return PathError("read-only file system")
    return PathError(f"could not open {shown}: {os.strerror(exc.errno) if exc.errno else 'error'}")


def _walk_dirs(root: str, components: list[str], shown: str, *, create: bool) -> int:
    """Open directory `components` (real, symlink-free) one by one from the root with O_NOFOLLOW."""
    fd = _root_fd(root)
    try:
        for comp in components:
            try:
                nfd = os.open(comp, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise PathError(f"directory not found: {shown}") from None
                try:
                    os.mkdir(comp, DIR_MODE, dir_fd=fd)
                    _adopt(fd, comp)
                except FileExistsError:
                    pass
                except OSError as exc:
                    raise _open_error(exc, shown) from None
                try:
                    nfd = os.open(comp, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise _open_error(exc, shown) from None
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    # A symlink (or a file) sits where a directory was resolved: refuse.
                    raise PathError(f"refusing to follow a symlink or non-directory component: {shown}") from None
                raise _open_error(exc, shown) from None
            os.close(fd)
            fd = nfd
        return fd
    except BaseException:
        os.close(fd)
        raise


def check_regular(st: os.stat_result, shown: str) -> None:
    """Refuse anything but a regular file with a single link."""
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        raise PathError(f"is a directory: {shown}")
    if stat.S_ISLNK(mode):
        raise PathError(f"refusing to follow a symlink: {shown}")
    if not stat.S_ISREG(mode):
        kind = (
            "a FIFO" if stat.S_ISFIFO(mode) else
            "a socket" if stat.S_ISSOCK(mode) else
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file"
        )
        raise PathError(f"not a regular file ({kind}): {shown}")
    if st.st_nlink > 1:
        raise PathError(f"refusing to access a file with multiple hard links: {shown}")


def _clear_nonblock(fd: int) -> None:
    try:
        import fcntl

        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~_O_NONBLOCK)
    except (ImportError, OSError):  # pragma: no cover - non-POSIX
        pass


def _components(root: str, real: str) -> list[str]:
    rel = _rel(root, real)
    return [] if rel == "." else rel.split("/")


def open_dir(workspace: Path | str, user_path: str = ".", *, denied: Sequence[str] = (), create: bool = False) -> int:
    """Open a workspace directory safely and return its descriptor (caller closes it).

    With `create`, missing directories (including the workspace itself) are created with 0o700.
    """
    if create:
        ensure_workspace(workspace)
    root, real = _resolve(workspace, user_path, False, denied)
    shown = _safe_echo(user_path)
    comps = _components(root, real)
    if not comps:
        if not os.path.isdir(root):
            raise PathError("the workspace does not exist yet")
        return _root_fd(root)
    fd = _walk_dirs(root, comps[:-1], shown, create=create)
    try:
        try:
            st = os.stat(comps[-1], dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            if not create:
                raise PathError(f"directory not found: {shown}") from None
            try:
                os.mkdir(comps[-1], DIR_MODE, dir_fd=fd)
                _adopt(fd, comps[-1])
            except FileExistsError:
                pass
            st = os.stat(comps[-1], dir_fd=fd, follow_symlinks=False)
        if not stat.S_ISDIR(st.st_mode):
            if stat.S_ISLNK(st.st_mode):
                raise PathError(f"refusing to follow a symlink: {shown}")
            raise PathError(f"not a directory: {shown}")
        try:
            return os.open(comps[-1], _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            raise _open_error(exc, shown) from None
    except OSError as exc:
        raise _open_error(exc, shown) from None
    finally:
        os.close(fd)


def open_for_read(workspace: Path | str, user_path: str, *, denied: Sequence[str] = ()) -> int:
    """Open a confined regular file read-only and return the descriptor (caller closes it).

    Resolves to the real path, verifies confinement and the deny list, then opens every component
    of the real relative path with O_NOFOLLOW from the workspace root descriptor. Refuses
    directories, FIFOs, sockets, devices, and files with more than one hard link.
    """
    root, real = _resolve(workspace, user_path, False, denied)
    shown = _safe_echo(user_path)
    comps = _components(root, real)
    if not comps:
        raise PathError(f"is a directory: {shown}")
    dfd = _walk_dirs(root, comps[:-1], shown, create=False)
    try:
        name = comps[-1]
        try:
            check_regular(os.stat(name, dir_fd=dfd, follow_symlinks=False), shown)
            fd = os.open(name, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC, dir_fd=dfd)
        except OSError as exc:
            raise _open_error(exc, shown) from None
    finally:
        os.close(dfd)
    try:
        check_regular(os.fstat(fd), shown)
        _clear_nonblock(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _parent_and_name(workspace: Path | str, user_path: str, denied: Sequence[str], create_parents: bool) -> tuple[int, str, str]:
    root, real = _resolve(workspace, user_path, True, denied)
    shown = _safe_echo(user_path)
    comps = _components(root, real)
    if not comps:
        raise PathError(f"not a file path: {shown}")
    if create_parents:
        ensure_workspace(workspace)
    elif not os.path.isdir(root):
        raise PathError("the workspace does not exist yet")
    dfd = _walk_dirs(root, comps[:-1], shown, create=create_parents)
    return dfd, comps[-1], shown


def _existing(dfd: int, name: str, shown: str) -> os.stat_result | None:
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _open_error(exc, shown) from None
    check_regular(st, shown)
    return st


def open_for_write(
    workspace: Path | str,
    user_path: str,
    *,
    denied: Sequence[str] = (),
    append: bool = False,
    create_parents: bool = True,
    mode: int = FILE_MODE,
) -> int:
    """Open (creating if needed) a confined regular file for writing; return the descriptor.

    Parent directories are created inside the workspace (0o700) one component at a time with
    O_NOFOLLOW; the file is opened with O_NOFOLLOW|O_CREAT relative to its parent descriptor, so a
    symlink swapped in after the check cannot redirect the write. Truncation (when not appending)
    happens only after fstat has confirmed a regular, singly-linked file.
    """
    dfd, name, shown = _parent_and_name(workspace, user_path, denied, create_parents)
    try:
        _existing(dfd, name, shown)
        flags = os.O_WRONLY | os.O_CREAT | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC
        if append:
            flags |= os.O_APPEND
        try:
            fd = os.open(name, flags, mode, dir_fd=dfd)
            _adopt(dfd, fd=fd)
        except OSError as exc:
            raise _open_error(exc, shown) from None
    finally:
        os.close(dfd)
    try:
        check_regular(os.fstat(fd), shown)
        _clear_nonblock(fd)
        if not append:
            os.ftruncate(fd, 0)
    except OSError as exc:
        os.close(fd)
        raise _open_error(exc, shown) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def opened(fd: int, mode: str = "rb") -> Iterator:
    """Wrap a descriptor from open_for_read/open_for_write in a file object that closes it."""
    f = os.fdopen(fd, mode)
    try:
        yield f
    finally:
        f.close()


def atomic_write(
    workspace: Path | str,
    user_path: str,
    data: bytes,
    *,
    denied: Sequence[str] = (),
    create_parents: bool = True,
    expect: os.stat_result | None = None,
) -> bool:
    """Replace a confined file's content atomically; return True if the file was created.

    Writes a temp file in the target's directory through the safe parent descriptor (O_EXCL |
    O_NOFOLLOW), fsyncs it and renames it over the target with dir_fd (a rename replaces a symlink
    rather than following it). On any failure the temp file is removed and the target is
    untouched. An existing target must be a regular, singly-linked file; its mode is kept.
    """
    dfd, name, shown = _parent_and_name(workspace, user_path, denied, create_parents)
    tmp = None
    try:
        st = _existing(dfd, name, shown)
        if expect is not None and (st is None or (st.st_dev, st.st_ino) != (expect.st_dev, expect.st_ino)):
            raise PathError(f"file changed while it was being edited: {shown}")
        mode = (st.st_mode & 0o777) if st is not None else FILE_MODE
        for _ in range(10):
            cand = f".goclaw-tmp-{secrets.token_hex(8)}"
            try:
                fd = os.open(cand, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o600, dir_fd=dfd)
            except FileExistsError:
                continue
            except OSError as exc:
                raise _open_error(exc, shown) from None
            tmp = cand
            break
        else:  # pragma: no cover - astronomically unlikely
            raise PathError(f"could not create a temporary file for {shown}")
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fchmod(fd, mode)
            if st is not None and os.geteuid() == 0:
                os.fchown(fd, st.st_uid, st.st_gid)  # a replaced file keeps its owner
            else:
                _adopt(dfd, fd=fd)
            os.fsync(fd)
        except OSError as exc:
            raise _open_error(exc, shown) from None
        finally:
            os.close(fd)
        try:
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except OSError as exc:
            raise _open_error(exc, shown) from None
        tmp = None
        try:
            os.fsync(dfd)
        except OSError:
            pass
        return st is None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp, dir_fd=dfd)
            except OSError:
                pass
        os.close(dfd)
