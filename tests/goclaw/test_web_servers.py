"""`up` with either HTTP server (GOCLAW_WEB_SERVER): granian, the default (native-code HTTP handling), which every
other end-to-end test also runs, and gunicorn. Each answers agents and people, and a killed worker is replaced.
The WebSocket server (GOCLAW_WS_SERVER) is granian by default and daphne with gunicorn here: either delivers an
agent's events to its socket. The MCP server (GOCLAW_MCP_SERVER) is granian by default and uvicorn with gunicorn here:
either answers an agent's stateless tools/call."""
import json
import os
import signal
import time

import httpx
import psutil
import pytest
from websockets.sync.client import connect

from tests.servers import UpProcess, free_port, manage, up_env

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


def _cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:  # gone, or a killed worker not yet reaped (a zombie)
        return ""


def _web_workers(up: UpProcess, server: str) -> list[psutil.Process]:
    main = [p for p in psutil.Process(up.proc.pid).children()
            if f"bin/{server}" in _cmdline(p) and "goclaw.wsgi:application" in _cmdline(p)]
    assert len(main) == 1, f"up runs one {server} server"
    return [w for w in main[0].children() if "goclaw" in _cmdline(w) or server in _cmdline(w)]


def mcp_call(base: str, token: str) -> dict:
    """A stateless (2026-07-28) tools/call of `datetime` on `base`/mcp; the JSON-RPC answer."""
    from tests.mcp_app.test_mcp_server_stateless import modern_headers, request

    answer = httpx.post(f"{base}/mcp", json=request("tools/call", name="datetime", arguments={}),
                        headers=modern_headers(token, "tools/call", "datetime"), timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


@pytest.mark.parametrize("server, ws_server, mcp_server", [("granian", "granian", "granian"), ("gunicorn", "daphne", "uvicorn")])
def test_the_web_server_serves_the_api_and_the_admin_and_replaces_a_killed_worker(tmp_path, server, ws_server, mcp_server):
    mcp_port = free_port()
    env = up_env(tmp_path / "var", GOCLAW_WEB_SERVER=server, GOCLAW_WS_SERVER=ws_server, GOCLAW_WEB_WORKERS="2",
                 GOCLAW_MCP_SERVER=mcp_server, GOCLAW_MCP_PORT=str(mcp_port), GOCLAW_ADMIN_PASSWORD="granian-admin-pw-1")
    up = UpProcess(env, free_port(), free_port(), tmp_path / "up.log")
    try:
        up.wait_healthy()
        manage(env, "create_agent", "served")
        token = manage(env, "issue_token", "served").strip()
        agent = {"Authorization": f"Bearer {token}"}
        with connect(f"ws://127.0.0.1:{up.ws_port}/ws/events/", additional_headers=agent, open_timeout=30) as ws:
            assert json.loads(ws.recv(timeout=30))["groups"] == ["agent.served"]
            ran = httpx.post(up.base + "/api/v1/tools/execute", headers=agent, timeout=30,
                             json={"tool": "datetime", "arguments": {"timezone": "UTC"}}).json()
            assert ran["status"] == "ok" and ran["invocation_id"]
            event = json.loads(ws.recv(timeout=30))
            assert (event["type"], event["payload"]["invocation_id"]) == ("tool.executed", ran["invocation_id"])
        assert httpx.get(up.base + "/api/v1/agents/me", headers={"Authorization": "Bearer nope"}).status_code == 401
        for base in (f"http://127.0.0.1:{mcp_port}", up.base):  # the MCP port, and the main port's WSGI server itself
            called = mcp_call(base, token)["result"]
            assert called["isError"] is False and called["structuredContent"]["status"] == "ok"

        with httpx.Client(base_url=up.base, timeout=30) as person:  # a browser's session: cookies and CSRF
            page = person.get("/admin/login/")
            signed_in = person.post("/admin/login/?next=/admin/", data={
                "username": "admin", "password": "granian-admin-pw-1", "next": "/admin/",
                "csrfmiddlewaretoken": page.cookies["csrftoken"]})
            assert signed_in.status_code == 302 and signed_in.headers["location"] == "/admin/"
            assert person.get("/admin/").status_code == 200

        workers = _web_workers(up, server)
        assert len(workers) == 2
        os.kill(workers[0].pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            alive = [w for w in _web_workers(up, server) if w.pid != workers[0].pid]
            if len(alive) == 2:
                break
            time.sleep(0.5)
        assert len(alive) == 2, "the killed worker was not replaced"
        for _ in range(10):  # every answer comes from a live worker
            assert httpx.get(up.base + "/api/v1/agents/me", headers=agent, timeout=30).json()["key"] == "served"
        assert up.proc.poll() is None
    finally:
        assert up.stop() == 0


@pytest.mark.parametrize("module", ["goclaw.wsgi", "goclaw.asgi"])
def test_a_server_process_freezes_what_it_loaded_at_start_out_of_the_collectors_reach(module, tmp_path):
    # Full collections walked Django's hundreds of thousands of import-time objects: pauses of ~220 ms in which a
    # WebSocket server with 1,000 sockets delivered nothing (benchmarks/bench_ws_fanout.py).
    import subprocess
    import sys

    from tests.servers import ROOT

    probe = (f"import gc, {module}, sys; from goclaw.warm import GC_THRESHOLDS; "
             "from django.urls import get_resolver; "
             "from tools_app.security.scrub.scrubber import default_engine; "
             "print(gc.get_freeze_count(), gc.get_threshold() == GC_THRESHOLDS, "
             "'tools_app.api' in sys.modules or 'tools_app.views' in sys.modules, "
             # the apps' warmers ran: the scrubber's table is compiled, the shell check's parser imported
             "default_engine.cache_info().currsize == 1 and 'bashlex' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**up_env(tmp_path / "var"), "DJANGO_SETTINGS_MODULE": "goclaw.settings"})
    assert out.returncode == 0, out.stderr[-2000:]
    frozen, thresholds, views_loaded, warmed = out.stdout.split()
    assert int(frozen) > 100_000 and thresholds == "True" and views_loaded == "True" and warmed == "True"
