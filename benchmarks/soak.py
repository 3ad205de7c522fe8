"""Soak (and, with --faults, fault injection) against a whole platform (`manage.py up`) on loopback.

Mixed traffic at a fixed rate (default: half the tools/execute maximum measured in results/http.json): catalog
lists, file tools, `exec`, and approval round trips (requested by a cautious agent, decided by staff over the API,
executed, replayed), with WebSocket subscribers that stay connected. Reported: per-minute p50/p99, 5xx and errors,
RSS of every process at start and end, and, from the database afterwards, that every answered call has its audit
row, that no approved call ran twice, and which `tool.executed` events a connected subscriber did not get.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import threading
import time
import uuid

import httpx
import websockets

from _common import RESULTS, percentile, write_result
from _soak_common import UNLIMITED, Platform, child_pids, kill_tree, redis_flush, rss_report, staff_login, wait_for

MAX_INFLIGHT = 64
MIX = {"list": 0.35, "fs": 0.40, "exec": 0.15, "approval": 0.10}
SUBSCRIBERS = 8
EVENT_MARGIN_BEFORE = 1.0  # an invocation counts for a socket from 1 s after its welcome ...
EVENT_MARGIN_AFTER = 2.0   # ... until 2 s before it closed (the sender thread coalesces 50 ms; delivery is async)


def default_rate() -> tuple[float, str]:
    """Half the mix's measured maximum (a 1-minute run far above it: results/soak_max_probe.json, ops sent a second),
    else half the execute figure of results/http.json (an upper bound: the mix is slower than `datetime` calls)."""
    try:
        probe = json.loads((RESULTS / "soak_max_probe.json").read_text())
        return round(probe["ops_sent"] / (probe["minutes"] * 60) / 2, 1), "half the mix's maximum (results/soak_max_probe.json)"
    except (OSError, KeyError, ValueError, ZeroDivisionError):
        pass
    try:
        return round(json.loads((RESULTS / "http.json").read_text())["tools_execute"]["rps"] / 2, 1), \
            "half of results/http.json tools_execute rps"
    except (OSError, KeyError, ValueError):
        return 100.0, "default"


class Recorder:
    """Every request: when it started (s since run start), what, status (0 = no answer), latency, invocation id."""

    def __init__(self, started_wall: float):
        self.t0 = started_wall
        self.rows: list[tuple] = []
        self.errors: list[str] = []
        self.shed = 0

    def add(self, started: float, op: str, status: int, latency: float, invocation_id: str | None = None,
            error: str | None = None):
        self.rows.append((started - self.t0, op, status, latency, invocation_id, error))
        if error and len(self.errors) < 30:
            self.errors.append(f"{started - self.t0:.1f}s {op}: {error}")


class Subscriber:
    """A WebSocket client of one agent's group that records the `tool.executed` invocation ids it receives and the
    intervals it was connected; it reconnects when the server closes it (a new interval)."""

    def __init__(self, url: str, token: str, agent: str):
        self.url, self.token, self.agent = url, token, agent
        self.received: set[str] = set()
        self.intervals: list[list[float]] = []
        self.closes: list[str] = []
        self.stopping = False

    async def run(self):
        while not self.stopping:
            try:
                async with websockets.connect(self.url, additional_headers={"Authorization": f"Bearer {self.token}"},
                                              open_timeout=10, max_queue=None) as ws:
                    welcome = json.loads(await asyncio.wait_for(ws.recv(), 10))
                    assert welcome["type"] == "welcome", welcome
                    interval = [time.time(), None]
                    self.intervals.append(interval)
                    try:
                        while not self.stopping:
                            try:
                                raw = await asyncio.wait_for(ws.recv(), 0.5)
                            except asyncio.TimeoutError:
                                continue
                            event = json.loads(raw)
                            if event.get("type") == "tool.executed":
                                self.received.add(event["payload"]["invocation_id"])
                    finally:
                        interval[1] = time.time()
            except Exception as exc:  # closed by the server, refused while restarting: note it and reconnect
                self.closes.append(f"{time.time():.1f} {type(exc).__name__}: {str(exc)[:120]}")
                if self.intervals and self.intervals[-1][1] is None:
                    self.intervals[-1][1] = time.time()
                await asyncio.sleep(0.5)


class Traffic:
    def __init__(self, platform: Platform, tokens: dict[str, str], staff_cookies, csrf: str, rec: Recorder):
        self.p, self.rec = platform, rec
        limits = httpx.Limits(max_connections=MAX_INFLIGHT + 8, max_keepalive_connections=MAX_INFLIGHT)
        self.agent = httpx.AsyncClient(base_url=platform.base, limits=limits, timeout=60,
                                       headers={"Authorization": f"Bearer {tokens['soak']}"})
        self.cautious = httpx.AsyncClient(base_url=platform.base, limits=limits, timeout=60,
                                          headers={"Authorization": f"Bearer {tokens['soakc']}"})
        self.staff = httpx.AsyncClient(base_url=platform.base, limits=limits, timeout=60, cookies=staff_cookies,
                                       headers={"X-CSRFToken": csrf, "Referer": platform.base + "/admin/"})
        self.inflight = 0
        self.n = 0
        self.approvals: list[dict] = []

    async def close(self):
        for c in (self.agent, self.cautious, self.staff):
            await c.aclose()

    async def _call(self, client, op, method, path, body=None):
        started = time.time()
        try:
            r = await client.request(method, path, json=body)
        except httpx.HTTPError as exc:
            self.rec.add(started, op, 0, time.time() - started, error=f"{type(exc).__name__}: {exc}"[:200])
            return None
        data = None
        try:
            data = r.json()
        except ValueError:
            pass
        inv = data.get("invocation_id") if isinstance(data, dict) else None
        self.rec.add(started, op, r.status_code, time.time() - started, inv,
                     error=f"{r.status_code} {r.text[:150]}" if r.status_code >= 500 else None)
        return r.status_code, data

    async def one(self, kind: str):
        self.inflight += 1
        self.n += 1
        n = self.n
        session = {"session_key": f"soak-{n % 32}"}
        try:
            if kind == "list":
                await self._call(self.agent, "list", "GET", "/api/v1/tools")
            elif kind == "fs":
                step = n % 3
                tool, args = [("write_file", {"path": f"soak/f{n % 50}.txt", "content": f"line {n}\n" * 20}),
                              ("read_file", {"path": f"soak/f{(n - 1) % 50}.txt"}),
                              ("list_files", {"path": "soak"})][step]
                await self._call(self.agent, "fs", "POST", "/api/v1/tools/execute",
                                 {"tool": tool, "arguments": args, "context": session})
            elif kind == "exec":
                await self._call(self.agent, "exec", "POST", "/api/v1/tools/execute",
                                 {"tool": "exec", "arguments": {"command": f"echo soak-{n}"}, "context": session})
            else:
                await self.approval(session)
        finally:
            self.inflight -= 1

    async def approval(self, session):
        marker = uuid.uuid4().hex[:16]
        command = f"echo approved-{marker}"
        record = {"command": command, "approval_id": None, "executed": None, "replay": None}
        self.approvals.append(record)
        asked = await self._call(self.cautious, "approval.request", "POST", "/api/v1/tools/execute",
                                 {"tool": "exec", "arguments": {"command": command}, "context": session})
        if not asked or asked[0] != 202:
            return
        record["approval_id"] = approval_id = asked[1]["approval_id"]
        decided = await self._call(self.staff, "approval.decide", "POST", f"/api/v1/approvals/{approval_id}/decision",
                                   {"decision": "allow_once"})
        if not decided or decided[0] != 200:
            return
        ran = await self._call(self.cautious, "approval.execute", "POST", f"/api/v1/approvals/{approval_id}/execute", {})
        record["executed"] = ran[0] if ran else 0
        replay = await self._call(self.cautious, "approval.replay", "POST", f"/api/v1/approvals/{approval_id}/execute", {})
        record["replay"] = replay[0] if replay else 0


class Faults:
    """Each fault runs in a thread at its time; it records when it struck and how long until service was back."""

    def __init__(self, platform: Platform, t0: float, token: str):
        self.p, self.t0, self.token = platform, t0, token
        self.results: list[dict] = []
        self.windows: list[tuple[float, float]] = []  # wall-clock spans from the fault until service was back
        self.postgres_restarted_at: float | None = None

    def _serving(self) -> bool:
        """Healthy and a real tool call through the whole pipeline answers 200."""
        if not self.p.healthy():
            return False
        try:
            r = httpx.post(self.p.base + "/api/v1/tools/execute", timeout=5, headers={"Authorization": f"Bearer {self.token}"},
                           json={"tool": "datetime", "arguments": {}})
            return r.status_code == 200
        except httpx.HTTPError:
            return False

    def _heartbeat_after(self, since: float) -> bool:
        try:
            with self.p.db() as conn:
                row = conn.execute("select extract(epoch from beat_at) from goclaw_workerheartbeat where name='qcluster'").fetchone()
            return bool(row and float(row[0]) > since)
        except Exception:
            return False

    def run(self, name: str) -> None:
        children = self.p.children()
        struck = time.time()
        result = {"fault": name, "at_s": round(struck - self.t0, 1)}
        if name == "kill_web_worker":
            master = children["web"]
            workers = child_pids(master)
            victim = random.choice(workers)
            kill_tree_single(victim)
            result["killed_pid"] = victim
            back = wait_for(lambda: victim not in child_pids(master) and len(child_pids(master)) >= len(workers), 120)
            result["worker_respawned_s"] = round(time.time() - struck, 2) if back else None
        elif name == "kill_web_server":
            kill_tree(children["web"])
            result["killed_pid"] = children["web"]
            back = wait_for(lambda: self.p.children().get("web") not in (None, children["web"]), 120)
            result["restarted_by_up_s"] = round(time.time() - struck, 2) if back else None
        elif name == "kill_worker":
            kill_tree(children["worker"])
            result["killed_pid"] = children["worker"]
            back = wait_for(lambda: self.p.children().get("worker") not in (None, children["worker"]), 120)
            result["restarted_by_up_s"] = round(time.time() - struck, 2) if back else None
        elif name == "restart_postgres":
            old = self.p.postmaster_pid()
            self.p.restart_postgres()
            result["postgres_back_s"] = round(time.time() - struck, 2)
            result["postmaster_pid"] = [old, self.p.postmaster_pid()]
        ok = wait_for(self._serving, 120, interval=0.2)
        result["time_to_healthy_s"] = round(time.time() - struck, 2) if ok else None
        self.windows.append((struck, time.time()))
        if name == "restart_postgres":
            self.postgres_restarted_at = struck
        if name == "kill_worker":  # the cluster takes tasks again once it runs one: the next heartbeat (every 30 s)
            beat = wait_for(lambda: self._heartbeat_after(struck), 120, interval=1.0)
            result["first_task_after_s"] = round(time.time() - struck, 2) if beat else None
        result["up_alive"] = self.p.up.proc.poll() is None
        result["children_after"] = self.p.children()
        self.results.append(result)
        print(f"[fault] {json.dumps(result)}", flush=True)


def kill_tree_single(pid: int) -> None:
    import os
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def minute_stats(rows: list[tuple], minutes: int) -> list[dict]:
    out = []
    for m in range(minutes):
        sel = [r for r in rows if m * 60 <= r[0] < (m + 1) * 60]
        lat = [r[3] * 1000 for r in sel if 0 < r[2] < 500]
        out.append({"minute": m + 1, "requests": len(sel), "rps": round(len(sel) / 60, 1),
                    "p50_ms": round(percentile(lat, 50), 1) if lat else None,
                    "p99_ms": round(percentile(lat, 99), 1) if lat else None,
                    "5xx": sum(1 for r in sel if r[2] >= 500), "no_answer": sum(1 for r in sel if r[2] == 0)})
    return out


def in_windows(t: float, windows: list[tuple[float, float]], slack: float = 2.0, until: float | None = None) -> bool:
    """Whether [t, until] (a request's life, or one instant) overlaps a fault window widened by `slack`."""
    end = t if until is None else until
    return any(a - slack <= end and t <= b + slack for a, b in windows)


def reconcile(platform: Platform, rec: Recorder, traffic: Traffic, subs: list[Subscriber], windows,
              pg_restart: float | None) -> dict:
    answered = {r[4] for r in rec.rows if r[4]}
    with platform.db() as conn:
        found = {str(row[0]) for row in conn.execute(
            "select id from tools_app_toolinvocation where id = any(%s::uuid[])", (list(answered),))}
        commands = [a["command"] for a in traffic.approvals]
        runs = dict(conn.execute(
            "select arguments->>'command', count(*) from tools_app_toolinvocation where agent_key='soakc' and tool_name='exec'"
            " and status='ok' and arguments->>'command' = any(%s) group by 1", (commands,)).fetchall())
        invocations = conn.execute("select id::text, agent_key, extract(epoch from created_at)::float8 from tools_app_toolinvocation"
                                   " where agent_key in ('soak', 'soakc')").fetchall()
    twice = [c for c, n in runs.items() if n > 1]
    executed_ok = [a for a in traffic.approvals if a["executed"] == 200 or a["replay"] == 200]
    not_run = [a["command"] for a in executed_ok if runs.get(a["command"], 0) != 1]
    # A replay may run the call only when the first attempt got no answer or an error (it then never ran).
    both_200 = [a["command"] for a in traffic.approvals if a["executed"] == 200 and a["replay"] == 200]
    replays = [a["replay"] for a in traffic.approvals if a["replay"] is not None]
    events: dict = {"subscribers": len(subs), "expected": 0, "received": 0, "missing": 0, "missing_in_fault_windows": 0,
                    "missing_outside_faults": 0, "missing_after_postgres_restart": 0, "missing_by_10s": {}, "missing_examples": [], "reconnects": sum(max(len(s.intervals) - 1, 0) for s in subs),
                    "closes": [c for s in subs for c in s.closes][:10]}
    for sub in subs:
        for inv_id, agent, created in invocations:
            if agent != sub.agent:
                continue
            if not any(a + EVENT_MARGIN_BEFORE <= created <= (b or time.time()) - EVENT_MARGIN_AFTER for a, b in sub.intervals):
                continue
            events["expected"] += 1
            if inv_id in sub.received:
                events["received"] += 1
            else:
                events["missing"] += 1
                key = "missing_in_fault_windows" if in_windows(created, windows) else "missing_outside_faults"
                events[key] += 1
                if pg_restart is not None and created > pg_restart:
                    events["missing_after_postgres_restart"] += 1
                bucket = str(int((created - rec.t0) // 10) * 10)
                events["missing_by_10s"][bucket] = events["missing_by_10s"].get(bucket, 0) + 1
                if len(events["missing_examples"]) < 5:
                    events["missing_examples"].append({"invocation_id": inv_id, "at_s": round(created - rec.t0, 1),
                                                       "call_was_answered": inv_id in answered})
    return {"answered_with_invocation_id": len(answered), "audit_rows_found": len(found),
            "audit_rows_missing": sorted(answered - found)[:10], "audit_missing_count": len(answered - found),
            "approvals": {"requested": sum(1 for a in traffic.approvals if a["approval_id"]), "executed_200": len(executed_ok),
                          "ran_more_than_once": twice[:10], "ran_more_than_once_count": len(twice),
                          "executed_but_not_exactly_one_row": not_run[:10], "first_and_replay_both_200": both_200[:10],
                          "replay_ran_after_failed_first": sum(1 for a in traffic.approvals if a["replay"] == 200 and a["executed"] != 200),
                          "replays": len(replays), "replay_statuses": {str(s): replays.count(s) for s in set(replays)}},
            "events": events}


async def drive(platform: Platform, tokens, minutes: float, rate: float, faults_on: bool, mix: dict) -> dict:
    with httpx.Client(base_url=platform.base, timeout=30) as c:
        csrf = staff_login(c, platform.base)
        cookies = httpx.Cookies(c.cookies)
    subs = [Subscriber(platform.ws_url, tokens["soak" if i % 2 == 0 else "soakc"], "soak" if i % 2 == 0 else "soakc")
            for i in range(SUBSCRIBERS)]
    sub_tasks = [asyncio.create_task(s.run()) for s in subs]
    await asyncio.sleep(2)
    rss_start = platform.processes()
    t0 = time.time()
    rec = Recorder(t0)
    traffic = Traffic(platform, tokens, cookies, csrf, rec)
    faults = Faults(platform, t0, tokens["soak"])
    duration = minutes * 60
    plan = []
    if faults_on:
        names = ["kill_web_worker", "kill_web_server", "kill_worker", "restart_postgres"]
        plan = [(duration * (i + 1) / (len(names) + 1), name) for i, name in enumerate(names)]
    fault_threads = []
    kinds, weights = list(mix), list(mix.values())
    tasks: set[asyncio.Task] = set()
    interval = 1.0 / rate
    next_at = time.perf_counter()
    start_perf = next_at
    while True:
        now = time.perf_counter()
        elapsed = now - start_perf
        if elapsed >= duration:
            break
        while plan and elapsed >= plan[0][0]:
            name = plan.pop(0)[1]
            th = threading.Thread(target=faults.run, args=(name,), daemon=True)
            th.start()
            fault_threads.append(th)
        if now < next_at:
            await asyncio.sleep(next_at - now)
            continue
        next_at += interval
        if traffic.inflight >= MAX_INFLIGHT:  # bounded: the generator never piles up unbounded work
            rec.shed += 1
            continue
        task = asyncio.create_task(traffic.one(random.choices(kinds, weights)[0]))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(tasks, timeout=120)
    for th in fault_threads:
        await asyncio.to_thread(th.join, 300)
    await asyncio.sleep(3)  # the last events reach the sockets
    for s in subs:
        s.stopping = True
    await asyncio.wait(sub_tasks, timeout=10)
    rss_end = platform.processes()
    await traffic.close()
    return {"rec": rec, "traffic": traffic, "subs": subs, "faults": faults, "rss_start": rss_start, "rss_end": rss_end,
            "t0": t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=None, help="operations per second (default: half the measured maximum)")
    parser.add_argument("--faults", action="store_true", help="kill a web worker, the web server, the worker, restart PostgreSQL")
    parser.add_argument("--redis-url", default=None, help="run the platform with REDIS_URL (its db is flushed first)")
    parser.add_argument("--name", default="soak", help="results/<name>.json")
    args = parser.parse_args()
    rate, rate_source = (args.rate, "--rate") if args.rate else default_rate()
    extra = {"GOCLAW_WEB_WORKERS": "2"}
    if args.redis_url:
        redis_flush(args.redis_url)
        extra["REDIS_URL"] = args.redis_url
    platform = Platform("soak-faults" if args.faults else "soak", extra)
    result = None
    try:
        startup = platform.start()
        tokens = platform.create_agents([("soak", "autonomous", UNLIMITED), ("soakc", "cautious", UNLIMITED)])
        out = asyncio.run(drive(platform, tokens, args.minutes, rate, args.faults, MIX))
        rec, faults = out["rec"], out["faults"]
        minutes = max(1, math.ceil(args.minutes))
        per_minute = minute_stats(rec.rows, minutes)
        windows = faults.windows
        outside = [r for r in rec.rows if not in_windows(r[0] + rec.t0, windows, until=r[0] + rec.t0 + r[3])]
        by_op = {}
        for op in sorted({r[1] for r in rec.rows}):
            sel = [r for r in rec.rows if r[1] == op]
            lat = [r[3] * 1000 for r in sel if r[2]]
            statuses: dict[str, int] = {}
            for r in sel:
                statuses[str(r[2])] = statuses.get(str(r[2]), 0) + 1
            by_op[op] = {"n": len(sel), "statuses": statuses, "p50_ms": round(percentile(lat, 50), 1) if lat else None,
                         "p99_ms": round(percentile(lat, 99), 1) if lat else None}
        checks = reconcile(platform, rec, out["traffic"], out["subs"], windows, faults.postgres_restarted_at)
        first, last = per_minute[0]["p99_ms"], per_minute[-1]["p99_ms"]
        five_xx_out = sum(1 for r in outside if r[2] >= 500)
        errors_out = sum(1 for r in outside if r[2] == 0)
        result = {
            "mode": "faults" if args.faults else "soak", "minutes": args.minutes, "rate_ops_per_s": rate,
            "rate_source": rate_source,
            "mix": MIX, "max_inflight": MAX_INFLIGHT, "websocket_subscribers": SUBSCRIBERS,
            "channel_layer": "redis pubsub" if args.redis_url else "postgres (default, no REDIS_URL)",
            "startup_to_healthy_s": round(startup, 2),
            "requests": len(rec.rows), "achieved_rps": round(len(rec.rows) / (args.minutes * 60), 1), "shed_ops": rec.shed,
            "5xx_total": sum(1 for r in rec.rows if r[2] >= 500), "no_answer_total": sum(1 for r in rec.rows if r[2] == 0),
            "ops_sent": sum(1 for r in rec.rows if r[1] in ("list", "fs", "exec", "approval.request")),
            "5xx_outside_fault_windows": five_xx_out, "no_answer_outside_fault_windows": errors_out,
            "error_examples": rec.errors[:15],
            "no_answer_outside_fault_windows_examples": [
                {"at_s": round(r[0], 1), "op": r[1], "after_s": round(r[3], 2), "error": r[5]} for r in outside if r[2] == 0][:10], "by_operation": by_op, "per_minute": per_minute,
            "p99_first_minute_ms": first, "p99_last_minute_ms": last,
            "faults": faults.results, "checks": checks,
            "rss": rss_report(out["rss_start"], out["rss_end"]),
        }
        targets = {"5xx_outside_faults": 0, "errors_outside_faults": 0, "p99_last_vs_first_max_ratio": 1.5,
                   "audit_rows_missing": 0, "approved_calls_run_more_than_once": 0, "events_missing_outside_faults": 0,
                   "survivor_rss_growth_max": "20 % and 5 MB"}
        met = {"5xx_outside_faults": five_xx_out == 0, "errors_outside_faults": errors_out == 0,
               "p99_stable": bool(first and last and last <= 1.5 * first),
               "audit_complete": checks["audit_missing_count"] == 0,
               "approved_runs_once": (checks["approvals"]["ran_more_than_once_count"] == 0 and not checks["approvals"]["executed_but_not_exactly_one_row"]
                                      and not checks["approvals"]["first_and_replay_both_200"]),
               "no_event_lost_outside_faults": checks["events"]["missing_outside_faults"] == 0,
               "memory_flat": not result["rss"]["survivors_grown"],
               "generator_kept_the_rate": rec.shed == 0}
        if args.faults:
            met["up_restores_every_fault"] = all(f.get("time_to_healthy_s") is not None and f["up_alive"] for f in faults.results)
        result["targets"], result["met"] = targets, met
    finally:
        platform.stop()
    if result is not None:
        result["postgres_left_running_after_up_exit"] = platform.postgres_left_running
        write_result(args.name, result)


if __name__ == "__main__":
    main()
