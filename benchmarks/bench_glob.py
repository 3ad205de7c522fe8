"""The fs tools' glob matcher on inputs that make backtracking matchers (regex-based globs) explode: many `*`
against a long near-miss name, and a chain of `**` against a deep near-miss path. The matcher is O(pattern x name)
by construction; tests/tools_app/test_fs_tools.py checks its answers, this measures its time. Target: p99 <= 50 ms.

Run: .venv/bin/python benchmarks/bench_glob.py   (writes benchmarks/results/glob.json)
"""
from __future__ import annotations

import time

from _common import ROOT, summary_ms, write_result  # noqa: F401 - ROOT puts the project on sys.path

N = 200
TARGET_P99_MS = 50.0
CASES = {
    "stars_vs_near_miss_name": ("*a*a*a*a*a*a*a*a*a*a*a*b", "a" * 250),
    "double_stars_vs_deep_near_miss": ("/".join(["**"] * 30 + ["x"] * 3), "/".join(["x"] * 60 + ["y"])),
}


def main() -> None:
    from tools_app.builtin.fs import _Glob

    results = {}
    for label, (pattern, name) in CASES.items():
        glob = _Glob(pattern)
        samples = []
        for _ in range(N):
            started = time.perf_counter()
            matched = glob.match(name)
            samples.append(time.perf_counter() - started)
            assert not matched
        results[label] = summary_ms(samples)
    write_result("glob", {"results": results, "target_p99_ms": TARGET_P99_MS,
                          "meets_target": max(r["p99_ms"] for r in results.values()) <= TARGET_P99_MS})


if __name__ == "__main__":
    main()
