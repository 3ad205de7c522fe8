"""Shared helpers: Django set-up against a benchmark data dir, percentiles, writing results JSON."""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
BENCH_DATA = Path(os.environ.get("GOCLAW_BENCH_DATA", "/tmp/goclaw-bench"))
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def django_setup() -> None:
    """Configure Django on the benchmark's own embedded PostgreSQL and migrate it."""
    os.environ.setdefault("GOCLAW_DATA_DIR", str(BENCH_DATA / "var"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "goclaw.settings")
    os.environ.setdefault("GOCLAW_LOG_LEVEL", "warning")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", interactive=False, verbosity=0)


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def summary_ms(samples_s: list[float]) -> dict:
    ms = [s * 1000 for s in samples_s]
    return {"n": len(ms), "p50_ms": round(percentile(ms, 50), 4), "p90_ms": round(percentile(ms, 90), 4),
            "p99_ms": round(percentile(ms, 99), 4), "mean_ms": round(statistics.fmean(ms), 4)}


def machine() -> dict:
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform()}


def write_result(name: str, data: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"benchmark": name, "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "machine": machine(), **data}
    path.write_text(json.dumps(payload, indent=2) + "\n")
    print(json.dumps(payload, indent=2))
    return path
