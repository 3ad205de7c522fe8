"""Run cgroups created and removed by several processes at once: they share one parent cgroup, which the last run
of any process removes, so a run must never fail because another process removed that parent under it."""
import subprocess
import sys
import textwrap

import pytest

from sandbox_app.cgroups import cgroup_support
from tests.servers import ROOT

CYCLES = """
import sys
from sandbox_app.cgroups import create_run_cgroup
failures = 0
for _ in range(int(sys.argv[1])):
    try:
        run = create_run_cgroup(max_pids=64, memory_bytes=64 * 1024 * 1024)
    except OSError as exc:
        failures += 1
        print("failed:", exc, flush=True)
        continue
    if run is not None:
        run.remove()
print("failures", failures)
"""


def test_processes_creating_and_removing_run_cgroups_at_once_never_fail():
    if not cgroup_support().controllers:
        pytest.skip("no usable cgroup controller on this machine (the sandbox then enforces no cgroup limits)")
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(CYCLES), "1500"], cwd=ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for _ in range(8)]
    outputs = [proc.communicate(timeout=120)[0] for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), outputs
    assert all(out.strip().endswith("failures 0") for out in outputs), outputs
