"""Sandbox backends. A backend has a `name` and
`run(*, argv, cwd, env, limits, stdin) -> ExecResult` (types from `sandbox_app.services`).

Only "host" ships today; bubblewrap/docker backends will call `register_backend`. Lookups of an unknown
or unavailable backend raise `SandboxError` — callers never silently get a different backend.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Protocol

from sandbox_app.services import SandboxError


class Backend(Protocol):
    name: str

    def run(self, *, argv: list[str], cwd: Any, env: dict[str, str], limits: Any, stdin: bytes | None) -> Any: ...


_lock = threading.Lock()
_factories: dict[str, Callable[[], Backend]] = {}
_instances: dict[str, Backend] = {}


def register_backend(name: str, factory: Callable[[], Backend]) -> None:
    """Register a backend factory (called lazily once; it may raise SandboxError if unavailable)."""
    with _lock:
        _factories[name] = factory
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


def _host_factory() -> Backend:
    from sandbox_app.backends.host import HostBackend

    return HostBackend()


register_backend("host", _host_factory)
