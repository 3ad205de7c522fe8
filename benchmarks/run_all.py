"""`make bench`: run every benchmark script; each writes benchmarks/results/<name>.json."""
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
failed = []
for script in sorted(HERE.glob("bench_*.py")):
    print(f"== {script.name}", flush=True)
    if subprocess.run([sys.executable, str(script)], cwd=HERE.parent).returncode != 0:
        failed.append(script.name)
sys.exit(f"failed: {', '.join(failed)}" if failed else 0)
