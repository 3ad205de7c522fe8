"""The host backend: runs the process directly on this machine, in its own session / process group.

Only for profiles with the sandbox switched off. No filesystem or network isolation; what it does give:
- as root, the process runs as the unprivileged `goclaw-sandbox` user (no groups, no new privileges),
  so the server's /proc/<pid>/environ and its 0700 data dir are unreadable; the workspace root is
  chowned to that user so it can write there;
- the limits: RLIMITs through prlimit, pids/memory through a per-run cgroup where the machine offers it
  (which also lets us kill processes that escaped the process group with `setsid`);
- the supervision of `sandbox_app.runner` (output caps, timeout -> TERM -> KILL of the whole tree, drain).
"""
from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from sandbox_app.identity import prepare_workspace, sandbox_identity
from sandbox_app.runner import Launch, ProcessRunner, apply_limits, raise_if_wrapper_failed
from sandbox_app.runs import ExecLimits, ExecResult, SandboxError, SandboxSpec


class HostBackend:
    name = "host"

    def __init__(self, *, drain_seconds: float = 2.0, poll_interval: float = 0.05) -> None:
        self.runner = ProcessRunner(drain_seconds=drain_seconds, poll_interval=poll_interval)

    @property
    def drain_seconds(self) -> float:
        return self.runner.drain_seconds

    def run(self, *, argv: list[str], workspace: Path, cwd: Path, env: dict[str, str], limits: ExecLimits,
            spec: SandboxSpec | None = None, stdin: bytes | None = None,
            cancel: threading.Event | None = None) -> ExecResult:
        identity = sandbox_identity()
        prepare_workspace(workspace, identity)
        program = argv[0]
        if "/" in program:
            resolved = program if os.path.isabs(program) else os.path.join(str(cwd), program)
            found = os.path.isfile(resolved) and os.access(resolved, os.X_OK)
        else:
            found = shutil.which(program, path=env.get("PATH", "")) is not None
        if not found:
            raise SandboxError(f"executable not found: {program}")

        launch = Launch(argv=list(argv), env=env, cwd=str(cwd), identity=identity)
        enforced, cgroup = apply_limits(launch, limits, overhead_pids=0)
        try:
            done = self.runner.run(launch, limits, stdin, cancel)
        finally:
            if cgroup is not None:
                cgroup.remove()
        raise_if_wrapper_failed(done, program)
        # the process group always; with a cgroup also what left the group (setsid)
        enforced += ("timeout_seconds:cgroup" if cgroup is not None else "timeout_seconds:process_group",)
        return ExecResult(
            exit_code=done.returncode, stdout=done.stdout.text(), stderr=done.stderr.text(),
            stdout_truncated=done.stdout.truncated, stderr_truncated=done.stderr.truncated,
            timed_out=done.timed_out, duration_ms=done.duration_ms, backend=self.name,
            profile=spec.profile if spec is not None else "", limits_enforced=enforced, cancelled=done.cancelled,
        )
