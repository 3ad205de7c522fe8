"""Fixtures for MCP tests: real SDK servers (`mcp_test_server.py`) in subprocesses.

- `mcp_server` — a factory: `mcp_server("streamable-http" | "sse", extra_tool=..., echo_description=...)` starts
  a server on a free 127.0.0.1 port and waits until it answers; the handle has `.url`, `.port`, `.state_dir`,
  `.stop()` and `.start()` (again on the same port, for reconnect tests), and `.config(...)` (a ServerConfig).
  Every server is stopped at the end of the test.
- `stdio_config(...)` — a ServerConfig that launches the test server over stdio with this interpreter.
- `bridge_events` — records health and listing listener calls (`.health`, `.listings`, `.wait_for(...)`).
- every test ends with `bridge_close_all()`, so no connection (or stdio child) outlives it.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from mcp_app.config import ServerConfig
from tests.servers import free_port, wait_until

SERVER_SCRIPT = Path(__file__).resolve().parent / "mcp_test_server.py"
HTTP_PATHS = {"streamable-http": "/mcp", "sse": "/sse"}


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@dataclass
class McpHttpServer:
    """One HTTP MCP test server process (streamable-http or sse) on a fixed port."""

    transport: str
    state_dir: Path
    port: int = field(default_factory=free_port)
    extra_args: tuple[str, ...] = ()
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{HTTP_PATHS[self.transport]}"

    def start(self) -> "McpHttpServer":
        """Start (or start again, on the same port) and wait until it accepts connections."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GOCLAW_")}
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER_SCRIPT), "--transport", self.transport, "--port", str(self.port),
             "--state-dir", str(self.state_dir), *self.extra_args],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: self.proc.poll() is not None or _answers(self.port), timeout=30,
                   message=f"the {self.transport} MCP server on port {self.port}")
        assert self.proc.poll() is None, f"the {self.transport} MCP server exited with {self.proc.returncode}"
        return self

    def stop(self) -> None:
        """Kill the server (like a crash) and wait until the port is closed."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        wait_until(lambda: not _answers(self.port), timeout=10, message=f"port {self.port} to close")

    def config(self, *, server_id: int = 1, name: str = "test", headers: dict[str, str] | None = None,
               allow_private_network: bool = True, **kwargs: Any) -> ServerConfig:
        return ServerConfig(server_id=server_id, name=name, transport=self.transport, url=self.url,
                            headers=tuple(sorted((headers or {}).items())),
                            allow_private_network=allow_private_network, **kwargs)


def server_args(*, state_dir: Path | None = None, extra_tool: bool = False,
                echo_description: str | None = None) -> tuple[str, ...]:
    """Command-line options of mcp_test_server.py."""
    args: list[str] = []
    if state_dir is not None:
        args += ["--state-dir", str(state_dir)]
    if extra_tool:
        args.append("--extra-tool")
    if echo_description is not None:
        args += ["--echo-description", echo_description]
    return tuple(args)


@pytest.fixture
def mcp_server(tmp_path):
    """Factory for HTTP MCP test servers; all are stopped at teardown."""
    started: list[McpHttpServer] = []

    def start(transport: str = "streamable-http", *, extra_tool: bool = False,
              echo_description: str | None = None) -> McpHttpServer:
        state_dir = tmp_path / f"state-{transport}-{len(started)}"
        state_dir.mkdir()
        server = McpHttpServer(transport=transport, state_dir=state_dir,
                               extra_args=server_args(extra_tool=extra_tool, echo_description=echo_description))
        started.append(server)
        return server.start()

    yield start
    for server in started:
        if server.proc is not None and server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(timeout=10)


def make_stdio_config(*, server_id: int = 1, name: str = "stdio-test", state_dir: Path | None = None,
                      env: dict[str, str] | None = None, extra_tool: bool = False,
                      echo_description: str | None = None, command: str = sys.executable,
                      script: Path = SERVER_SCRIPT, **kwargs: Any) -> ServerConfig:
    """A stdio ServerConfig that runs mcp_test_server.py (on the host unless `sandbox=` is given)."""
    args = (str(script), "--transport", "stdio",
            *server_args(state_dir=state_dir, extra_tool=extra_tool, echo_description=echo_description))
    return ServerConfig(server_id=server_id, name=name, transport="stdio", command=command, args=args,
                        env=tuple(sorted((env or {}).items())), **kwargs)


@pytest.fixture
def stdio_config():
    """The `make_stdio_config` builder, as a fixture."""
    return make_stdio_config


class BridgeEvents:
    """What the bridge reported to its listeners during the test."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.health: list[tuple[int, dict]] = []
        self.listings: list[tuple[ServerConfig, list]] = []

    def on_health(self, server_id: int, payload: dict) -> None:
        with self.lock:
            self.health.append((server_id, dict(payload)))

    def on_listing(self, config: ServerConfig, tools: list) -> None:
        with self.lock:
            self.listings.append((config, list(tools)))

    def states(self, server_id: int) -> list[str]:
        with self.lock:
            return [p["state"] for sid, p in self.health if sid == server_id]

    def wait_for_state(self, server_id: int, state: str, *, after: int = 0, timeout: float = 20.0) -> dict:
        """The first health report of `state` for the server among reports number `after` and later."""
        def find():
            with self.lock:
                mine = [p for sid, p in self.health if sid == server_id]
            return next((p for p in mine[after:] if p["state"] == state), None)
        return wait_until(find, timeout=timeout, message=f"server {server_id} to report {state}")


@pytest.fixture
def bridge_events():
    from mcp_app.bridge import hooks

    events = BridgeEvents()
    hooks.health_listeners.append(events.on_health)
    hooks.listing_listeners.append(events.on_listing)
    yield events
    hooks.health_listeners.remove(events.on_health)
    hooks.listing_listeners.remove(events.on_listing)


@pytest.fixture(autouse=True)
def _close_bridge_connections():
    """No connection (nor stdio server process) outlives a test."""
    yield
    from mcp_app.bridge import bridge_close_all

    bridge_close_all()
