"""`make bench`: run every benchmark script but the soak ones; each writes benchmarks/results/<name>.json."""
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOAK = {"bench_replicas.py", "bench_ws_fanout.py"}  # `make soak` runs these (with soak.py)
failed = []
for script in sorted(p for p in HERE.glob("bench_*.py") if p.name not in SOAK):
    print(f"== {script.name}", flush=True)
    if subprocess.run([sys.executable, str(script)], cwd=HERE.parent).returncode != 0:
        failed.append(script.name)
sys.exit(f"failed: {', '.join(failed)}" if failed else 0)
