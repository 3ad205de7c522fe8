"""Start real goclaw processes (`manage.py up`, management commands) for end-to-end tests and benchmarks."""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
_DROP = ("PYTEST_VERSION", "PYTEST_CURRENT_TEST", "DATABASE_URL", "REDIS_URL", "PYTEST_XDIST_WORKER")


_handed_out: set[int] = set()


def free_port() -> int:
    """A currently free loopback port, never one this process handed out before (two calls in a row would
    otherwise often get the same number back)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


# One web, MCP and worker process instead of the production default of two each: every process is a Django start
# (~5 s of CPU on these machines), and an end-to-end test that is about several processes asks for them.
ONE_PROCESS_EACH = {"GOCLAW_WEB_WORKERS": "1", "GOCLAW_MCP_WORKERS": "1", "GOCLAW_Q_WORKERS": "1"}


def up_env(data_dir: Path, *, one_process_each: bool = True, fresh: bool = False, **extra: str) -> dict[str, str]:
    """A clean environment for a goclaw process with its own data dir (so its own embedded PostgreSQL); tests get
    ONE_PROCESS_EACH unless they say otherwise, benchmarks pass one_process_each=False (production's counts).

    A new data dir (none at `data_dir` yet, no DATABASE_URL) starts as a copy of a migrated one made once per run
    (`migrated_data_dir`): an embedded cluster's initdb, bootstrap and migrations cost ~20 s of CPU. Tests about
    that first start itself pass fresh=True."""
    env = {k: v for k, v in os.environ.items() if k not in _DROP}
    env.update({"GOCLAW_DATA_DIR": str(data_dir), "PYTHONUNBUFFERED": "1",
                **(ONE_PROCESS_EACH if one_process_each else {}), **extra})
    if not fresh and "DATABASE_URL" not in extra and not data_dir.exists():
        template = migrated_data_dir()
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", "--", str(template), str(data_dir)], check=True)  # -a: the server user's files
    return env


def _schema_key() -> str:
    """What a migrated data dir depends on: the migrations, settings and the embedded cluster's bootstrap."""
    digest = hashlib.sha256()
    for path in sorted([*ROOT.glob("*/migrations/*.py"), ROOT / "goclaw" / "embedded_db.py", ROOT / "goclaw" / "settings.py"]):
        digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def migrated_data_dir() -> Path:
    """A data dir holding an initialised, migrated embedded PostgreSQL (stopped) and the static files, made by a real
    `migrate` and `static_collect` (as `up` does) once per set of migrations and shared by the test workers (made under
    a lock; outside /tmp/pytest-of-*, whose mode a new pytest session resets, locking the server's user out)."""
    home = Path("/tmp/goclaw-test-data-dirs") / _schema_key()
    home.mkdir(parents=True, exist_ok=True)
    template = home / "var"
    with (home / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (home / "ready").exists():
            subprocess.run(["rm", "-rf", "--", str(template)], check=True)
            manage_many(up_env(template, fresh=True), ("migrate", "--verbosity", "0"),
                        ("shell", "-c", "from goclaw.services import static_collect; static_collect()"))
            if (template / "postgres" / "postmaster.pid").exists():
                raise RuntimeError(f"the embedded PostgreSQL of {template} still runs after `migrate`")
            subprocess.run(["rm", "-rf", "--", str(template / "run")], check=True)  # its runtime dir: per instance
            (home / "ready").touch()
    return template


def manage(env: dict[str, str], *args: str, timeout: float = 120) -> str:
    result = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return result.stdout


_MANY = """
import contextlib, io, json
from django.core.management import call_command
outputs = []
for args in json.loads({commands!r}):
    output = io.StringIO()
    with contextlib.redirect_stdout(output):  # `shell -c` prints to sys.stdout
        call_command(*args, stdout=output)
    outputs.append(output.getvalue())
print({marker!r} + json.dumps(outputs))
"""


def manage_many(env: dict[str, str], *commands: tuple[str, ...], timeout: float = 180) -> list[str]:
    """Several management commands run in order in one `manage.py` process (each process start is ~1.3 s of CPU):
    their standard outputs, one per command. A failing command fails the call, like `manage`."""
    marker = "\x1egoclaw-outputs:"
    script = _MANY.format(commands=json.dumps([list(args) for args in commands]), marker=marker)
    out = manage(env, "shell", "--no-imports", "-c", script, timeout=timeout)
    return json.loads(out[out.rindex(marker) + len(marker):])


class UpProcess:
    """`manage.py up` in its own session, logging to a file."""

    def __init__(self, env: dict[str, str], port: int, ws_port: int, log: Path):
        self.log = log.open("ab")
        self.port, self.ws_port = port, ws_port
        self.proc = subprocess.Popen([sys.executable, "manage.py", "up", "--port", str(port), "--ws-port", str(ws_port)],
                                     cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.base = f"http://127.0.0.1:{port}"

    def wait_healthy(self, timeout: float = 120.0) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.proc.poll() is not None:
                self.log.flush()
                tail = Path(self.log.name).read_text(errors="replace")[-3000:]
                raise RuntimeError(f"up exited early with {self.proc.returncode}:\n{tail}")
            try:
                if httpx.get(self.base + "/healthz", timeout=2).status_code == 200:
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("goclaw never became healthy")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(60)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.log.close()


def _interruptible() -> None:
    """In a child before it runs: SIGINT back to its default. An ignored SIGINT is inherited across exec (a suite
    started in the background by a non-interactive shell ignores it), and Twisted then leaves it ignored: daphne
    would never stop on `stop()`'s Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class DaphneProcess:
    """daphne alone serving goclaw's ASGI app, in its own session, logging to a file. With `database_url()` and
    `channel_layers()` it shares the test database and a cross-process channel layer with the test process."""

    def __init__(self, env: dict[str, str], port: int, log: Path):
        self.log = log.open("ab")
        self.port = port
        daphne = Path(sys.executable).parent / "daphne"
        self.proc = subprocess.Popen([str(daphne), "-b", "127.0.0.1", "-p", str(port), "goclaw.asgi:application"],
                                     cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=_interruptible)

    def wait_listening(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.log.flush()
                raise RuntimeError(f"daphne exited early with {self.proc.returncode}:\n"
                                   + Path(self.log.name).read_text(errors="replace")[-3000:])
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("daphne never listened")

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(5)
        finally:
            self.log.close()

    @staticmethod
    def database_url() -> str:
        """A DATABASE_URL for the database this (test) process is connected to."""
        from goclaw.management.commands.up import database_url

        return database_url()

    @staticmethod
    def channel_layers() -> dict:
        """CHANNEL_LAYERS for the PostgreSQL layer on this process's database (what a server without Redis uses)."""
        from django.db import connection

        db = connection.settings_dict
        return {"default": {"BACKEND": "goclaw.channel_layer.FastGroupSendPostgresChannelLayer",
                            "CONFIG": {**{k: db[k] for k in ("NAME", "USER", "PASSWORD", "HOST", "PORT")}, "TIME_ZONE": None}}}


# How stale another process may serve a tool set (goclaw.generations.CHECK_SECONDS is 0.5 s): the contract.
PROPAGATION_SECONDS = 1.0


class CatalogWatcher:
    """Reads an agent's catalog from another goclaw process (`base` = its /api/v1 URL) and checks how fast a change
    reaches it: any request that *started* later than PROPAGATION_SECONDS after the change must already see it."""

    def __init__(self, base: str, token: str):
        self.base, self.auth = base, {"Authorization": f"Bearer {token}"}

    def names(self) -> set[str]:
        import requests

        response = requests.get(f"{self.base}/tools", headers=self.auth, timeout=10)
        assert response.status_code == 200, response.text
        return {tool["name"] for tool in response.json()["tools"]}

    def wait_listed(self, name: str, present: bool) -> None:
        changed = time.monotonic()
        while True:
            started = time.monotonic()
            if (name in self.names()) == present:
                return
            assert started - changed < PROPAGATION_SECONDS, "the other process still served the old tool set"
            time.sleep(0.02)


def wait_until(condition, *, timeout: float = 15.0, interval: float = 0.05, message: str = "condition"):
    """Poll `condition` until it returns something truthy (returned), failing the test after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {message}")
        time.sleep(interval)


class HangUpListener:
    """A TCP port on the host (`host`: "127.0.0.1", or "0.0.0.0" for every address) that accepts and hangs up:
    what a sandboxed process's network probe is pointed at."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_server((host, 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
                conn.close()
            except OSError:
                continue

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()
