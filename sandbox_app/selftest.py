"""The sandbox self-test: run the probe suite in a profile and keep, probe by probe, what held."""
from __future__ import annotations

import tempfile
from dataclasses import asdict
from pathlib import Path

from django.utils import timezone

from sandbox_app.models import SandboxProfile
from sandbox_app.services import SandboxError

SELFTEST_TIMEOUT_SECONDS = 10
SELFTEST_OUTPUT_BYTES = 64 * 1024


def sandbox_selftest_run(*, profile: SandboxProfile, hostile_paths: dict[str, str] | None = None) -> dict:
    """Run every probe in `profile` (as its mode and backend run agent processes) and store the report on it.

    `hostile_paths` names real paths the sandbox must not reach (the data directory, the workspaces) beside the
    decoys the probe suite makes itself. Does I/O: call it outside any transaction."""
    from sandbox_app.probes import run_probes
    from sandbox_app.services import sandbox_capabilities

    spec = profile.spec(sandboxed=profile.sandboxed)
    limits = profile.limits(timeout_seconds=min(profile.timeout_seconds, SELFTEST_TIMEOUT_SECONDS), grace_seconds=1,
                            max_output_bytes=SELFTEST_OUTPUT_BYTES)
    with tempfile.TemporaryDirectory(prefix="goclaw-selftest-") as parent:
        try:
            results = [asdict(r) for r in run_probes(spec, workspace_parent=Path(parent), limits=limits,
                                                     hostile_paths=hostile_paths or {})]
        except SandboxError as exc:
            results = [{"name": "backend available", "held": False, "detail": str(exc)}]
    report = {"backend": spec.backend, "mode": profile.mode, "probes": results, "capabilities": sandbox_capabilities()}
    ok = bool(results) and all(r["held"] for r in results)
    now = timezone.now()
    SandboxProfile.objects.filter(pk=profile.pk).update(selftest_at=now, selftest_ok=ok, selftest_report=report)
    profile.selftest_at, profile.selftest_ok, profile.selftest_report = now, ok, report
    return report
