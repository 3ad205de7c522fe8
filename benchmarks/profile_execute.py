"""Where an execute request's CPU goes under load: `manage.py up` (granian), 64 clients calling `datetime` as in
bench_http, the CPU seconds of every process per request from /proc, and py-spy sampling the web workers only while
they hold the GIL (Python CPU, not waits). Writes results/execute_profile.json. Not run by `make bench` (py-spy
slows the server it samples): `.venv/bin/python benchmarks/profile_execute.py`."""
from __future__ import annotations

import asyncio
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import fresh_platform, unlimited_agent_token, write_result
from loadgen import build_request, run_load


SECONDS = float(os.environ.get("BENCH_SECONDS", "10"))
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds() -> dict[int, tuple[str, float]]:
    """pid -> (role, user+system CPU seconds) of every process on the machine."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        comm = stat[stat.find("(") + 1:stat.rfind(")")]
        args = b" ".join(argv).decode(errors="replace")
        role = ("postgres" if "postgres" in comm else "web server (granian wsgi)" if "granian" in args and "wsgi" in args
                else "load generator" if int(pid) == os.getpid() else "other")
        found[int(pid)] = (role, (int(fields[11]) + int(fields[12])) / TICK)
    return found


def aggregate(raw: Path) -> dict:
    """Inclusive and self shares of the sampled frames (function and file), as percentages."""
    inclusive, own, total = collections.Counter(), collections.Counter(), 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")[1:]]  # drop the process frame
        total += int(count)
        for frame in set(frames):
            inclusive[frame] += int(count)
        if frames:
            own[frames[-1]] += int(count)
    share = lambda counter: [[frame, round(100 * n / total, 1)] for frame, n in counter.most_common(60)]  # noqa: E731
    return {"samples": total, "inclusive_pct": share(inclusive), "self_pct": share(own)}


def main() -> None:
    if not shutil.which("py-spy"):
        sys.exit("py-spy is needed: pip install py-spy")
    env, up = fresh_platform("profile")
    port = up.port
    try:
        up.wait_healthy()
        auth = {"Authorization": f"Bearer {unlimited_agent_token(env)}", "Content-Type": "application/json"}
        requests = [build_request("POST", "/api/v1/tools/execute", "127.0.0.1", port, json.dumps(
            {"tool": "datetime", "arguments": {}, "context": {"session_key": f"bench-{i}"}}).encode(), auth) for i in range(64)]
        asyncio.run(run_load("127.0.0.1", port, requests, connections=8, seconds=2))
        web = [int(p) for p in subprocess.run(["pgrep", "-f", f"granian --interface wsgi --host 127.0.0.1 --port {port} "],
                                               capture_output=True, text=True).stdout.split()]
        raw = Path(tempfile.mkdtemp()) / "execute.raw"
        spy = subprocess.Popen(["py-spy", "record", "--pid", str(min(web)), "--subprocesses", "--gil", "--nonblocking",
                                "--rate", "200", "--duration", str(int(SECONDS)), "--format", "raw", "--output", str(raw)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        before = cpu_seconds()
        run = asyncio.run(run_load("127.0.0.1", port, requests, connections=64, seconds=SECONDS))
        after = cpu_seconds()
        spy.wait(60)
        per_role = collections.Counter()
        for pid, (role, seconds) in after.items():
            per_role[role] += seconds - before.get(pid, (role, 0.0))[1]
        n = run["requests"]
        write_result("execute_profile", {
            "note": "rps is lowered by the sampler itself; read bench_http for throughput",
            "requests": n, "rps_while_sampled": round(run["rps"], 1),
            "cpu_us_per_request": {role: round(s / n * 1e6) for role, s in per_role.most_common() if role != "other"},
            "web_server_python_while_holding_the_gil": aggregate(raw)})
    finally:
        up.stop()


if __name__ == "__main__":
    main()
