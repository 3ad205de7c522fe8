"""Where an MCP `tools/call` spends its CPU compared with REST's execute, in one process with one caller (no HTTP
server, no load generator): `datetime` through goclaw's MCP ASGI app (stateless 2026-07-28 request) and through
Django's WSGI handler (REST), each also with the pipeline stubbed out (what the layer alone costs), and the MCP app
with its authorization forced into a worker thread (the cost of the extra thread hop that authorizing from memory
saves), and the MCP app with its direct path off (mcp_app.server.direct: the SDK's own stateless entry serves the
call, what the direct path saves), and the same request to the main port's WSGI application (mcp_app.server.wsgi:
answered in the request's thread before Django's request handling, as REST's execute runs). Variants alternate over BENCH_ROUNDS rounds; each figure is the median round (CPU µs per call)."""
from __future__ import annotations

import asyncio
import io
import json
import os
import statistics
import time

from _common import django_setup, write_result
from bench_mcp_server import MODERN, MODERN_CALL  # the same stateless tools/call of `datetime`

N = int(os.environ.get("BENCH_CALLS", "600"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))


def main() -> None:
    django_setup()
    import mcp_app.server.asgi as mcp_asgi
    import mcp_app.server.direct as direct
    import mcp_app.server.handlers as handlers
    import tools_app.api.views as rest_views
    from goclaw.generations import MISSING
    from goclaw.wsgi import application as wsgi
    from tools_app.models import Agent
    from tools_app.services.agents import agent_create, agent_update, token_issue

    unlimited = {"rate_limit_per_hour": 10**9, "rate_limit_user_per_hour": 10**9, "rate_limit_agent_per_hour": 10**9}
    agent = Agent.objects.filter(key="bench-layers").first() or agent_create(key="bench-layers")
    agent = agent_update(agent=agent, other_config=unlimited)
    token = token_issue(agent=agent, name="bench-layers")[1]

    rest_body = json.dumps({"tool": "datetime", "arguments": {}}).encode()

    def rest_call() -> None:
        status = []
        environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/api/v1/tools/execute", "SERVER_NAME": "127.0.0.1",
                   "SERVER_PORT": "8000", "HTTP_HOST": "127.0.0.1", "wsgi.input": io.BytesIO(rest_body),
                   "CONTENT_LENGTH": str(len(rest_body)), "CONTENT_TYPE": "application/json", "wsgi.url_scheme": "http",
                   "HTTP_AUTHORIZATION": f"Bearer {token}", "QUERY_STRING": "", "REMOTE_ADDR": "127.0.0.1"}
        body = b"".join(wsgi(environ, lambda s, h, *a: status.append(s)))
        assert status[0].startswith("200") and b'"status":"ok"' in body.replace(b" ", b""), (status, body[:200])

    mcp_body = json.dumps(MODERN_CALL).encode()

    def main_port_call() -> None:
        """The same stateless tools/call to the main port's WSGI application (answered before Django's handling)."""
        status = []
        environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/mcp", "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000",
                   "HTTP_HOST": "127.0.0.1", "wsgi.input": io.BytesIO(mcp_body), "CONTENT_LENGTH": str(len(mcp_body)),
                   "CONTENT_TYPE": "application/json", "wsgi.url_scheme": "http", "QUERY_STRING": "",
                   "HTTP_AUTHORIZATION": f"Bearer {token}", "HTTP_ACCEPT": "application/json, text/event-stream",
                   "HTTP_MCP_PROTOCOL_VERSION": MODERN, "HTTP_MCP_METHOD": "tools/call", "HTTP_MCP_NAME": "datetime",
                   "REMOTE_ADDR": "127.0.0.1"}
        body = b"".join(wsgi(environ, lambda s, h, *a: status.append(s)))
        assert status[0].startswith("200") and b'"isError":false' in body, (status, body[:200])
    headers = [(b"host", b"127.0.0.1:8002"), (b"content-type", b"application/json"),
               (b"accept", b"application/json, text/event-stream"), (b"mcp-protocol-version", MODERN.encode()),
               (b"mcp-method", b"tools/call"), (b"mcp-name", b"datetime"), (b"authorization", f"Bearer {token}".encode()),
               (b"content-length", str(len(mcp_body)).encode())]
    scope = {"type": "http", "method": "POST", "path": "/mcp", "query_string": b"", "scheme": "http", "root_path": "",
             "server": ("127.0.0.1", 8002), "client": ("127.0.0.1", 5), "http_version": "1.1"}

    async def mcp_call() -> None:
        sent, out = False, []

        async def receive():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": mcp_body, "more_body": False}
            await asyncio.Event().wait()

        async def send(message):
            out.append(message)

        await mcp_asgi.application.http({**scope, "headers": list(headers)}, receive, send)
        assert out[0]["status"] == 200 and b'"isError":false' in out[-1]["body"], out[-1]["body"][:200]

    def rest_calls() -> None:
        for _ in range(N):
            rest_call()

    def main_port_calls() -> None:
        for _ in range(N):
            main_port_call()

    async def mcp_calls() -> None:
        for _ in range(N):
            await mcp_call()

    async def cpu_per_call(calls) -> float:
        """Process CPU (every thread) per call; REST's calls run in one thread, as a WSGI worker runs them."""
        started = time.process_time()
        await (calls() if asyncio.iscoroutinefunction(calls) else asyncio.to_thread(calls))
        return (time.process_time() - started) / N * 1e6

    async def run() -> dict:
        real_execute, real_rest_execute = handlers.tool_execute, rest_views.tool_execute
        in_memory = mcp_asgi.authorize_in_memory
        stub = await asyncio.to_thread(real_execute, handlers.ToolCall(agent=agent, tool="datetime", arguments={}))

        def stubbed(on: bool) -> None:
            handlers.tool_execute = (lambda call: stub) if on else real_execute
            rest_views.tool_execute = (lambda call, wait=None: stub) if on else real_rest_execute

        def two_hops(on: bool) -> None:
            mcp_asgi.authorize_in_memory = (lambda **kwargs: MISSING) if on else in_memory

        answered = direct.answered

        async def not_answered(*args, **kwargs) -> bool:
            return False

        def through_sdk(on: bool) -> None:
            direct.answered = not_answered if on else answered

        def configure(name: str) -> None:
            stubbed(name.endswith("layer_only"))
            two_hops(name == "mcp_two_hops")
            through_sdk(name.startswith("mcp_sdk_exchange"))

        variants = {
            "rest": lambda: cpu_per_call(rest_calls),
            "mcp": lambda: cpu_per_call(mcp_calls),
            "mcp_main_port": lambda: cpu_per_call(main_port_calls),
            "mcp_two_hops": lambda: cpu_per_call(mcp_calls),
            "mcp_sdk_exchange": lambda: cpu_per_call(mcp_calls),
            "rest_layer_only": lambda: cpu_per_call(rest_calls),
            "mcp_layer_only": lambda: cpu_per_call(mcp_calls),
            "mcp_main_port_layer_only": lambda: cpu_per_call(main_port_calls),
            "mcp_sdk_exchange_layer_only": lambda: cpu_per_call(mcp_calls),
        }
        rounds: dict[str, list[float]] = {name: [] for name in variants}
        async with mcp_asgi.application.manager.run():
            for name, measure in variants.items():  # warm-up
                configure(name)
                await measure()
            for _ in range(ROUNDS):
                for name, measure in variants.items():
                    configure(name)
                    rounds[name].append(await measure())
            configure("")
        return rounds

    load_before = os.getloadavg()[0]
    rounds = asyncio.run(run())
    medians = {name: round(statistics.median(values)) for name, values in rounds.items()}
    write_result("mcp_layers", {
        "calls_per_round": N, "rounds": ROUNDS, "unit": "CPU microseconds per call, one caller, in-process",
        **{f"{name}_us": value for name, value in medians.items()},
        "pipeline_us": medians["rest"] - medians["rest_layer_only"],
        "thread_hop_saved_us": medians["mcp_two_hops"] - medians["mcp"],
        "direct_path_saved_us": medians["mcp_sdk_exchange"] - medians["mcp"],
        "rounds_us": {name: [round(v) for v in values] for name, values in rounds.items()},
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    })


if __name__ == "__main__":
    main()
