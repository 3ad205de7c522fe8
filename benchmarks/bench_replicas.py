"""Two replicas: two `manage.py up` on different ports sharing one PostgreSQL (the first one's embedded server, the
second through DATABASE_URL) and one Redis (REDIS_URL). Checks, as pass/fail: rate limits count calls on both,
an approval requested on one is decided on the other and runs exactly once on either, policy and tool changes
made through one reach the other within a second, and events of calls on one reach sockets on the other."""
from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
import traceback
import uuid

import httpx
import websockets

from _common import write_result
from _soak_common import UNLIMITED, Platform, redis_flush, staff_login
from tests.servers import PROPAGATION_SECONDS, CatalogWatcher  # _soak_common put the project on sys.path

RATE_LIMIT = 10


class Replica:
    def __init__(self, platform: Platform, tokens: dict[str, str]):
        self.p = platform
        self.agent = httpx.Client(base_url=platform.base, timeout=30, headers={"Authorization": f"Bearer {tokens['rep']}"})
        self.cautious = httpx.Client(base_url=platform.base, timeout=30, headers={"Authorization": f"Bearer {tokens['repc']}"})
        self.limited = httpx.Client(base_url=platform.base, timeout=30, headers={"Authorization": f"Bearer {tokens['repl']}"})
        self.staff = httpx.Client(base_url=platform.base, timeout=30)
        csrf = staff_login(self.staff, platform.base)  # each replica's own login: the session lives in the shared DB
        self.staff.headers.update({"X-CSRFToken": csrf, "Referer": platform.base + "/admin/"})

    def execute(self, client, tool, arguments, session="rep"):
        return client.post("/api/v1/tools/execute", json={"tool": tool, "arguments": arguments, "context": {"session_key": session}})


def check_rate_limit(a: Replica, b: Replica) -> dict:
    """One session's bucket (RATE_LIMIT calls per hour) is shared: calls alternate between the replicas."""
    statuses = []
    for i in range(RATE_LIMIT + 6):
        r = a.execute((a if i % 2 == 0 else b).limited, "datetime", {}, session="limited")
        statuses.append(r.json()["status"])
    ok = statuses.count("ok")
    return {"passed": ok == RATE_LIMIT and statuses[RATE_LIMIT:] == ["rate_limited"] * 6,
            "limit": RATE_LIMIT, "calls": len(statuses), "ok": ok, "rate_limited": statuses.count("rate_limited")}


def approval_round(requested_on: Replica, decided_on: Replica, executed_on: Replica, replayed_on: Replica) -> dict:
    command = f"echo replica-{uuid.uuid4().hex[:12]}"
    asked = requested_on.execute(requested_on.cautious, "exec", {"command": command})
    approval_id = asked.json().get("approval_id")
    decided = decided_on.staff.post(f"/api/v1/approvals/{approval_id}/decision", json={"decision": "allow_once"})
    ran = executed_on.cautious.post(f"/api/v1/approvals/{approval_id}/execute", json={})
    replay = replayed_on.cautious.post(f"/api/v1/approvals/{approval_id}/execute", json={})
    body = ran.json() if ran.status_code == 200 else {}
    return {"passed": asked.status_code == 202 and decided.status_code == 200 and ran.status_code == 200
            and body.get("status") == "ok" and command.split()[1] in body.get("for_llm", "") and replay.status_code == 409,
            "statuses": [asked.status_code, decided.status_code, ran.status_code, replay.status_code]}


def approval_race(a: Replica, b: Replica) -> dict:
    """Executed at the same moment on both replicas: exactly one runs it."""
    command = f"echo race-{uuid.uuid4().hex[:12]}"
    approval_id = a.execute(a.cautious, "exec", {"command": command}).json().get("approval_id")
    b.staff.post(f"/api/v1/approvals/{approval_id}/decision", json={"decision": "allow_once"})
    results: dict[str, int] = {}
    barrier = threading.Barrier(2)

    def go(name, replica):
        barrier.wait()
        results[name] = replica.cautious.post(f"/api/v1/approvals/{approval_id}/execute", json={}).status_code

    threads = [threading.Thread(target=go, args=(n, r)) for n, r in (("a", a), ("b", b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"passed": sorted(results.values()) == [200, 409], "statuses": results}


def check_policy(a: Replica, b: Replica) -> dict:
    """A deny for `list_files` saved through replica A's process is enforced by B within the propagation bound,
    and its removal too."""
    def b_status():
        return a.execute(b.agent, "list_files", {"path": "."}).json()["status"]

    before = b_status()
    a.p.manage("shell", "-c", "from tools_app.models import ToolPermission, Agent; from tools_app.services.policy import "
               "tool_permission_save; tool_permission_save(actor=None, permission=ToolPermission(scope='agent', "
               "agent=Agent.objects.get(key='rep'), tool='list_files', permission='deny'))")
    denied_after = _until(lambda: b_status() == "denied", 10)
    a.p.manage("shell", "-c", "from tools_app.models import ToolPermission; from tools_app.services.policy import "
               "tool_permission_delete; tool_permission_delete(actor=None, queryset=ToolPermission.objects.filter(tool='list_files'))")
    allowed_after = _until(lambda: b_status() == "ok", 10)
    return {"passed": before == "ok" and denied_after is not None and allowed_after is not None
            and denied_after <= PROPAGATION_SECONDS + 0.5 and allowed_after <= PROPAGATION_SECONDS + 0.5,
            "before": before, "deny_seen_on_b_after_s": denied_after, "removal_seen_on_b_after_s": allowed_after,
            "note": "measured from the end of the `manage.py shell` that committed the change"}


def check_custom_tool(a: Replica, b: Replica, token: str) -> dict:
    """A custom tool created through A's API is listed by B; deleted through B's API, A stops listing it (≤ 1 s)."""
    name = f"rep_tool_{uuid.uuid4().hex[:6]}"
    created = a.staff.post("/api/v1/custom-tools/", json={"name": name, "description": "replica check",
                           "parameters": {"type": "object", "properties": {}}, "command": "echo hi"})
    result = {"create_status": created.status_code}
    try:
        CatalogWatcher(b.p.base + "/api/v1", token).wait_listed(name, True)
        result["listed_on_b"] = True
        deleted = b.staff.delete(f"/api/v1/custom-tools/{created.json()['id']}")
        result["delete_status"] = deleted.status_code
        CatalogWatcher(a.p.base + "/api/v1", token).wait_listed(name, False)
        result["gone_on_a"] = True
        result["passed"] = created.status_code == 201 and deleted.status_code == 204
    except AssertionError as exc:
        result.update(passed=False, error=str(exc))
    return result


async def _events(a: Replica, b: Replica, tokens) -> dict:
    """A socket on each replica's daphne; calls on the other replica reach it (tool.executed, approval.requested)."""
    out = {}
    for name, sock_on, call_on in (("a_to_b", b, a), ("b_to_a", a, b)):
        async with websockets.connect(sock_on.p.ws_url, additional_headers={"Authorization": f"Bearer {tokens['rep']}"}) as ws:
            assert json.loads(await ws.recv())["type"] == "welcome"
            started = time.time()
            ran = await asyncio.to_thread(call_on.execute, call_on.agent, "datetime", {})
            want = ran.json()["invocation_id"]
            got = None
            try:
                while got is None:
                    event = json.loads(await asyncio.wait_for(ws.recv(), 10))
                    if event.get("type") == "tool.executed" and event["payload"]["invocation_id"] == want:
                        got = round(time.time() - started, 3)
            except asyncio.TimeoutError:
                pass
            out[name] = {"passed": got is not None, "received_after_s": got}
    return {"passed": all(v["passed"] for v in out.values()), **out}


def _until(condition, timeout: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if condition():
            return round(time.monotonic() - started, 3)
        time.sleep(0.05)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/9", help="flushed first")
    args = parser.parse_args()
    redis_flush(args.redis_url)
    first = Platform("replica-a", {"REDIS_URL": args.redis_url, "GOCLAW_WEB_WORKERS": "1", "GOCLAW_Q_WORKERS": "1"})
    second = None
    checks: dict = {}
    try:
        startup_a = first.start()
        var = first.home / "var"
        second = Platform("replica-b", {"REDIS_URL": args.redis_url, "GOCLAW_WEB_WORKERS": "1", "GOCLAW_Q_WORKERS": "1",
                                        "DATABASE_URL": first.database_url(),
                                        "SECRET_KEY": (var / "secret-key.txt").read_text().strip(),
                                        "GOCLAW_ENCRYPTION_KEY": (var / "encryption-key.txt").read_text().strip()})
        startup_b = second.start()
        tokens = first.create_agents([("rep", "autonomous", UNLIMITED), ("repc", "cautious", UNLIMITED),
                                      ("repl", "autonomous", {**UNLIMITED, "rate_limit_per_hour": RATE_LIMIT})])
        a, b = Replica(first, tokens), Replica(second, tokens)
        steps = {
            "rate_limit_shared": lambda: check_rate_limit(a, b),
            "approval_requested_a_decided_b_executed_a": lambda: approval_round(a, b, a, b),
            "approval_requested_b_decided_a_executed_b": lambda: approval_round(b, a, b, a),
            "approval_executed_on_both_at_once_runs_once": lambda: approval_race(a, b),
            "policy_change_reaches_other_replica": lambda: check_policy(a, b),
            "tool_change_reaches_other_replica": lambda: check_custom_tool(a, b, tokens["rep"]),
            "events_cross_replicas": lambda: asyncio.run(_events(a, b, tokens)),
        }
        for name, step in steps.items():
            try:
                checks[name] = step()
            except Exception as exc:  # a broken check is a failed check, with its reason
                checks[name] = {"passed": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-800:]}
            print(f"[replicas] {name}: {'PASS' if checks[name]['passed'] else 'FAIL'} {json.dumps(checks[name])[:300]}", flush=True)
        write_result("replicas", {
            "setup": "two `manage.py up` (1 web worker each) sharing replica A's embedded PostgreSQL and one Redis db",
            "startup_to_healthy_s": {"a": round(startup_a, 2), "b": round(startup_b, 2)},
            "checks": checks, "passed": sum(1 for c in checks.values() if c["passed"]), "failed": sum(1 for c in checks.values() if not c["passed"]),
            "targets": {"every_check_passes": True, "propagation_s": PROPAGATION_SECONDS},
            "met": {"every_check_passes": all(c["passed"] for c in checks.values())},
        })
    finally:
        if second is not None:
            second.stop()
        first.stop()


if __name__ == "__main__":
    main()
