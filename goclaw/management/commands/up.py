"""`manage.py up`: migrate, ensure an admin, then supervise the web server (granian or gunicorn, WSGI), the WebSocket
server (granian by default, ASGI; GOCLAW_WS_SERVER), the MCP server (granian by default, ASGI; GOCLAW_MCP_SERVER:
docs/mcp-server.md) and the django-q2 cluster until Ctrl-C; PostgreSQL (embedded) stops last."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from goclaw.services import admin_ensure, database_check, static_collect

RESTART_LIMIT = 5  # restarts of one child within RESTART_WINDOW before `up` gives up
RESTART_WINDOW = 60.0


def database_url() -> str:
    """The default database as a URL, so children use the server this process started (no second start).

    With the embedded server this is the app role (settings never hold its superuser's credentials)."""
    from urllib.parse import quote, urlencode

    db = settings.DATABASES["default"]
    auth = quote(db["USER"], safe="") + (":" + quote(db["PASSWORD"], safe="") if db.get("PASSWORD") else "")
    host = db.get("HOST") or ""
    if host.startswith("/"):
        return f"postgresql://{auth}@/{quote(db['NAME'])}?{urlencode({'host': host})}"
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgresql://{auth}@{host}{port}/{quote(db['NAME'])}"


def _connected_as_superuser() -> bool:
    with connections["default"].cursor() as cur:
        cur.execute("select rolsuper from pg_roles where rolname = current_user")
        return bool(cur.fetchone()[0])


def port_free(host: str, port: int) -> bool:
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str) -> int:
    """A port the system considers free on `host` right now."""
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


_PR_SET_PDEATHSIG = 1


def _dies_with(parent: int):
    """A child's last step before exec: the kernel sends it SIGTERM when `parent` dies, however it died (SIGKILL after a
    stop that took too long, the OOM killer), so a web server, worker or runner never runs on as an orphan holding its
    port. prctl is looked up here, in `up`: nothing is loaded in the forked child. Linux only; elsewhere, nothing."""
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def set_parent_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # `up` died before the line above: nobody would send the signal
            os.kill(os.getpid(), signal.SIGTERM)

    return set_parent_death_signal


class Child:
    def __init__(self, name: str, argv: list[str], env: dict[str, str]):
        self.name, self.argv, self.env = name, argv, env
        self.proc: subprocess.Popen | None = None
        self.restarts: list[float] = []

    def start(self) -> None:
        # Own session: a terminal Ctrl-C reaches only `up`, which stops children in order; and each one is sent SIGTERM
        # by the kernel if `up` dies without stopping them (started from `up`'s main thread, which lives as long as it).
        self.proc = subprocess.Popen(self.argv, env=self.env, start_new_session=True, preexec_fn=_dies_with(os.getpid()))

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def web_command(bindir: Path, host: str, port: int) -> list[str]:
    """The HTTP server for the WSGI app (GOCLAW_WEB_SERVER): granian, whose HTTP parsing is native code, or gunicorn
    gthread (goclaw/gunicorn_conf.py), with the same processes and threads; a worker that dies is started again."""
    if settings.WEB_SERVER == "granian":
        return [str(bindir / "granian"), "--interface", "wsgi", "--host", host, "--port", str(port),
                "--workers", str(settings.WEB_WORKERS), "--blocking-threads", str(settings.WEB_THREADS),
                "--backlog", "2048", "--respawn-failed-workers", "--respawn-interval", "1", "--workers-kill-timeout", "10",
                "--log-level", settings.LOG_LEVEL.lower(), "--no-access-log",
                "goclaw.wsgi:application"]
    return [str(bindir / "gunicorn"), "goclaw.wsgi:application", "-c",
            str(settings.BASE_DIR / "goclaw" / "gunicorn_conf.py"), "--bind", f"{host}:{port}"]


def ws_command(bindir: Path, host: str, port: int) -> list[str]:
    """The WebSocket server for the ASGI app (GOCLAW_WS_SERVER): granian (frames in native code; an event reached
    1,000 sockets in p50 83 ms against daphne's 117 ms, benchmarks/bench_ws_fanout.py), or daphne."""
    app = "goclaw.asgi:application"
    if settings.WS_SERVER == "granian":
        return [str(bindir / "granian"), "--interface", "asgi", "--host", host, "--port", str(port),
                "--workers", str(settings.WS_WORKERS), "--respawn-failed-workers", "--no-access-log",
                "--log-level", settings.LOG_LEVEL.lower(), app]
    return [str(bindir / "daphne"), "-b", host, "-p", str(port), "--proxy-headers", app]


def mcp_command(bindir: Path, host: str, port: int) -> list[str]:
    """The server for the MCP endpoint (GOCLAW_MCP_SERVER): granian (HTTP parsed in native code, as for the WSGI
    app) or uvicorn; both run the app's lifespan (the session manager and the catalog watcher)."""
    app = "mcp_app.server.asgi:application"
    if settings.MCP_SERVER == "granian":
        return [str(bindir / "granian"), "--interface", "asgi", "--host", host, "--port", str(port),
                "--workers", str(settings.MCP_WORKERS), "--backlog", "2048", "--respawn-failed-workers",
                "--no-access-log", "--log-level", settings.LOG_LEVEL.lower(), app]
    return [str(bindir / "uvicorn"), app, "--host", host, "--port", str(port), "--workers", str(settings.MCP_WORKERS),
            "--lifespan", "on", "--no-access-log"]


class Command(BaseCommand):
    help = "Set up (migrations, admin account) and serve goclaw: web, WebSocket, MCP and worker processes."

    def add_arguments(self, parser):
        parser.add_argument("--host", default=settings.HOST)
        parser.add_argument("--port", type=int, default=settings.PORT)
        parser.add_argument("--ws-port", type=int, default=None)
        parser.add_argument("--mcp-port", type=int, default=None, help="default GOCLAW_MCP_PORT, else --port + 2")
        parser.add_argument("--no-worker", action="store_true", help="do not start the django-q2 cluster nor the hosted-agent runner")

    def handle(self, *args, host, port, ws_port, mcp_port, no_worker, **options):
        ws_port = ws_port or (settings.WS_PORT if port == settings.PORT else port + 1)
        if not mcp_port and not os.environ.get("GOCLAW_MCP_PORT") and port != settings.PORT and not port_free(host, port + 2):
            mcp_port = free_port(host)  # only the derived default moves; a port someone chose is required
        mcp_port = mcp_port or (settings.MCP_PORT if port == settings.PORT or os.environ.get("GOCLAW_MCP_PORT") else port + 2)
        started = time.monotonic()
        for name, number in (("GOCLAW_PORT", port), ("GOCLAW_WS_PORT", ws_port), ("GOCLAW_MCP_PORT", mcp_port)):
            if not port_free(host, number):
                raise CommandError(f"{host}:{number} is already in use: stop what listens there or set {name} (or --port/--ws-port)")
        problem = database_check()
        if problem:
            raise CommandError(problem)
        if _connected_as_superuser():
            if not settings.DATABASE_URL:  # the embedded bootstrap hands out the app role only
                raise CommandError("refusing to serve as the embedded PostgreSQL's superuser")
            self.stderr.write(self.style.WARNING(
                "DATABASE_URL connects as a PostgreSQL superuser: goclaw needs only a role that owns its database"))
        call_command("migrate", interactive=False, verbosity=0)
        static_collect()
        created, password = admin_ensure(username=settings.ADMIN_USER, password=settings.ADMIN_PASSWORD,
                                         password_file=settings.DATA_DIR / "admin-password.txt")
        if created and password:
            self.stdout.write(self.style.WARNING(
                f"Created admin user {settings.ADMIN_USER!r} with password: {password}\n"
                f"(also saved to {settings.DATA_DIR / 'admin-password.txt'}, mode 0600; it is not shown again)"))
        elif created:
            self.stdout.write(f"Created admin user {settings.ADMIN_USER!r} with the password from GOCLAW_ADMIN_PASSWORD")
        connections.close_all()

        env = {**os.environ, "DATABASE_URL": database_url(), "DJANGO_SETTINGS_MODULE": "goclaw.settings",
               "GOCLAW_PORT": str(port), "GOCLAW_WS_PORT": str(ws_port),
               "GOCLAW_MCP_PORT": str(mcp_port), "GOCLAW_HOST": host,
               "GOCLAW_WS_URL": os.environ.get("GOCLAW_WS_URL", f"ws://{host}:{ws_port}/ws/events/"),
               "PYTHONUNBUFFERED": "1"}
        bindir = Path(sys.executable).parent
        children = [
            Child("web", web_command(bindir, host, port), env),
            Child("websocket", ws_command(bindir, host, ws_port), env),
            Child("mcp", mcp_command(bindir, host, mcp_port), env),
        ]
        if not no_worker:
            children.append(Child("worker", [sys.executable, str(settings.BASE_DIR / "manage.py"), "qcluster"], env))
            # hosted agents' sessions (runtime_app): leases runnable sessions from the database (docs/runtime.md)
            children.append(Child("runtime", [sys.executable, str(settings.BASE_DIR / "manage.py"), "runtime_runner"], env))

        stop_requested = []

        def request_stop(signum, frame):
            stop_requested.append(signum)

        signal.signal(signal.SIGINT, request_stop)
        signal.signal(signal.SIGTERM, request_stop)
        for child in children:
            child.start()
        if not no_worker:
            from django_q.tasks import async_task

            async_task("goclaw.tasks.heartbeat")  # first beat as soon as the cluster takes tasks
            connections.close_all()
        self.stdout.write(self.style.SUCCESS(
            f"goclaw is starting (set-up took {time.monotonic() - started:.1f}s)\n"
            f"  admin:     http://{host}:{port}/admin/\n"
            f"  API docs:  http://{host}:{port}/api/docs/\n"
            f"  health:    http://{host}:{port}/healthz\n"
            f"  WebSocket: {env['GOCLAW_WS_URL']}\n"
            f"  MCP: http://{host}:{mcp_port}/mcp\n"
            f"Press Ctrl-C to stop."))
        exit_code = self._supervise(children, stop_requested)
        for child in children:  # web first, worker last
            child.stop()
        self.stdout.write("goclaw stopped.")
        if exit_code:
            sys.exit(exit_code)

    def _supervise(self, children: list[Child], stop_requested: list) -> int:
        while not stop_requested:
            time.sleep(0.2)
            for child in children:
                if child.proc is not None and child.proc.poll() is not None and not stop_requested:
                    now = time.monotonic()
                    child.restarts = [t for t in child.restarts if now - t < RESTART_WINDOW] + [now]
                    if len(child.restarts) > RESTART_LIMIT:
                        self.stderr.write(f"{child.name} keeps exiting (code {child.proc.returncode}); stopping goclaw")
                        return 1
                    self.stderr.write(f"{child.name} exited with code {child.proc.returncode}; restarting")
                    child.start()
        return 0
