"""WebSocket fan-out: N clients (default 1,000) connected to the WebSocket server of a `manage.py up` (GOCLAW_WS_SERVER), all in one agent's
group; ~50 tool calls each publish a `tool.executed` event. Per event: the time from publish (the event's `ts`)
until the last client has it (p50/p99 over the events, target p99 ≤ 100 ms), and every client's own latency."""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import resource
import time
from datetime import datetime

import httpx
import psutil
import websockets

from _common import percentile, write_result
from _soak_common import UNLIMITED, Platform, redis_flush

TARGET_P99_MS = 100.0


def raise_open_files(wanted: int) -> int:
    """Enough descriptors for the clients here and the sockets of the WebSocket server, which inherits the limit through `up`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, wanted))  # root may raise the hard limit too
        except (ValueError, OSError):
            wanted = hard
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, max(wanted, hard) if hard != resource.RLIM_INFINITY else hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class Client:
    def __init__(self, arrivals: dict[str, list[float]]):
        self.arrivals = arrivals
        self.ws = None
        self.closed_early = None

    async def connect(self, url: str, token: str):
        self.ws = await websockets.connect(url, additional_headers={"Authorization": f"Bearer {token}"},
                                           open_timeout=60, max_queue=None, ping_interval=None)
        welcome = json.loads(await self.ws.recv())
        assert welcome["type"] == "welcome", welcome

    async def listen(self):
        try:
            async for raw in self.ws:
                now = time.time()
                event = json.loads(raw)
                if event.get("type") == "tool.executed":
                    published = datetime.fromisoformat(event["ts"]).timestamp()
                    self.arrivals.setdefault(event["payload"]["invocation_id"], []).append(now - published)
        except websockets.ConnectionClosed as exc:
            self.closed_early = f"{exc.rcvd.code if exc.rcvd else None}"


async def _client_group(url: str, token: str, count: int, conn) -> None:
    """One client process: connect `count` sockets, say so, listen until told how many events were sent and each
    socket has them all (or 15 s more), then send back the arrivals and how many sockets closed early."""
    arrivals: dict[str, list[float]] = {}
    pool = [Client(arrivals) for _ in range(count)]
    for i in range(0, count, 50):  # connect in waves: a thousand handshakes at once only measure the backlog
        await asyncio.gather(*(c.connect(url, token) for c in pool[i:i + 50]))
    listeners = [asyncio.create_task(c.listen()) for c in pool]
    conn.send("connected")
    loop = asyncio.get_running_loop()
    sent = await loop.run_in_executor(None, conn.recv)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (len(arrivals) < sent or any(len(v) < count for v in arrivals.values())):
        await asyncio.sleep(0.05)
    for c in pool:
        await c.ws.close()
    await asyncio.gather(*listeners, return_exceptions=True)
    conn.send((arrivals, sum(1 for c in pool if c.closed_early and c.closed_early != "1000")))


def _client_process(url: str, token: str, count: int, conn) -> None:
    asyncio.run(_client_group(url, token, count, conn))


async def run(platform: Platform, token: str, clients: int, events: int, gap: float, procs: int) -> dict:
    """The clients are spread over `procs` processes: one Python process reading a thousand sockets would itself
    take ~0.1 ms a message, i.e. ~100 ms before its last socket's event is even looked at."""
    ctx = mp.get_context("spawn")
    shares = [clients // procs + (1 if i < clients % procs else 0) for i in range(procs)]
    pipes, children = [], []
    started = time.monotonic()
    for share in shares:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_client_process, args=(platform.ws_url, token, share, child), daemon=True)
        proc.start()
        pipes.append(parent)
        children.append(proc)
    loop = asyncio.get_running_loop()
    for pipe in pipes:
        assert await loop.run_in_executor(None, pipe.recv) == "connected"
    connect_s = time.monotonic() - started
    await asyncio.sleep(1.0)
    sent: list[str] = []
    async with httpx.AsyncClient(base_url=platform.base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        for _ in range(events):
            r = await http.post("/api/v1/tools/execute", json={"tool": "datetime", "arguments": {}, "context": {"session_key": "fanout"}})
            sent.append(r.json()["invocation_id"])
            await asyncio.sleep(gap)
    arrivals: dict[str, list[float]] = {}
    closed_early = 0
    for pipe in pipes:
        pipe.send(len(sent))
    for pipe, proc in zip(pipes, children):
        part, closed = await loop.run_in_executor(None, pipe.recv)
        closed_early += closed
        for invocation, latencies in part.items():
            arrivals.setdefault(invocation, []).extend(latencies)
        proc.join(10)
    per_event_all = [max(arrivals[i]) * 1000 for i in sent if len(arrivals.get(i, [])) == clients]
    per_client = [v * 1000 for i in sent for v in arrivals.get(i, [])]
    missing = sum(clients - len(arrivals.get(i, [])) for i in sent)
    return {"clients": clients, "client_processes": procs, "events": len(sent), "connect_all_s": round(connect_s, 2),
            "deliveries": len(per_client), "deliveries_missing": missing,
            "events_reaching_every_client": len(per_event_all), "closed_early": closed_early,
            "to_all_clients_ms": {"p50": round(percentile(per_event_all, 50), 1) if per_event_all else None,
                                  "p99": round(percentile(per_event_all, 99), 1) if per_event_all else None,
                                  "max": round(max(per_event_all), 1) if per_event_all else None},
            "per_client_ms": {"p50": round(percentile(per_client, 50), 1) if per_client else None,
                              "p99": round(percentile(per_client, 99), 1) if per_client else None},
            "to_all_clients_ms_per_event": [round(max(arrivals[i]) * 1000, 1) if arrivals.get(i) else None
                                            for i in sent]}


def _tree(pid: int) -> list[psutil.Process]:
    """The WebSocket server and its worker processes (uvicorn and granian fork workers)."""
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def _cpu_seconds(pid: int) -> float:
    return sum(sum(p.cpu_times()[:2]) for p in _tree(pid))


def _rss_mb(pid: int) -> float:
    return round(sum(p.memory_info().rss for p in _tree(pid)) / 2**20, 1)


def one_layer(layer: str, args, redis_url: str) -> dict:
    extra = {"GOCLAW_WEB_WORKERS": "1", "GOCLAW_Q_WORKERS": "1"}
    if layer == "redis":
        redis_flush(redis_url)
        extra["REDIS_URL"] = redis_url
    platform = Platform(f"ws-fanout-{layer}", extra)
    try:
        startup = platform.start()
        token = platform.create_agents([("fan", "autonomous", UNLIMITED)])["fan"]
        server = platform.children()["websocket"]
        def own_cpu() -> float:  # this process and its finished children (the client processes)
            return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                         resource.getrusage(resource.RUSAGE_CHILDREN)))

        cpu_before = _cpu_seconds(server), own_cpu()
        rss = _rss_mb(server)
        result = asyncio.run(run(platform, token, args.clients, args.events, args.gap, args.client_procs))
        cpu_after = _cpu_seconds(server), own_cpu()
        # Who was busy: the WebSocket server or the clients; on 2 cores they compete.
        result["cpu_s"] = {"ws_server": round(cpu_after[0] - cpu_before[0], 2),
                           "clients": round(cpu_after[1] - cpu_before[1], 2)}
        result["ws_server_rss_mb"] = {"before_clients": rss, "with_clients": _rss_mb(server)}
        p99 = result["to_all_clients_ms"]["p99"]
        return {"channel_layer": "redis pubsub (REDIS_URL)" if layer == "redis" else "postgres (default, no REDIS_URL)",
                "startup_to_healthy_s": round(startup, 2), **result,
                "ws_server": settings_ws_server(),
                "met": {"to_all_clients_p99_ms": p99 is not None and p99 <= TARGET_P99_MS,
                        "deliveries_missing": result["deliveries_missing"] == 0}}
    finally:
        platform.stop()


def settings_ws_server() -> str:
    return os.environ.get("GOCLAW_WS_SERVER", "granian") + f" x{os.environ.get('GOCLAW_WS_WORKERS', '1')}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--gap", type=float, default=1.0, help="seconds between events (one event drains before the next)")
    parser.add_argument("--layers", default="redis,postgres", help="channel layers to run: redis (REDIS_URL), postgres (default)")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/9", help="flushed first")
    parser.add_argument("--client-procs", type=int, default=4, help="processes the clients are spread over")
    parser.add_argument("--no-write", action="store_true", help="print the result without writing results/*.json")
    args = parser.parse_args()
    nofile = raise_open_files(max(4096, args.clients * 3 + 512))
    runs = {}
    for layer in [name.strip() for name in args.layers.split(",") if name.strip()]:
        runs[layer] = one_layer(layer, args, args.redis_url)
        print(f"[ws_fanout] {layer}: {json.dumps(runs[layer])}", flush=True)
    if args.no_write:
        return
    write_result("ws_fanout", {
        "setup": f"one `manage.py up` per channel layer, WebSocket server {settings_ws_server()}; the clients and the calls run in this process on the same machine",
        "clients": args.clients, "events": args.events, "open_file_limit": nofile,
        "latency_measured_from": "the event's ts (set when the call publishes it, before its commit) to arrival at the client",
        "runs": runs, "targets": {"to_all_clients_p99_ms": TARGET_P99_MS, "deliveries_missing": 0},
        "met": {layer: run["met"] for layer, run in runs.items()},
    })


if __name__ == "__main__":
    main()
