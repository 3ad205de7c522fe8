"""goclaw as an MCP server, against the processes `manage.py up` runs (uvicorn for /mcp): `tools/call` of a no-op tool
(`datetime`) at 32 concurrent clients, and in the same run the REST execute endpoint at 32 connections (the ratio).
MCP loads: the SDK's own client (32 `mcp.Client` sessions in one process) and raw HTTP JSON-RPC (32 keep-alive
connections), because on 2 cores the SDK client's own CPU cost is part of what the first one measures. Raw calls run
in both protocol eras: the session era (one initialized session per connection, 2025-06-18) and the stateless era
(2026-07-28: every request self-contained); the session era also through the main port's proxy. MCP and REST loads
alternate over BENCH_ROUNDS rounds (the machine is shared and noisy); each figure is the median round."""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time

import httpx

from _common import BENCH_DATA, ROOT, summary_ms, unlimited_agent_token, write_result
from loadgen import build_request

sys.path.insert(0, str(ROOT))
from tests.servers import UpProcess, free_port, up_env  # noqa: E402

SESSIONS = int(os.environ.get("BENCH_CONNECTIONS", "32"))
SECONDS = float(os.environ.get("BENCH_SECONDS", "10"))
CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "datetime", "arguments": {}}}
PROTOCOL = "2025-06-18"
MODERN = "2026-07-28"
MODERN_CALL = {**CALL, "params": {**CALL["params"], "_meta": {
    "io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "1"}}}}
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "3"))


async def sdk_load(url: str, token: str, seconds: float) -> dict:
    """32 SDK client sessions, each calling back to back."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    latencies: list[float] = []
    errors: list[str] = []
    ready, go = asyncio.Barrier(SESSIONS + 1), asyncio.Event()  # every session open before the clock starts
    start_at: list[float] = []

    async def session() -> None:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            await ready.wait()
            await go.wait()
            while time.perf_counter() < start_at[0] + seconds:
                began = time.perf_counter()
                result = await client.call_tool("datetime", {})
                latencies.append(time.perf_counter() - began)
                if result.is_error:
                    errors.append(result.content[0].text[:200])

    tasks = [asyncio.create_task(session()) for _ in range(SESSIONS)]
    await ready.wait()
    start_at.append(time.perf_counter())
    go.set()
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start_at[0]
    return {"rps": round(len(latencies) / elapsed, 1), "calls": len(latencies), "errors": len(errors),
            **summary_ms(latencies)}


def open_session(url: str, token: str) -> str:
    """initialize + notifications/initialized over plain HTTP; the session id."""
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}}
    opened = httpx.post(url, json=init, headers=headers, timeout=30)
    opened.raise_for_status()
    session_id = opened.headers["mcp-session-id"]
    httpx.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, timeout=30,
               headers={**headers, "Mcp-Session-Id": session_id, "Mcp-Protocol-Version": PROTOCOL}).raise_for_status()
    return session_id


async def _read_answer(reader) -> tuple[int, bytes]:
    """One HTTP/1.1 response: Content-Length or chunked (the SSE answer of a tools/call)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        body = bytearray()
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            body += await reader.readexactly(size + 2)
            if size == 0:
                return status, bytes(body)
    length = next((int(line[15:]) for line in lower.split(b"\r\n") if line.startswith(b"content-length:")), 0)
    return status, await reader.readexactly(length)


async def raw_load(port: int, requests: list[bytes], seconds: float, success: bytes = b'"isError":false') -> dict:
    """N keep-alive connections, each sending its own request back to back (loadgen's model, with chunked answers
    read); an answer is a success when it is a 200 holding `success`. REST's load runs through it too, so both
    sides of a ratio pay the same load generator."""
    latencies: list[float] = []
    failures: list[str] = []
    deadline = time.perf_counter() + seconds

    async def worker(request: bytes) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.perf_counter() < deadline:
                began = time.perf_counter()
                writer.write(request)
                status, body = await _read_answer(reader)
                latencies.append(time.perf_counter() - began)
                if status != 200 or success not in body:
                    failures.append(f"{status} {body[:200]!r}")
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*[worker(r) for r in requests])
    elapsed = time.perf_counter() - started
    return {"rps": round(len(latencies) / elapsed, 1), "calls": len(latencies), "errors": len(failures),
            "first_error": failures[0] if failures else None, **summary_ms(latencies)}


def raw(port: int, requests: list[bytes], **options):
    """A load: `raw_load` of these requests for the seconds it is given."""
    return lambda seconds: asyncio.run(raw_load(port, requests, seconds, **options))


def main() -> None:
    BENCH_DATA.mkdir(parents=True, exist_ok=True)
    data_dir = BENCH_DATA / "mcp-server-var"
    shutil.rmtree(data_dir, ignore_errors=True)
    port, ws_port, mcp_port = free_port(), free_port(), free_port()
    env = up_env(data_dir, one_process_each=False, GOCLAW_LOG_LEVEL="warning", GOCLAW_ADMIN_PASSWORD="bench-admin-pw-1", GOCLAW_MCP_PORT=str(mcp_port))
    up = UpProcess(env, port, ws_port, BENCH_DATA / "mcp-server-up.log")
    try:
        results = {"startup_to_healthy_s": round(up.wait_healthy(), 2), "sessions": SESSIONS, "seconds": SECONDS,
                   "mcp_workers": env.get("GOCLAW_MCP_WORKERS", "2"), "web_workers": env.get("GOCLAW_WEB_WORKERS", "2")}
        token = unlimited_agent_token(env)
        mcp_url = f"http://127.0.0.1:{mcp_port}/mcp"
        accept = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                  "Accept": "application/json, text/event-stream"}
        loads = {}
        for name, target_port in (("mcp_raw", mcp_port), ("mcp_raw_via_main_port", port)):
            requests = [build_request("POST", "/mcp", "127.0.0.1", target_port, json.dumps(CALL).encode(), {
                **accept, "Mcp-Protocol-Version": PROTOCOL, "Mcp-Session-Id": open_session(mcp_url, token)})
                for _ in range(SESSIONS)]
            loads[name] = raw(target_port, requests)
        for name, target_port in (("mcp_raw_stateless", mcp_port), ("mcp_raw_stateless_via_main_port", port)):
            stateless = [build_request("POST", "/mcp", "127.0.0.1", target_port, json.dumps(MODERN_CALL).encode(), {
                **accept, "Mcp-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "datetime"})] * SESSIONS
            loads[name] = raw(target_port, stateless)
        loads["mcp_sdk_client"] = lambda seconds: asyncio.run(sdk_load(mcp_url, token, seconds))
        rest = [build_request("POST", "/api/v1/tools/execute", "127.0.0.1", port, json.dumps(
            {"tool": "datetime", "arguments": {}, "context": {"session_key": f"bench-{i}"}}).encode(),
            {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}) for i in range(SESSIONS)]

        loads["rest_execute"] = raw(port, rest, success=b'"status":"ok"')
        chosen = os.environ.get("BENCH_LOADS")  # a comma-separated subset of the loads' names (all by default)
        loads = {name: load for name, load in loads.items() if not chosen or name in chosen.split(",")}
        for load in loads.values():
            load(2)  # warm up
        rounds: dict[str, list[dict]] = {name: [] for name in loads}
        for _ in range(ROUNDS):  # alternating: every load sees the same noise
            for name, load in loads.items():
                rounds[name].append(load(SECONDS))
        for name, measured in rounds.items():
            results[name] = sorted(measured, key=lambda r: r["rps"])[len(measured) // 2]
            results[name]["rps_rounds"] = [r["rps"] for r in measured]
        if "rest_execute" in rounds:
            for name in rounds:
                if name != "rest_execute":
                    results[f"ratio_{name}_to_rest"] = round(results[name]["rps"] / results["rest_execute"]["rps"], 3)
        results["contextforge_reference_rps"] = "250-400 MCP requests/s per pod (published)"
        write_result("mcp_server", results)
    finally:
        up.stop()


if __name__ == "__main__":
    main()
