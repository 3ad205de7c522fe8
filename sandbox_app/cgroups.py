"""Per-run cgroups for the `pids` and `memory` limits (cgroup v1, v2 or a hybrid of both).

Each run gets its own cgroup `<server's own cgroup>/goclaw/run-<pid>-<n>` in every usable controller
hierarchy. Nesting under the server's own cgroup keeps whatever limits the server itself lives under
(a sandbox can never escape them). The process joins the cgroup *before* it execs anything (see
`sandbox_app.runner`), so it cannot fork first. After the run every process left in the cgroup is
SIGKILLed and the cgroup removed; the `goclaw` parent is removed too when no other run uses it, so the
server's own cgroup is left as it was found.
"""
from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

CONTROLLERS = ("pids", "memory")
PARENT_NAME = "goclaw"
_counter = itertools.count(1)
_parent_lock = threading.Lock()


@dataclass(frozen=True)
class CgroupSupport:
    """What this machine offers: `version` is "v1", "v2", "hybrid" or "" and `controllers` maps each
    usable controller to (hierarchy version, directory under which run cgroups are made)."""

    version: str
    controllers: dict[str, tuple[int, Path]] = field(default_factory=dict)
    unusable: dict[str, str] = field(default_factory=dict)  # controller -> why not

    def as_dict(self) -> dict:
        return {
            "version": self.version or None,
            "controllers": {name: {"hierarchy": f"v{v}", "parent": str(p)} for name, (v, p) in
                            sorted(self.controllers.items())},
            "unusable": dict(sorted(self.unusable.items())),
        }


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(fstype, mount point, super options) of the cgroup mounts from /proc/self/mountinfo."""
    found = []
    try:
        with open("/proc/self/mountinfo") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                parts, rparts = left.split(), right.split()
                if len(parts) < 5 or len(rparts) < 3 or rparts[0] not in ("cgroup", "cgroup2"):
                    continue
                found.append((rparts[0], parts[4].replace("\\040", " "), set(rparts[2].split(","))))
    except OSError:
        pass
    return found


def _own_paths() -> dict[str, str]:
    """controller name (or "" for the v2 hierarchy) -> this process's cgroup path."""
    own: dict[str, str] = {}
    try:
        with open("/proc/self/cgroup") as fh:
            for line in fh:
                _, names, path = line.rstrip("\n").split(":", 2)
                for name in names.split(",") if names else [""]:
                    own[name] = path
    except OSError:
        pass
    return own


_support: CgroupSupport | None = None


def cgroup_support(*, refresh: bool = False) -> CgroupSupport:
    """Detect (once) which controllers we can use for per-run cgroups."""
    global _support
    if _support is not None and not refresh:
        return _support
    mounts = _mounts()
    own = _own_paths()
    controllers: dict[str, tuple[int, Path]] = {}
    unusable: dict[str, str] = {}
    has_v1 = any(m[0] == "cgroup" for m in mounts)
    has_v2 = any(m[0] == "cgroup2" for m in mounts)
    for name in CONTROLLERS:
        v1 = next((m for m in mounts if m[0] == "cgroup" and name in m[2]), None)
        if v1 is not None:
            base = Path(v1[1]) / own.get(name, "/").lstrip("/")
            if os.access(base, os.W_OK):
                controllers[name] = (1, base / PARENT_NAME)
            else:
                unusable[name] = f"{base} is not writable"
            continue
        v2 = next((m for m in mounts if m[0] == "cgroup2"), None)
        if v2 is None:
            unusable[name] = "no cgroup hierarchy offers it"
            continue
        base = Path(v2[1]) / own.get("", "/").lstrip("/")
        try:
            available = (base / "cgroup.controllers").read_text().split()
        except OSError:
            available = []
        if name not in available:
            unusable[name] = f"not enabled for {base}"
        elif not os.access(base, os.W_OK):
            unusable[name] = f"{base} is not writable"
        elif own.get("", "/") != "/" and _has_processes(base) and name not in _subtree(base):
            # v2 "no internal processes": we can't enable it below a cgroup that holds processes.
            unusable[name] = f"{base} holds processes and does not delegate {name}"
        else:
            controllers[name] = (2, base / PARENT_NAME)
    # "hybrid": v1 controller hierarchies next to a unified (v2) one, as systemd's hybrid mode mounts them.
    version = "hybrid" if has_v1 and has_v2 else ("v1" if has_v1 else ("v2" if has_v2 else ""))
    _support = CgroupSupport(version=version, controllers=controllers, unusable=unusable)
    return _support


def _has_processes(path: Path) -> bool:
    try:
        return bool((path / "cgroup.procs").read_text().strip())
    except OSError:
        return True


def _subtree(path: Path) -> list[str]:
    try:
        return (path / "cgroup.subtree_control").read_text().split()
    except OSError:
        return []


def _write(path: Path, value: str) -> None:
    with open(path, "w") as fh:
        fh.write(value)


class RunCgroup:
    """The cgroup(s) of one run. `procs_files` are what the launcher writes its pid into."""

    def __init__(self) -> None:
        self.dirs: dict[str, tuple[int, Path]] = {}
        self.enforced: list[str] = []

    @property
    def procs_files(self) -> list[str]:
        seen: list[str] = []
        for _, path in self.dirs.values():
            procs = str(path / "cgroup.procs")
            if procs not in seen:
                seen.append(procs)
        return seen

    def pids(self) -> set[int]:
        found: set[int] = set()
        for procs in self.procs_files:
            try:
                found.update(int(p) for p in Path(procs).read_text().split())
            except (OSError, ValueError):
                pass
        return found

    def signal_all(self, sig: int, *, spare: int | None = None) -> None:
        """Signal every process in the run's cgroup(s). Through a pidfd, and only after re-checking the
        pid is still a member, so a recycled pid is never signalled."""
        for pid in self.pids():
            if pid == spare:
                continue
            try:
                pidfd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                if pid in self.pids():
                    signal.pidfd_send_signal(pidfd, sig)
            except OSError:
                pass
            finally:
                os.close(pidfd)

    def kill_all(self, wait_seconds: float = 2.0) -> bool:
        """SIGKILL everything left; True once the cgroup(s) are empty."""
        for version, path in self.dirs.values():
            if version == 2 and (path / "cgroup.kill").exists():
                try:
                    _write(path / "cgroup.kill", "1")
                except OSError:
                    pass
        end = time.monotonic() + wait_seconds
        while True:
            left = self.pids()
            if not left:
                return True
            self.signal_all(signal.SIGKILL)
            if time.monotonic() >= end:
                return False
            time.sleep(0.002)

    def oom_killed(self) -> bool:
        """Did the memory controller kill something in this run?"""
        entry = self.dirs.get("memory")
        if entry is None:
            return False
        version, path = entry
        name = "memory.oom_control" if version == 1 else "memory.events"
        try:
            for line in (path / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill" and int(value) > 0:
                    return True
        except (OSError, ValueError):
            pass
        return False

    def remove(self) -> None:
        self.kill_all()
        for _, path in self.dirs.values():
            for _ in range(250):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY: the last process is still exiting
                    time.sleep(0.002)
            with _parent_lock:
                try:
                    path.parent.rmdir()  # fails (EBUSY/ENOTEMPTY) while another run uses it: fine
                except OSError:
                    pass
        self.dirs.clear()


def create_run_cgroup(*, max_pids: int, memory_bytes: int) -> RunCgroup | None:
    """Create the run's cgroup(s) with `pids.max` / the memory limit set (0 = no limit).

    Returns None when no controller is usable. Raises OSError when a usable controller fails, so the
    caller can fail closed rather than run without a limit it promised."""
    support = cgroup_support()
    if not support.controllers:
        return None
    run = RunCgroup()
    name = f"run-{os.getpid()}-{next(_counter)}"
    try:
        for controller, (version, parent) in support.controllers.items():
            path = parent / name
            with _parent_lock:
                for attempt in range(5):
                    try:
                        parent.mkdir(exist_ok=True)
                        if version == 2:
                            _enable_v2(parent, controller)
                        path.mkdir(exist_ok=True)
                        break
                    except (FileNotFoundError, FileExistsError):
                        # Another process removed the shared parent as its last run ended (the lock is per
                        # process): between our mkdir and its check (EEXIST, then no directory) or after it.
                        if attempt == 4:
                            raise
            run.dirs[controller] = (version, path)
            if controller == "pids" and max_pids > 0:
                _write(path / "pids.max", str(max_pids))
            if controller == "memory" and memory_bytes > 0:
                if version == 1:
                    _write(path / "memory.limit_in_bytes", str(memory_bytes))
                    if (path / "memory.memsw.limit_in_bytes").exists():  # no escape into swap
                        _write(path / "memory.memsw.limit_in_bytes", str(memory_bytes))
                else:
                    _write(path / "memory.max", str(memory_bytes))
                    if (path / "memory.swap.max").exists():
                        _write(path / "memory.swap.max", "0")
                    if (path / "memory.oom.group").exists():
                        _write(path / "memory.oom.group", "1")
    except BaseException:
        run.remove()
        raise
    return run


def _enable_v2(parent: Path, controller: str) -> None:
    """v2: a controller must be enabled in every ancestor's subtree_control down to the run cgroup."""
    grand = parent.parent
    if controller not in _subtree(grand):
        _write(grand / "cgroup.subtree_control", f"+{controller}")
    if controller not in _subtree(parent):
        _write(parent / "cgroup.subtree_control", f"+{controller}")
