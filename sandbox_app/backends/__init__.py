"""Sandbox backends. A backend has a `name` and
`run(*, argv, workspace, cwd, env, limits, spec, stdin, cancel) -> ExecResult` (types from `sandbox_app.runs`):
`workspace` and `cwd` are real, absolute host paths (cwd inside workspace), `env` is final (HOME set); once the
`cancel` event (or None) is set, every process of the run is killed promptly and the result says `cancelled`.

Registered: "bubblewrap", "docker" (lazily imported from `sandbox_app.backends.docker`), "host".
"auto" resolves to bubblewrap when it is usable, else docker when it is, else `SandboxError` — never host.
Lookups of an unknown or unavailable backend raise `SandboxError`: callers never silently get another one.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Protocol

from sandbox_app.runs import SandboxError


class Backend(Protocol):
    name: str

    def run(self, *, argv: list[str], workspace: Any, cwd: Any, env: dict[str, str], limits: Any, spec: Any,
            stdin: bytes | None, cancel: threading.Event | None = None) -> Any: ...


_lock = threading.Lock()
_factories: dict[str, Callable[[], Backend]] = {}
_instances: dict[str, Backend] = {}


def register_backend(name: str, factory: Callable[[], Backend]) -> None:
    """Register a backend factory (called lazily once; it may raise SandboxError if unavailable)."""
    with _lock:
        _factories[name] = factory
        _instances.pop(name, None)


def reset_backend(name: str) -> None:
    """Forget the cached instance, so the next lookup builds it again (e.g. after DOCKER_HOST changed)."""
    with _lock:
        _instances.pop(name, None)


def available_backends() -> list[str]:
    with _lock:
        return sorted(_factories)


def get_backend(name: str) -> Backend:
    if not isinstance(name, str) or not name:
        raise SandboxError(f"sandbox backend {name!r} is not available")
    with _lock:
        instance = _instances.get(name)
        if instance is not None:
            return instance
        factory = _factories.get(name)
        if factory is None:
            raise SandboxError(f"sandbox backend {name} is not available")
        try:
            instance = factory()
        except SandboxError:
            raise
        except Exception as exc:  # a backend that can't initialise is unavailable, never replaced
            raise SandboxError(f"sandbox backend {name} is not available: {exc}") from None
        _instances[name] = instance
        return instance


AUTO_ORDER = ("bubblewrap", "docker")


def resolve_backend(name: str) -> Backend:
    """`get_backend`, plus "auto": the first available of AUTO_ORDER, else SandboxError (fail closed)."""
    if name != "auto":
        return get_backend(name)
    reasons = []
    for candidate in AUTO_ORDER:
        try:
            return get_backend(candidate)
        except SandboxError as exc:
            reasons.append(f"{candidate}: {exc}")
    raise SandboxError("no sandbox backend is available (" + "; ".join(reasons) + ")")


def backend_status(name: str) -> str:
    """"available" or the reason it is not (for capabilities / health checks)."""
    try:
        get_backend(name)
    except SandboxError as exc:
        return str(exc)
    return "available"


def _bubblewrap_factory() -> Backend:
    from sandbox_app.backends.bubblewrap import BubblewrapBackend

    return BubblewrapBackend()


def _docker_factory() -> Backend:
    from sandbox_app.backends.docker import DockerBackend

    return DockerBackend()


def _host_factory() -> Backend:
    from sandbox_app.backends.host import HostBackend

    return HostBackend()


register_backend("bubblewrap", _bubblewrap_factory)
register_backend("docker", _docker_factory)
register_backend("host", _host_factory)
