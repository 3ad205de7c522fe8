"""`make run` end to end: `manage.py up` on free ports with a fresh data dir, real gunicorn, daphne,
django-q2 cluster and embedded PostgreSQL; events cross processes to a WebSocket client."""
import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest
import websockets

from tests.servers import UpProcess as Up
from tests.servers import free_port as _free_port
from tests.servers import manage as _manage
from tests.servers import up_env

pytestmark = pytest.mark.slow


def _env(data_dir: Path, *, fresh: bool = False, **extra: str) -> dict:
    return up_env(data_dir, fresh=fresh, GOCLAW_ADMIN_USER="boss", **extra)


async def _receive_until(ws, wanted_type: str, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        message = json.loads(await asyncio.wait_for(ws.recv(), max(0.1, deadline - time.monotonic())))
        if message["type"] == wanted_type:
            return message


def _events_cross_processes(env: dict, up: Up) -> None:
    """An agent's WebSocket client receives events published by a separate shell process and by a tool call
    that the django-q2 worker runs."""
    _manage(env, "create_agent", "smoke")
    token = _manage(env, "issue_token", "smoke").strip()
    me = httpx.get(up.base + "/api/v1/agents/me", headers={"Authorization": f"Bearer {token}"})
    assert me.json()["key"] == "smoke"

    async def scenario():
        async with websockets.connect(f"ws://127.0.0.1:{up.ws_port}/ws/events/",
                                      additional_headers={"Authorization": f"Bearer {token}"}) as ws:
            await _receive_until(ws, "welcome")
            _manage(env, "shell", "-c", "from goclaw import events; events.publish('smoke.ping', {'from': 'shell'}, ['agent.smoke'])")
            ping = await _receive_until(ws, "smoke.ping")
            assert ping["payload"] == {"from": "shell"}
            _manage(env, "shell", "-c", "from django_q.tasks import async_task; async_task('tools_app.tasks.execute_tool', 'smoke', 'datetime', {})")
            executed = await _receive_until(ws, "tool.executed", timeout=30)
            assert executed["payload"]["tool"] == "datetime" and executed["payload"]["status"] == "ok"

    asyncio.run(scenario())


def _database_is_locked_down(env: dict, up: Up, data_dir: Path) -> None:
    """`up`'s children and `manage.py` connect as the non-superuser app role; the socket wants a password."""
    import psutil
    import psycopg

    from goclaw.embedded_db import APP_ROLE, SUPERUSER
    from goclaw.embedded_db import db_settings_from_uri as settings_from

    urls = set()
    for child in psutil.Process(up.proc.pid).children(recursive=True):
        try:
            urls.add(child.environ()["DATABASE_URL"])
        except (psutil.Error, KeyError):  # a short-lived worker process may be gone already
            pass
    assert len(urls) == 1  # gunicorn, daphne and the worker all got the same one
    child_db = settings_from(urls.pop())
    assert child_db["USER"] == APP_ROLE and child_db["PASSWORD"] == (data_dir / "postgres-app-password.txt").read_text().strip()
    who = _manage(env, "shell", "-c", "from django.db import connection; c = connection.cursor(); "
                  "c.execute('select current_user, rolsuper from pg_roles where rolname = current_user'); print(c.fetchone())")
    assert who.strip().splitlines()[-1] == f"('{APP_ROLE}', False)"

    socket_dir = str(data_dir / "postgres")
    for user, password in ((SUPERUSER, None), (APP_ROLE, None), (SUPERUSER, "wrong"), (APP_ROLE, "wrong")):
        with pytest.raises(psycopg.OperationalError, match="no password supplied|password authentication failed"):
            psycopg.connect(host=socket_dir, user=user, dbname="goclaw", password=password, passfile="/nonexistent/pgpass", connect_timeout=5)
    for name in ("postgres-superuser-password.txt", "postgres-app-password.txt", "secret-key.txt", "encryption-key.txt"):
        assert oct((data_dir / name).stat().st_mode & 0o777) == "0o600", name
    assert (data_dir.stat().st_mode & 0o077) in (0, 0o010)


def test_up_serves_everything_and_events_cross_processes(tmp_path):
    data_dir = tmp_path / "var"
    env = _env(data_dir, fresh=True)  # `make run` from nothing: initdb, bootstrap, every migration
    port, ws_port = _free_port(), _free_port()
    up = Up(env, port, ws_port, tmp_path / "up.log")
    try:
        up.wait_healthy()
        admin_page = httpx.get(up.base + "/admin/login/")
        assert admin_page.status_code == 200
        assert httpx.get(up.base + "/api/docs/").status_code == 200
        password_file = data_dir / "admin-password.txt"
        assert oct(password_file.stat().st_mode & 0o777) == "0o600"
        user, password = password_file.read_text().split()
        assert user == "boss"
        with httpx.Client(base_url=up.base) as browser:
            browser.get("/admin/login/")
            csrf = browser.cookies["csrftoken"]
            login = browser.post("/admin/login/?next=/admin/", data={"username": user, "password": password,
                                 "csrfmiddlewaretoken": csrf}, headers={"Referer": up.base + "/admin/login/"})
            assert login.status_code == 302 and login.headers["location"] == "/admin/"

        _events_cross_processes(env, up)
        _database_is_locked_down(env, up, data_dir)
    finally:
        assert up.stop() == 0
    assert "goclaw stopped." in (tmp_path / "up.log").read_text()

    # A second start reuses the data: same admin, no new password printed.
    up2 = Up(env, _free_port(), _free_port(), tmp_path / "up2.log")
    try:
        up2.wait_healthy()
        count = _manage(env, "shell", "-c", "from django.contrib.auth.models import User; print(User.objects.filter(is_superuser=True).values_list('username', flat=True)[::1])")
        assert count.strip().splitlines()[-1] == "['boss']"
    finally:
        assert up2.stop() == 0
    assert "Created admin user" not in (tmp_path / "up2.log").read_text()


def test_with_external_database_and_redis_urls_events_and_tasks_go_through_redis(tmp_path, redis_url, embedded_pg):
    """DATABASE_URL pointing at another PostgreSQL (here: the test suite's own server, which has pgvector) and
    REDIS_URL: no embedded server starts, and events and the worker's tasks go through Redis (one `up` for both)."""
    import psycopg
    import redis

    with psycopg.connect(embedded_pg.uri("postgres", superuser=True), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS goclaw_external")
        conn.execute("CREATE DATABASE goclaw_external")
    env = _env(tmp_path / "var", DATABASE_URL=embedded_pg.uri("goclaw_external", superuser=True), REDIS_URL=redis_url)
    up = Up(env, _free_port(), _free_port(), tmp_path / "up.log")
    try:
        up.wait_healthy()
        assert set(httpx.get(up.base + "/healthz").json()) == {"status", "ok"}  # anonymous: the status only
        _manage(env, "create_agent", "monitor")
        monitor = _manage(env, "issue_token", "monitor").strip()
        health = httpx.get(up.base + "/healthz", headers={"Authorization": f"Bearer {monitor}"}).json()
        assert health["checks"]["channel_layer"]["backend"] == "RedisPubSubChannelLayer"
        _events_cross_processes(env, up)
        assert any(key.startswith(b"django_q") for key in redis.Redis.from_url(redis_url).keys("*"))
        database = _manage(env, "shell", "-c", "from django.db import connection; print(connection.settings_dict['NAME'])")
        assert database.strip().splitlines()[-1] == "goclaw_external"
    finally:
        assert up.stop() == 0
    assert "DATABASE_URL connects as a PostgreSQL superuser" in (tmp_path / "up.log").read_text()
    assert not (tmp_path / "var" / "postgres").exists()


def test_up_refuses_a_database_without_pgvector_with_a_clear_message(tmp_path):
    """The machine's PostgreSQL 15 has no pgvector: `up` must say so instead of failing inside a migration."""
    import subprocess
    import sys

    from tests.servers import ROOT

    env = {**_env(tmp_path / "var"), "DATABASE_URL": "postgresql://postgres@127.0.0.1:5432/test"}
    ports = ("--port", str(_free_port()), "--ws-port", str(_free_port()), "--mcp-port", str(_free_port()))  # not P+1, P+2
    result = subprocess.run([sys.executable, "manage.py", "up", *ports], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "no `vector` extension available" in result.stderr and "Traceback" not in result.stderr


def test_up_refuses_a_port_in_use_with_a_clear_message(tmp_path):
    import socket
    import subprocess
    import sys

    from tests.servers import ROOT

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run([sys.executable, "manage.py", "up", "--port", str(port), "--ws-port", str(_free_port())],
                                cwd=ROOT, env=_env(tmp_path / "var"), capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert f"127.0.0.1:{port} is already in use" in result.stderr and "Traceback" not in result.stderr


def test_nothing_outlives_a_killed_up_and_the_next_up_takes_over_its_database(tmp_path):
    """`up` killed hard (SIGKILL: no chance to stop anything): the kernel stops its web, WebSocket and MCP servers, the
    worker cluster and the runner (parent-death signal); the embedded PostgreSQL it left is taken over by the next
    `up` on the same data dir, which then stops it like its own."""
    import psutil

    from tests.mcp_app.conformance import start_goclaw

    data_dir = tmp_path / "var"
    env = _env(data_dir)
    up, _ = start_goclaw(env, tmp_path / "up.log")  # every server answers before the kill: none is still starting
    try:
        children = psutil.Process(up.proc.pid).children(recursive=True)
        assert {"granian", "qcluster", "runtime_runner"} <= {part for child in children for part in
                                                             (Path(word).name for word in child.cmdline())}
        up.proc.kill()
        up.proc.wait()
        _, alive = psutil.wait_procs(children, timeout=60)
        assert alive == []
    finally:
        up.stop()

    def embedded_servers():
        return [p for p in psutil.process_iter(["cmdline"])
                if p.info["cmdline"] and str(data_dir / "postgres") in p.info["cmdline"]]

    assert embedded_servers()  # not `up`'s child: left running, for the next `up` to find
    up2 = Up(env, _free_port(), _free_port(), tmp_path / "up2.log")
    try:
        up2.wait_healthy()
        assert httpx.get(up2.base + "/admin/login/").status_code == 200
    finally:
        assert up2.stop() == 0
    assert embedded_servers() == []
