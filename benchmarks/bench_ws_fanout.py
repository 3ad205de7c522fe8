"""WebSocket fan-out: N clients (default 1,000) connected to the one daphne of a `manage.py up`, all in one agent's
group; ~50 tool calls each publish a `tool.executed` event. Per event: the time from publish (the event's `ts`)
until the last client has it (p50/p99 over the events, target p99 ≤ 100 ms), and every client's own latency."""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import time
from datetime import datetime

import httpx
import websockets

from _common import percentile, write_result
from _soak_common import UNLIMITED, Platform, redis_flush

TARGET_P99_MS = 100.0


def raise_open_files(wanted: int) -> int:
    """Enough descriptors for the clients here and the sockets of daphne, which inherits the limit through `up`."""
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


async def run(platform: Platform, token: str, clients: int, events: int, gap: float) -> dict:
    arrivals: dict[str, list[float]] = {}
    pool = [Client(arrivals) for _ in range(clients)]
    started = time.monotonic()
    for i in range(0, clients, 50):  # connect in waves: a thousand handshakes at once only measure the backlog
        await asyncio.gather(*(c.connect(platform.ws_url, token) for c in pool[i:i + 50]))
    connect_s = time.monotonic() - started
    listeners = [asyncio.create_task(c.listen()) for c in pool]
    await asyncio.sleep(1.0)
    sent: list[str] = []
    async with httpx.AsyncClient(base_url=platform.base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        for _ in range(events):
            r = await http.post("/api/v1/tools/execute", json={"tool": "datetime", "arguments": {}, "context": {"session_key": "fanout"}})
            sent.append(r.json()["invocation_id"])
            await asyncio.sleep(gap)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(len(arrivals.get(i, [])) < clients for i in sent):
        await asyncio.sleep(0.1)
    for c in pool:
        await c.ws.close()
    await asyncio.gather(*listeners, return_exceptions=True)
    per_event_all = [max(arrivals[i]) * 1000 for i in sent if len(arrivals.get(i, [])) == clients]
    per_client = [v * 1000 for i in sent for v in arrivals.get(i, [])]
    missing = sum(clients - len(arrivals.get(i, [])) for i in sent)
    return {"clients": clients, "events": len(sent), "connect_all_s": round(connect_s, 2),
            "deliveries": len(per_client), "deliveries_missing": missing,
            "events_reaching_every_client": len(per_event_all),
            "closed_early": sum(1 for c in pool if c.closed_early and c.closed_early != "1000"),
            "to_all_clients_ms": {"p50": round(percentile(per_event_all, 50), 1) if per_event_all else None,
                                  "p99": round(percentile(per_event_all, 99), 1) if per_event_all else None,
                                  "max": round(max(per_event_all), 1) if per_event_all else None},
            "per_client_ms": {"p50": round(percentile(per_client, 50), 1) if per_client else None,
                              "p99": round(percentile(per_client, 99), 1) if per_client else None}}


def _cpu_seconds(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_layer(layer: str, args, redis_url: str) -> dict:
    extra = {"GOCLAW_WEB_WORKERS": "1", "GOCLAW_Q_WORKERS": "1"}
    if layer == "redis":
        redis_flush(redis_url)
        extra["REDIS_URL"] = redis_url
    platform = Platform(f"ws-fanout-{layer}", extra)
    try:
        startup = platform.start()
        token = platform.create_agents([("fan", "autonomous", UNLIMITED)])["fan"]
        daphne = platform.children().get("websocket")
        cpu_before = _cpu_seconds(daphne), resource.getrusage(resource.RUSAGE_SELF)
        result = asyncio.run(run(platform, token, args.clients, args.events, args.gap))
        cpu_after = _cpu_seconds(daphne), resource.getrusage(resource.RUSAGE_SELF)
        # Who was busy: daphne (the server) or this process (the clients); on 2 cores both compete.
        result["cpu_s"] = {"daphne": round(cpu_after[0] - cpu_before[0], 2),
                           "clients": round(cpu_after[1].ru_utime + cpu_after[1].ru_stime
                                            - cpu_before[1].ru_utime - cpu_before[1].ru_stime, 2)}
        p99 = result["to_all_clients_ms"]["p99"]
        return {"channel_layer": "redis pubsub (REDIS_URL)" if layer == "redis" else "postgres (default, no REDIS_URL)",
                "startup_to_healthy_s": round(startup, 2), **result,
                "daphne_rss_mb": round(int(next(line.split()[1] for line in open(f"/proc/{daphne}/status")
                                                if line.startswith("VmRSS:"))) / 1024, 1) if daphne else None,
                "met": {"to_all_clients_p99_ms": p99 is not None and p99 <= TARGET_P99_MS,
                        "deliveries_missing": result["deliveries_missing"] == 0}}
    finally:
        platform.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--gap", type=float, default=1.0, help="seconds between events (one event drains before the next)")
    parser.add_argument("--layers", default="redis,postgres", help="channel layers to run: redis (REDIS_URL), postgres (default)")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/9", help="flushed first")
    args = parser.parse_args()
    nofile = raise_open_files(max(4096, args.clients * 3 + 512))
    runs = {}
    for layer in [name.strip() for name in args.layers.split(",") if name.strip()]:
        runs[layer] = one_layer(layer, args, args.redis_url)
        print(f"[ws_fanout] {layer}: {json.dumps(runs[layer])}", flush=True)
    write_result("ws_fanout", {
        "setup": "one `manage.py up` per channel layer: one daphne; the clients and the calls run in this process on the same machine",
        "clients": args.clients, "events": args.events, "open_file_limit": nofile,
        "latency_measured_from": "the event's ts (set when the call publishes it, before its commit) to arrival at the client",
        "runs": runs, "targets": {"to_all_clients_p99_ms": TARGET_P99_MS, "deliveries_missing": 0},
        "met": {layer: run["met"] for layer, run in runs.items()},
    })


if __name__ == "__main__":
    main()
