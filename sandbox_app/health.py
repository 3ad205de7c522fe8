"""/healthz's `sandbox` check: the default profile's backend answers, which limits hold, the last self-test."""
from __future__ import annotations

from sandbox_app.models import SandboxProfile
from sandbox_app.selectors import sandbox_profile_builtin


def sandbox_health() -> dict:
    """ok when the default profile can start processes (its backend is available, or its sandbox is off)."""
    from sandbox_app.services import SandboxError, resolve_backend, sandbox_capabilities

    profile = SandboxProfile.objects.filter(is_default=True).first() or sandbox_profile_builtin()
    status = {"profile": profile.name, "mode": profile.mode, "capabilities": sandbox_capabilities(),
              "selftest": {"ok": profile.selftest_ok, "at": profile.selftest_at.isoformat() if profile.selftest_at else None}}
    if not profile.sandboxed:
        return {"ok": True, "backend": "host", "warning": "the sandbox is off: processes run on the host", **status}
    try:
        backend = resolve_backend(profile.spec())
    except SandboxError as exc:
        return {"ok": False, "backend": profile.backend, "error": str(exc), **status}
    return {"ok": True, "backend": backend, **status}
