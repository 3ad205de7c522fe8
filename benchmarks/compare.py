"""Before/after in one run: `python benchmarks/compare.py REV bench_http.py [--rounds 2]` checks REV out into a
temporary git worktree (sharing this venv), then runs the benchmark script alternately there and here, `--rounds`
times each, so both sides meet the same machine state. Writes results/<name>_before_after.json: every run's
figures and, per measured figure, after/before of the medians."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import BENCH_DATA, ROOT, write_result

FIGURES = ("rps", "p50_ms", "p99_ms")


def run(tree: Path, script: str, result_name: str, data_dir: Path) -> dict:
    """Run `script` in `tree` on the benchmark data dir `data_dir` (each side its own: their schemas may differ); its
    result JSON (under that tree's results dir: BENCH_RESULT_NAME, or the script's own name for an older script that
    does not read it)."""
    results = tree / "benchmarks" / "results"
    (results / f"{result_name}.json").unlink(missing_ok=True)
    subprocess.run([sys.executable, str(tree / "benchmarks" / script)], cwd=tree, check=True,
                   env={**os.environ, "BENCH_RESULT_NAME": result_name, "GOCLAW_BENCH_DATA": str(data_dir)})
    named = results / f"{result_name}.json"
    return json.loads((named if named.exists() else results / f"{Path(script).stem.removeprefix('bench_')}.json").read_text())


def measured(result: dict) -> dict[str, dict[str, float]]:
    """The figures of every case of a result ({case: {figure: value}}), the top level as case ''."""
    cases = {key: value for key, value in result.items()
             if key != "targets" and isinstance(value, dict) and any(f in value for f in FIGURES)}
    if any(f in result for f in FIGURES):
        cases[""] = result
    return {case: {f: values[f] for f in FIGURES if f in values} for case, values in cases.items()}


def after_over_before(runs: dict[str, list[dict]]) -> dict[str, dict]:
    """Per figure of the after side: the medians of both sides and their ratio (before None: a case the before tree
    does not measure)."""
    ratios = {}
    for case in runs["after"][0]:
        for figure in runs["after"][0][case]:
            befores = [r[case][figure] for r in runs["before"] if figure in r.get(case, {})]
            before = statistics.median(befores) if befores else None
            after = statistics.median(r[case][figure] for r in runs["after"])
            ratios[f"{case}.{figure}".lstrip(".")] = {"before": before, "after": after,
                                                      "after_over_before": round(after / before, 3) if before else None}
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("rev", help="the git revision to compare against (before)")
    parser.add_argument("script", help="a benchmark script in benchmarks/, e.g. bench_http.py")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    name = Path(args.script).stem.removeprefix("bench_")
    before_tree = Path(tempfile.mkdtemp(prefix="goclaw-before-"))
    subprocess.run(["git", "worktree", "add", "--force", "--detach", str(before_tree), args.rev], cwd=ROOT, check=True)
    (before_tree / ".venv").symlink_to(ROOT / ".venv")
    if not (before_tree / "benchmarks" / args.script).exists():  # a benchmark new in this change measures both sides
        shutil.copy2(ROOT / "benchmarks" / args.script, before_tree / "benchmarks" / args.script)
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    try:
        for round_no in range(args.rounds):
            for side, tree in (("before", before_tree), ("after", ROOT)):
                print(f"== round {round_no + 1}: {side}", flush=True)
                data_dir = BENCH_DATA if side == "after" else BENCH_DATA.with_name(BENCH_DATA.name + "-before")
                runs[side].append(measured(run(tree, args.script, f"{name}_{side}_run", data_dir)))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(before_tree)], cwd=ROOT)
        shutil.rmtree(before_tree, ignore_errors=True)
        (ROOT / "benchmarks" / "results" / f"{name}_after_run.json").unlink(missing_ok=True)
    ratios = after_over_before(runs)
    write_result(f"{name}_before_after", {"before_rev": args.rev, "rounds": args.rounds, "runs": runs,
                                          "median_after_over_before": ratios})


if __name__ == "__main__":
    main()
