"""What one run is: how it is isolated (`SandboxSpec`), its limits, its result, and the error when it cannot start.

A leaf module (it imports nothing of the app) so the backends and the runner can use these types while
`sandbox_app.services`, which imports the backends, re-exports them to callers.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

TIMEOUT_MIN_SECONDS = 1.0
TIMEOUT_MAX_SECONDS = 3600.0
GRACE_MAX_SECONDS = 60.0
OUTPUT_MIN_BYTES = 1024
OUTPUT_MAX_BYTES = 256 * 1024 * 1024


class SandboxError(Exception):
    """The process could not be started (bad cwd, unknown backend, missing executable, ...).

    The message is meant for the caller / the model; it never contains environment values."""


def _clamp(value: float, low: float, high: float, default: float) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return default
    if math.isnan(value):
        return default
    return min(max(value, low), high)


@dataclass(frozen=True)
class ExecLimits:
    """Per-run limits. Out-of-range values are clamped on construction (timeout to [1, 3600] s).

    Resource limits (0 = not set): `cpu_seconds` (RLIMIT_CPU), `memory_bytes` (cgroup memory where the
    machine offers it, else RLIMIT_AS), `max_processes` (cgroup pids, else RLIMIT_NPROC), `max_open_files`
    (RLIMIT_NOFILE), `max_file_bytes` (RLIMIT_FSIZE). Backends report which ones held in the result."""

    timeout_seconds: float = 60.0        # wall clock for the whole run
    grace_seconds: float = 3.0           # SIGTERM -> grace -> SIGKILL (to the whole process tree)
    max_output_bytes: int = 1024 * 1024  # kept per stream; the rest is drained and discarded
    cpu_seconds: int = 0
    memory_bytes: int = 0
    max_processes: int = 0
    max_open_files: int = 0
    max_file_bytes: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "timeout_seconds",
                           _clamp(self.timeout_seconds, TIMEOUT_MIN_SECONDS, TIMEOUT_MAX_SECONDS, 60.0))
        object.__setattr__(self, "grace_seconds", _clamp(self.grace_seconds, 0.0, GRACE_MAX_SECONDS, 3.0))
        object.__setattr__(self, "max_output_bytes",
                           int(_clamp(self.max_output_bytes, OUTPUT_MIN_BYTES, OUTPUT_MAX_BYTES, 1024 * 1024)))
        for name in ("cpu_seconds", "memory_bytes", "max_processes", "max_open_files", "max_file_bytes"):
            object.__setattr__(self, name, int(_clamp(getattr(self, name), 0, 2**62, 0)))


@dataclass(frozen=True)
class SandboxSpec:
    """How one run is isolated. Built from a `SandboxProfile` row (`profile.spec()`) or directly.

    `backend`: auto (bubblewrap where `bwrap` exists, else docker where an engine answers, else the run is
    refused) | bubblewrap | docker | host (only for profiles with the sandbox switched off).
    `network`: False = no network at all; True = network on, and then `network_local` says whether
    loopback and private ranges are reachable (a backend that cannot guarantee False refuses the run).
    `ro_binds`: extra host paths made visible read-only at the same path."""

    backend: str = "auto"
    profile: str = ""
    network: bool = False
    network_local: bool = False
    image: str = ""
    ro_binds: tuple[str, ...] = ()


@dataclass
class ExecResult:
    """What a run did: its exit, its (capped) output, whether it timed out or was cancelled, which limits held."""

    exit_code: int | None  # None when killed by timeout or cancellation; -N when the process died from signal N
    stdout: str            # utf-8, errors="replace"
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool
    duration_ms: float
    backend: str
    profile: str = ""
    limits_enforced: tuple[str, ...] = ()  # e.g. ("cpu_seconds", "max_processes:cgroup", "memory_bytes:rlimit")
    cancelled: bool = False  # the caller's cancel event ended the run: every process of it was killed


# Appended to stderr of a cancelled run, so whoever reads only the streams sees why they stop short.
CANCELLED_NOTE = "\n[sandbox] cancelled: the caller stopped waiting for this run; all of its processes were killed\n"


WORKSPACE_MOUNT = "/workspace"  # where bubblewrap / docker show the workspace to the process
