"""Per-call cost of `sandbox_exec` per backend: `true`, and a 50-line shell script.

Run: .venv/bin/python benchmarks/bench_sandbox.py
Writes benchmarks/results/sandbox.json. Every backend in BACKENDS is measured when it reports itself
available; an unavailable one (docker without an engine, ...) is recorded under "skipped" with the reason.
Docker: when no engine answers at DOCKER_HOST, a private dockerd is started for the run (as the test
fixture does: own /tmp dirs and socket, no bridge, no iptables) with the sandbox image built in it, and
stopped afterwards; docker is measured with DOCKER_CALLS calls per case (a container start is ~0.3 s).
Target: bubblewrap p50 at most 10 ms above host p50.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import percentile, summary_ms, write_result  # noqa: E402
from sandbox_app import backends as sandbox_backends  # noqa: E402
from sandbox_app.backends import backend_status  # noqa: E402
from sandbox_app.services import SandboxSpec, sandbox_capabilities, sandbox_exec  # noqa: E402

# (label, spec, workspace layout). "private-parent": the workspace sits in a 0700 directory the sandbox
# user can't search, the production layout under a 0700 data dir (bubblewrap then binds it through its
# private-mount-namespace gateway); "open-parent": directly under /tmp.
BACKENDS = [
    ("host", SandboxSpec(backend="host"), "private-parent"),
    ("bubblewrap", SandboxSpec(backend="bubblewrap"), "private-parent"),
    ("bubblewrap/open-parent", SandboxSpec(backend="bubblewrap"), "open-parent"),
    ("docker", SandboxSpec(backend="docker"), "private-parent"),
]
SCRIPT_50 = "\n".join(
    [f"v{i}=$(( {i} * 3 )); [ \"$v{i}\" -ge 0 ] || exit 1" for i in range(25)]
    + [f"echo line {i} $v{i % 25} >/dev/null" for i in range(24)]
    + ["echo done"]
)
assert len(SCRIPT_50.splitlines()) == 50
DOCKER_CALLS = 50


@contextlib.contextmanager
def docker_engine():
    """Yields a note on where the engine came from; starts a private dockerd when none answers."""
    if backend_status("docker") == "available":
        yield {"engine": os.environ.get("DOCKER_HOST", "default socket")}
        return
    from tests.sandbox_app.dockerd import DockerdError, LocalDockerd

    dockerd = LocalDockerd()
    try:
        dockerd.start()
    except DockerdError as exc:
        yield {"engine": f"none: {exc}"}
        return
    previous = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = dockerd.host
    sandbox_backends.reset_backend("docker")  # forget any cached instance
    try:
        from sandbox_app.docker_image import sandbox_image_build

        sandbox_image_build()
        yield {"engine": "private dockerd started by the benchmark"}
    finally:
        sandbox_backends.reset_backend("docker")
        if previous is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = previous
        dockerd.stop()


def measure(spec: SandboxSpec, workspace: Path, command: str, n: int, warmup: int = 5) -> dict:
    for _ in range(warmup):
        sandbox_exec(command=command, workspace=workspace, spec=spec)
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        r = sandbox_exec(command=command, workspace=workspace, spec=spec)
        samples.append(time.perf_counter() - t)
        if r.exit_code != 0:
            raise RuntimeError(f"{spec.backend}: exit {r.exit_code}: {r.stderr[:200]}")
    out = summary_ms(samples)
    out["p95_ms"] = round(percentile([s * 1000 for s in samples], 95), 4)
    return out


def main(n: int = 200) -> dict:
    results: dict = {}
    skipped: dict = {}
    private_parent = Path(tempfile.mkdtemp(prefix="goclaw-bench-sandbox-"))  # mode 0700
    open_parent = Path(tempfile.mkdtemp(prefix="goclaw-bench-sandbox-open-"))
    open_parent.chmod(0o755)
    docker_note: dict = {}
    try:
        with docker_engine() as docker_note:
            for label, spec, layout in BACKENDS:
                status = backend_status(spec.backend)
                if status != "available":
                    skipped[label] = status
                    continue
                workspace = (private_parent if layout == "private-parent" else open_parent) / label.replace("/", "-")
                workspace.mkdir(mode=0o700)
                calls = min(n, DOCKER_CALLS) if spec.backend == "docker" else n
                results[label] = {"workspace_layout": layout,
                                  "true": measure(spec, workspace, "true", calls),
                                  "script_50_lines": measure(spec, workspace, SCRIPT_50, calls)}
    finally:
        shutil.rmtree(private_parent, ignore_errors=True)
        shutil.rmtree(open_parent, ignore_errors=True)
    overhead = {}
    if "host" in results:
        for label, data in results.items():
            if label != "host":
                overhead[label] = {case: round(data[case]["p50_ms"] - results["host"][case]["p50_ms"], 3)
                                   for case in ("true", "script_50_lines")}
    caps = sandbox_capabilities()
    return {"calls_per_case": n, "results": results, "p50_overhead_vs_host_ms": overhead, "skipped": skipped,
            "target": "bubblewrap p50 <= host p50 + 10 ms", "docker": docker_note,
            "environment": {"bwrap": caps["bwrap"].get("version"), "cgroup": caps["cgroup"].get("version"),
                            "running_as_root": caps["running_as_root"]}}


if __name__ == "__main__":
    write_result("sandbox", main())
