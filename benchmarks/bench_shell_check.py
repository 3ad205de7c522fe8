"""Benchmark tools_app.security.shell_check over the public corpus.

Run: .venv/bin/python benchmarks/bench_shell_check.py
Writes benchmarks/results/shell_check.json with checks/s, latency percentiles, deny recall and false-deny rate.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools_app.security.shell_check import _check_cached, check_command  # noqa: E402

CORPUS = ROOT / "tests" / "tools_app" / "corpus"


def _load(name: str) -> list[str]:
    return [ln for ln in (CORPUS / name).read_text(encoding="utf-8").splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def main(rounds: int = 5) -> dict:
    dangerous, benign = _load("shell_dangerous.txt"), _load("shell_benign.txt")
    corpus = dangerous + benign
    for c in corpus:  # warm-up (imports, regex caches)
        check_command(c)
    lat = []
    start = time.perf_counter()
    for _ in range(rounds):
        _check_cached.cache_clear()  # measure the analysis, not the memo
        for c in corpus:
            t = time.perf_counter()
            check_command(c)
            lat.append(time.perf_counter() - t)
    total = time.perf_counter() - start
    denied = sum(check_command(c).verdict == "deny" for c in dangerous)
    false_denied = sum(check_command(c).verdict == "deny" for c in benign)
    lat.sort()
    result = {
        "commands": len(corpus),
        "dangerous": len(dangerous),
        "benign": len(benign),
        "checks": len(lat),
        "checks_per_second": round(len(lat) / total, 1),
        "latency_ms": {
            "mean": round(statistics.fmean(lat) * 1e3, 3),
            "p50": round(lat[len(lat) // 2] * 1e3, 3),
            "p95": round(lat[int(len(lat) * 0.95)] * 1e3, 3),
            "p99": round(lat[int(len(lat) * 0.99)] * 1e3, 3),
            "max": round(lat[-1] * 1e3, 3),
        },
        "deny_recall": round(denied / len(dangerous), 4),
        "false_deny_rate": round(false_denied / len(benign), 4),
        "python": sys.version.split()[0],
    }
    out = ROOT / "benchmarks" / "results" / "shell_check.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
