"""In-process pipeline overhead for `datetime`, audit row and rate-limit take included (target p50 <= 0.7 ms).
The load average is recorded with the result: on this 2-core machine a concurrent test run doubles the p50."""
from __future__ import annotations

import os
import time

from _common import django_setup, summary_ms, write_result

WARMUP, N = 300, 3000


def main() -> None:
    django_setup()
    from tools_app import pipeline
    from tools_app.models import Agent, ToolInvocation
    from tools_app.services.agents import agent_create, agent_update

    unlimited = {"rate_limit_per_hour": 1_000_000_000, "rate_limit_user_per_hour": 1_000_000_000,
                 "rate_limit_agent_per_hour": 1_000_000_000}
    agent = Agent.objects.filter(key="bench-pipeline").first() or agent_create(key="bench-pipeline")
    agent = agent_update(agent=agent, other_config=unlimited)
    call = pipeline.ToolCall(agent=agent, tool="datetime", arguments={"timezone": "UTC"}, session_key="bench")
    for _ in range(WARMUP):
        pipeline.execute(call)
    load_before = os.getloadavg()[0]
    samples = []
    for _ in range(N):
        started = time.perf_counter()
        outcome = pipeline.execute(call)
        samples.append(time.perf_counter() - started)
        assert outcome.status == "ok"
    rows = ToolInvocation.objects.filter(agent_key=agent.key).count()
    assert rows >= N + WARMUP, rows
    # `datetime` is an inline tool: no worker-thread hop is measured here.
    write_result(os.environ.get("BENCH_RESULT_NAME", "pipeline"), {"tool": "datetime", "includes": ["resolve", "validate", "pre-hooks", "rate limit (one SQL statement, 3 buckets)",
                                                              "approval gate", "inline run", "scrub", "budget",
                                                              "audit INSERT with synchronous commit", "event"],
                              "target_p50_ms": 0.7, "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                              **summary_ms(samples)})


if __name__ == "__main__":
    main()
