"""HTTP throughput of the agent API against the servers `manage.py up` runs (gunicorn for HTTP), with the
load generator on the same 2-core machine: `GET /api/v1/agents/me` and `POST /api/v1/tools/execute`
(datetime) at 64 concurrent keep-alive clients."""
from __future__ import annotations

import asyncio
import json
import os

from _common import fresh_platform, summary_ms, unlimited_agent_token, write_result
from loadgen import build_request, run_load


CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", "64"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "10"))


def main() -> None:
    env, up = fresh_platform("http")
    port = up.port
    try:
        startup_s = up.wait_healthy()
        token = unlimited_agent_token(env)
        auth = {"Authorization": f"Bearer {token}"}
        results = {"web_server": env.get("GOCLAW_WEB_SERVER") or "granian (default)",
                   "startup_to_healthy_s": round(startup_s, 2), "connections": CONNECTIONS, "seconds": SECONDS,
                   "web_workers": env.get("GOCLAW_WEB_WORKERS", "2"), "web_threads": env.get("GOCLAW_WEB_THREADS", "16")}
        def execute_request(client: int) -> bytes:  # one agent session per client, as real agents would
            body = json.dumps({"tool": "datetime", "arguments": {}, "context": {"session_key": f"bench-{client}"}}).encode()
            return build_request("POST", "/api/v1/tools/execute", "127.0.0.1", port, body, {**auth, "Content-Type": "application/json"})

        cases = {
            "agents_me": build_request("GET", "/api/v1/agents/me", "127.0.0.1", port, headers=auth),
            "tools_list": build_request("GET", "/api/v1/tools", "127.0.0.1", port, headers=auth),
            "tools_execute": [execute_request(i) for i in range(CONNECTIONS)],
        }
        for name, request in cases.items():
            asyncio.run(run_load("127.0.0.1", port, request, connections=8, seconds=2))  # warm up
            run = asyncio.run(run_load("127.0.0.1", port, request, connections=CONNECTIONS, seconds=SECONDS))
            results[name] = {"rps": round(run["rps"], 1), "requests": run["requests"], "statuses": run["statuses"],
                             "errors": run["error_count"], **summary_ms(run["latencies"])}
        results["targets"] = {"tools_execute_rps": 1200, "tools_list_rps": 2000, "p99_ms": 100}
        write_result(os.environ.get("BENCH_RESULT_NAME", "http"), results)
    finally:
        up.stop()


if __name__ == "__main__":
    main()
