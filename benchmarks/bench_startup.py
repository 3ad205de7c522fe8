"""How fast goclaw starts a management command (P23): `manage.py help` (wall), `manage.py create_agent` against a
running instance (wall: the embedded PostgreSQL is already up, held open by this process), and the CPU a fresh
process spends in django.setup(). Each figure is the median of ROUNDS runs; results/startup.json.

Before/after in one run: `python benchmarks/compare.py REV bench_startup.py`."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from _common import BENCH_DATA, ROOT, django_setup, summary_ms, write_result

ROUNDS = int(os.environ.get("BENCH_STARTUP_ROUNDS", "7"))
SETUP_CPU = ("import os, sys, time; sys.path.insert(0, os.getcwd()); t = time.process_time(); import django; "
             "django.setup(); print(time.process_time() - t)")


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    out = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return time.perf_counter() - started, out.stdout


def main() -> None:
    django_setup()  # migrated, and the embedded PostgreSQL stays up while this process runs
    env = {**os.environ, "GOCLAW_DATA_DIR": str(BENCH_DATA / "var"), "DJANGO_SETTINGS_MODULE": "goclaw.settings"}
    manage = [sys.executable, "manage.py"]
    help_s, command_s, setup_cpu_s = [], [], []
    for round_no in range(ROUNDS):
        help_s.append(timed([*manage, "help"], env)[0])
        command_s.append(timed([*manage, "create_agent", f"startup-{os.getpid()}-{round_no}"], env)[0])
        setup_cpu_s.append(float(timed([sys.executable, "-c", SETUP_CPU], env)[1].strip()))
    write_result(os.environ.get("BENCH_RESULT_NAME", "startup"), {
        "rounds": ROUNDS,
        "help": summary_ms(help_s),
        "command_against_running_instance": summary_ms(command_s),
        "django_setup_cpu": summary_ms(setup_cpu_s),
        "targets": {"help_p50_ms": 1000, "command_p50_ms": 1500},
    })


if __name__ == "__main__":
    main()
