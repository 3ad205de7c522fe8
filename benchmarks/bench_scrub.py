"""Throughput benchmark for tools_app.security.scrub.

Run from the repository root:

    python benchmarks/bench_scrub.py [--mb 10] [--runs 5]

Builds ~10 MB of mixed tool output (log lines, code, JSON, git output,
hashes, UUIDs, URLs and a sprinkling of embedded secrets), registers 1,000
dynamic values, measures scrubbing throughput and writes
benchmarks/results/scrub.json.
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import random
import statistics
import string
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tools_app.security.scrub import REDACTED, Scrubber  # noqa: E402

ALNUM = string.ascii_letters + string.digits


def _rand(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _hex(rng: random.Random, n: int) -> str:
    return _rand(rng, "0123456789abcdef", n)


WORDS = (
    "request handler started finished user cache miss hit worker queue task "
    "build test deploy module import function return value error warning info "
    "debug connection pool timeout retry upstream response status payload the "
    "a of to and in for with on at from by config settings service database "
    "migration applied model field index query token expired password reset "
    "secret rotation scheduled key session cookie auth header"
).split()


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def _log_line(rng):
    lvl = rng.choice(["INFO", "DEBUG", "WARNING", "ERROR"])
    return (
        f"2024-05-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:"
        f"{rng.randint(0, 59):02d}.{rng.randint(0, 999):03d}Z {lvl} [{rng.choice(['api', 'worker', 'db', 'celery'])}] "
        f"{_sentence(rng, rng.randint(4, 12))} request_id={uuid.UUID(int=rng.getrandbits(128))} "
        f"duration_ms={rng.randint(1, 5000)}"
    )


def _code_line(rng):
    name = rng.choice(["user", "item", "order", "token", "session", "config", "result"])
    return rng.choice([
        f"    def get_{name}(self, {name}_id: int) -> dict:",
        f"        {name} = self.repository.get({name}_id)",
        f"        if not {name}:\n            raise NotFound(\"{name} not found\")",
        f"        return {{\"id\": {name}.id, \"name\": {name}.name}}",
        f"import {rng.choice(['os', 'sys', 'json', 'logging', 're'])}",
        f"    password = os.environ[\"DB_PASSWORD\"]",
        f"    token = get_token()",
        f"const {name}List = await fetch(`/api/{name}s?page=${{page}}`);",
        f"    for i in range(len({name}s)):  # iterate {name}s",
    ])


def _json_line(rng):
    obj = {
        "id": str(uuid.UUID(int=rng.getrandbits(128))),
        "name": _sentence(rng, 2),
        "count": rng.randint(0, 10000),
        "enabled": rng.random() < 0.5,
        "sha": _hex(rng, 40),
        "url": f"https://api.example.com/v1/items/{rng.randint(1, 99999)}?page={rng.randint(1, 9)}&sort=asc",
        "tags": [rng.choice(WORDS) for _ in range(3)],
    }
    return json.dumps(obj)


def _git_line(rng):
    sha = _hex(rng, 40)
    return rng.choice([
        f"commit {sha}",
        f"Author: Dev {rng.randint(1, 99)} <dev{rng.randint(1, 99)}@example.com>",
        f"{sha[:7]} {_sentence(rng, 6)}",
        f"diff --git a/src/app/{rng.choice(WORDS)}.py b/src/app/{rng.choice(WORDS)}.py",
        f"index {sha[:7]}..{_hex(rng, 7)} 100644",
        f"@@ -{rng.randint(1, 500)},7 +{rng.randint(1, 500)},8 @@ def handler(request):",
        f"+    logger.info(\"{_sentence(rng, 5)}\")",
        f" {rng.randint(1, 30)} files changed, {rng.randint(1, 900)} insertions(+), {rng.randint(1, 900)} deletions(-)",
    ])


def _hash_line(rng):
    return rng.choice([
        f"{_hex(rng, 64)}  dist/package-{rng.randint(1, 9)}.{rng.randint(0, 9)}.tar.gz",
        f"Digest: sha256:{_hex(rng, 64)}",
        f"sha512-{base64.b64encode(rng.randbytes(64)).decode()}",
        f"{uuid.UUID(int=rng.getrandbits(128))} {rng.choice(WORDS)} ok",
        f"GET https://cdn.example.org/assets/{_hex(rng, 16)}.js?v={rng.randint(1, 999)} 200 {rng.randint(100, 99999)}",
    ])


def _secret_line(rng):
    return rng.choice([
        f"export OPENAI_API_KEY=sk-proj-{_rand(rng, ALNUM, 48)}",
        f"Authorization: Bearer {_rand(rng, ALNUM, 40)}",
        f"git clone https://x-access-token:ghs_{_rand(rng, ALNUM, 36)}@github.com/org/repo.git",
        f"aws_access_key_id = AKIA{_rand(rng, string.ascii_uppercase + '234567', 16)}",
        f"DATABASE_URL=postgres://app:{_rand(rng, ALNUM, 20)}@db.internal:5432/app",
        f"{{\"password\": \"{_rand(rng, ALNUM, 16)}\", \"user\": \"svc\"}}",
    ])


GENERATORS = [(_log_line, 40), (_code_line, 15), (_json_line, 15), (_git_line, 15), (_hash_line, 14), (_secret_line, 1)]


def build_corpus(mb: float, seed: int = 1234) -> str:
    rng = random.Random(seed)
    target = int(mb * 1024 * 1024)
    funcs = [f for f, w in GENERATORS for _ in range(w)]
    parts = []
    size = 0
    while size < target:
        line = rng.choice(funcs)(rng)
        parts.append(line)
        size += len(line) + 1
    return "\n".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=10.0)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dynamic", type=int, default=1000)
    ap.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "scrub.json"))
    args = ap.parse_args()

    rng = random.Random(99)
    text = build_corpus(args.mb)
    # realistic injected secrets: random tokens / passwords of mixed shapes
    shapes = [
        lambda: _rand(rng, ALNUM, rng.randint(16, 48)),
        lambda: _rand(rng, ALNUM + "!@#%^&*-_=+", rng.randint(10, 24)),
        lambda: _hex(rng, 32),
        lambda: str(uuid.UUID(int=rng.getrandbits(128))),
        lambda: rng.choice(["sk-", "xoxb-", "ghp_", "key-"]) + _rand(rng, ALNUM, 36),
    ]
    dyn = [rng.choice(shapes)() for _ in range(args.dynamic)]
    planted = [
        dyn[0],
        dyn[-1],
        base64.b64encode(dyn[500].encode()).decode(),
        "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",
        "sk-ant-api03-" + "Zx9" * 30,
    ]
    # plant secrets at a few positions
    lines = text.split("\n")
    for i, p in enumerate(planted):
        idx = (i + 1) * len(lines) // (len(planted) + 1)
        lines[idx] = lines[idx] + f" leaked={p} "
    text = "\n".join(lines)
    nbytes = len(text.encode("utf-8"))
    mb = nbytes / (1024 * 1024)

    scrubber = Scrubber()
    t0 = time.perf_counter()
    scrubber.add_values(dyn)
    build_s = time.perf_counter() - t0

    out, count = scrubber.scrub(text)  # warm-up + correctness
    missing = [p for p in planted if p in out]
    if missing:
        print("FAIL: planted secrets survived:", missing, file=sys.stderr)
        return 1
    assert REDACTED in out

    runs = []
    for _ in range(args.runs):
        t = time.perf_counter()
        scrubber.scrub(text)
        runs.append(mb / (time.perf_counter() - t))

    result = {
        "benchmark": "scrub",
        "mb": round(mb, 3),
        "dynamic_values": args.dynamic,
        "mb_per_s": round(max(runs), 2),
        "mean_mb_per_s": round(statistics.mean(runs), 2),
        "runs": [round(r, 2) for r in runs],
        "redactions": count,
        "automaton_build_s": round(build_s, 4),
        "python": platform.python_version(),
        "machine": f"{platform.machine()} {platform.processor() or platform.platform()} cpus={os.cpu_count()}",
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=2)
        fh.write("\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
