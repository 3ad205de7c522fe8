"""What this machine offers the sandbox (for `sandbox_capabilities()`, health checks, the admin self-test)."""
from __future__ import annotations

import os


def capabilities() -> dict:
    """A JSON-able description; never raises (each part reports its own error)."""
    from sandbox_app.backends import AUTO_ORDER, available_backends, backend_status
    from sandbox_app.backends.bubblewrap import bwrap_info
    from sandbox_app.cgroups import cgroup_support
    from sandbox_app.identity import server_is_root
    from sandbox_app.runner import PIDS_BACKSTOP, system_tool

    result: dict = {"server_uid": os.geteuid(), "running_as_root": server_is_root()}
    try:
        from sandbox_app.identity import sandbox_identity

        ident = sandbox_identity()
        result["sandbox_user"] = {"name": ident.name, "uid": ident.uid, "gid": ident.gid,
                                  "dedicated": ident.switch}
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        result["sandbox_user"] = {"error": str(exc)}
    result["bwrap"] = bwrap_info()
    try:
        result["cgroup"] = cgroup_support().as_dict()
    except Exception as exc:  # noqa: BLE001
        result["cgroup"] = {"error": str(exc)}
    result["cgroup"]["pids_backstop"] = PIDS_BACKSTOP
    result["tools"] = {name: system_tool(name) for name in ("prlimit", "setpriv", "useradd")}
    backends = {name: backend_status(name) for name in available_backends()}
    result["backends"] = backends
    result["auto_backend"] = next((name for name in AUTO_ORDER if backends.get(name) == "available"), None)
    return result
