"""In-process pipeline overhead for `datetime`, audit row and rate-limit upsert included (target p50 <= 1 ms)."""
from __future__ import annotations

import time

from _common import django_setup, summary_ms, write_result

WARMUP, N = 300, 3000


def main() -> None:
    django_setup()
    from tools_app import pipeline
    from tools_app.models import Agent, ToolInvocation

    agent, _ = Agent.objects.update_or_create(
        key="bench-pipeline", defaults={"other_config": {"rate_limit_per_hour": 1_000_000_000, "rate_limit_user_per_hour": 1_000_000_000, "rate_limit_agent_per_hour": 1_000_000_000}})
    call = pipeline.ToolCall(agent=agent, tool="datetime", arguments={"timezone": "UTC"}, session_key="bench")
    for _ in range(WARMUP):
        pipeline.execute(call)
    samples = []
    for _ in range(N):
        started = time.perf_counter()
        outcome = pipeline.execute(call)
        samples.append(time.perf_counter() - started)
        assert outcome.status == "ok"
    rows = ToolInvocation.objects.filter(agent_key=agent.key).count()
    assert rows >= N + WARMUP, rows
    write_result("pipeline", {"tool": "datetime", "includes": ["resolve", "validate", "pre-hooks", "rate limit (one SQL statement, 3 buckets)",
                                                              "approval gate", "worker thread", "scrub", "budget", "audit INSERT", "event"],
                              "target_p50_ms": 1.0, **summary_ms(samples)})


if __name__ == "__main__":
    main()
