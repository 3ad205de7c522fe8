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


def unlimited_agent_token(env: dict[str, str], key: str = "bench") -> str:
    """A new agent `key` on the platform behind `env` whose rate limits never refuse a benchmark call; its token."""
    from tests.servers import manage

    manage(env, "create_agent", key)
    manage(env, "shell", "-c", "from tools_app.models import Agent; from tools_app.services.agents import agent_update; "
                               f"agent_update(agent=Agent.objects.get(key={key!r}), other_config={{'rate_limit_per_hour': 10**9, "
                               "'rate_limit_user_per_hour': 10**9, 'rate_limit_agent_per_hour': 10**9})")
    return manage(env, "issue_token", key).strip()


def fresh_platform(name: str):
    """`manage.py up` on a new data dir BENCH_DATA/<name>-var (its own embedded PostgreSQL), logging to
    BENCH_DATA/<name>-up.log: (its environment, the UpProcess). The caller waits for it to be healthy and stops it."""
    import shutil

    from tests.servers import UpProcess, free_port, up_env

    BENCH_DATA.mkdir(parents=True, exist_ok=True)
    data_dir = BENCH_DATA / f"{name}-var"
    shutil.rmtree(data_dir, ignore_errors=True)
    env = up_env(data_dir, one_process_each=False, GOCLAW_LOG_LEVEL="warning", GOCLAW_ADMIN_PASSWORD="bench-admin-pw-1")
    return env, UpProcess(env, free_port(), free_port(), BENCH_DATA / f"{name}-up.log")
