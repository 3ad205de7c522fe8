"""The MCP client bridge against real SDK servers over stdio, SSE and streamable HTTP (and stdio inside bubblewrap)."""
from __future__ import annotations

import logging
import secrets
import sys
import threading
import time
from pathlib import Path

import pytest

from mcp_app.bridge import (
    BridgeError,
    bridge_call_tool,
    bridge_list_tools,
    bridge_ping,
    bridge_reconnect,
    bridge_status,
)
from mcp_app.config import ServerConfig
from sandbox_app.runs import SandboxSpec
from tests.mcp_app.conftest import make_stdio_config
from tests.servers import HangUpListener, wait_until

TRANSPORTS = ("stdio", "sse", "streamable-http")
VENV = Path(sys.prefix)
TESTS_DIR = Path(__file__).resolve().parents[1]


@pytest.fixture
def config_for(mcp_server, tmp_path):
    """A ServerConfig for a running test server of the given transport (state dir included)."""
    def build(transport: str, **kwargs) -> tuple[ServerConfig, Path]:
        if transport == "stdio":
            state_dir = tmp_path / "stdio-state"
            state_dir.mkdir(exist_ok=True)
            return make_stdio_config(state_dir=state_dir, **kwargs), state_dir
        server = mcp_server(transport)
        return server.config(**kwargs), server.state_dir
    return build


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_every_transport_lists_the_tools_in_the_servers_order_and_calls_them(config_for, transport):
    config, _ = config_for(transport)

    tools = bridge_list_tools(config)
    assert [t.name for t in tools][:4] == ["echo", "add", "whoami", "sleep"]
    echo = tools[0]
    assert echo.description == "Return the text unchanged."
    assert echo.input_schema["properties"]["text"]["type"] == "string"

    assert bridge_call_tool(config, "echo", {"text": "hello"}).text == "hello"
    added = bridge_call_tool(config, "add", {"a": 2, "b": 3})
    assert (added.text, added.structured, added.is_error) == ("5", {"result": 5}, False)
    picture = bridge_call_tool(config, "picture", {})
    assert picture.text.startswith("[image content: image/png, ") and picture.content_types == ("image",)
    failed = bridge_call_tool(config, "fail", {})
    assert failed.is_error and "always fails" in failed.text
    bridge_ping(config)


@pytest.mark.parametrize("transport", ("sse", "streamable-http"))
def test_callers_with_different_credentials_never_share_a_connection(mcp_server, transport):
    server = mcp_server(transport)
    alice = server.config(headers={"Authorization": "Bearer alice"}, credentials_of="alice")
    bob = server.config(headers={"Authorization": "Bearer bob"}, credentials_of="bob")

    assert bridge_call_tool(alice, "whoami", {}).structured == {"result": "Bearer alice"}
    assert bridge_call_tool(bob, "whoami", {}).structured == {"result": "Bearer bob"}
    assert bridge_call_tool(alice, "whoami", {}).structured == {"result": "Bearer alice"}
    assert len(bridge_status()) == 2


def test_stdio_servers_get_each_callers_own_environment_and_nothing_of_goclaws(monkeypatch):
    monkeypatch.setenv("GOCLAW_LEAK_CANARY", "leaked")
    alice = make_stdio_config(env={"MCP_TOKEN": "alice-token"}, credentials_of="alice")
    bob = make_stdio_config(env={"MCP_TOKEN": "bob-token"}, credentials_of="bob")
    nobody = make_stdio_config()

    assert bridge_call_tool(alice, "whoami", {}).structured == {"result": "alice-token"}
    assert bridge_call_tool(bob, "whoami", {}).structured == {"result": "bob-token"}
    assert bridge_call_tool(nobody, "whoami", {}).structured == {"result": "none"}


def test_the_status_names_servers_and_states_but_no_secret(mcp_server):
    server = mcp_server("streamable-http")
    config = server.config(name="status-srv", headers={"Authorization": "Bearer s3cr3t-value"})
    bridge_call_tool(config, "echo", {"text": "x"})

    status = bridge_status()
    (entry,) = status.values()
    assert entry["server"] == "status-srv" and entry["state"] == "connected" and entry["attempts"] == 0
    assert "s3cr3t" not in repr(status) and config.key not in status


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_setting_the_cancel_event_cancels_the_request_at_the_server(config_for, transport):
    config, state_dir = config_for(transport)
    bridge_call_tool(config, "echo", {"text": "warm up"})
    cancel = threading.Event()
    outcome: dict = {}

    def call():
        try:
            bridge_call_tool(config, "sleep", {"seconds": 60}, cancel=cancel)
        except BridgeError as exc:
            outcome["error"] = exc
            outcome["at"] = time.monotonic()

    worker = threading.Thread(target=call)
    worker.start()
    wait_until(lambda: (state_dir / "sleep-started").exists(), message="the sleep to start")
    cancelled_at = time.monotonic()
    cancel.set()
    worker.join(timeout=10)

    assert outcome["error"].code == "mcp_cancelled"
    assert outcome["at"] - cancelled_at < 5
    wait_until(lambda: (state_dir / "sleep-cancelled").exists(), message="the server to see the cancellation")
    assert bridge_call_tool(config, "echo", {"text": "still usable"}).text == "still usable"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_call_that_times_out_is_cancelled_at_the_server(config_for, transport):
    config, state_dir = config_for(transport)
    bridge_call_tool(config, "echo", {"text": "warm up"})

    with pytest.raises(BridgeError) as caught:
        bridge_call_tool(config, "sleep", {"seconds": 60}, timeout=1)

    assert caught.value.code == "mcp_timeout"
    wait_until(lambda: (state_dir / "sleep-cancelled").exists(), message="the server to see the cancellation")
    assert not (state_dir / "sleep-finished").exists()


def test_a_url_to_loopback_is_refused_unless_private_network_is_allowed(mcp_server):
    server = mcp_server("streamable-http")

    with pytest.raises(BridgeError) as caught:
        bridge_call_tool(server.config(allow_private_network=False), "echo", {"text": "x"})

    assert caught.value.code == "mcp_network_refused"
    assert "loopback" in str(caught.value)
    assert bridge_call_tool(server.config(allow_private_network=True), "echo", {"text": "x"}).text == "x"


@pytest.mark.parametrize("transport", ["sse", "streamable-http"])
def test_a_name_that_resolves_to_loopback_is_refused_when_the_bridge_dials(mcp_server, monkeypatch, transport):
    """The URL names no address, so only the outbound guard, which checks the address the connection is opened
    to, can stop it; the server never sees a request."""
    import socket

    server = mcp_server(transport)
    real = socket.getaddrinfo

    def names(host, *args, **kwargs):
        return real("127.0.0.1" if host in ("upstream.test", b"upstream.test") else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", names)
    config = server.config(allow_private_network=False)
    config = ServerConfig(**{**config.__dict__, "url": server.url.replace("127.0.0.1", "upstream.test")})
    with pytest.raises(BridgeError) as caught:
        bridge_call_tool(config, "echo", {"text": "x"})
    assert caught.value.code == "mcp_network_refused"
    assert "upstream.test resolves to 127.0.0.1, a loopback address" in str(caught.value)
    assert "allow private network for this server" in str(caught.value)


def test_a_stdio_command_that_does_not_exist_is_unavailable_not_a_crash():
    config = ServerConfig(server_id=9, name="missing", transport="stdio", command="/nonexistent/mcp-server")

    with pytest.raises(BridgeError) as caught:
        bridge_list_tools(config)

    assert caught.value.code == "mcp_unavailable"


def test_a_stdio_server_that_fails_to_start_reports_what_it_wrote_to_stderr_scrubbed(caplog):
    secret = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"
    failing = ("import sys; print('npm ERR! code EAI_AGAIN', file=sys.stderr); "
               f"print('npm ERR! request to https://registry.npmjs.org/x failed, token {secret}', file=sys.stderr); "
               "sys.exit(1)")
    config = ServerConfig(server_id=10, name="fails-to-start", transport="stdio", command=sys.executable,
                          args=("-c", failing))

    with caplog.at_level(logging.INFO, logger="mcp_app.bridge"), pytest.raises(BridgeError) as caught:
        bridge_list_tools(config)

    message = str(caught.value)
    assert caught.value.code == "mcp_unavailable" and "its stderr ended with: npm ERR! code EAI_AGAIN" in message
    assert "registry.npmjs.org" in message and secret not in message
    logged = [r.getMessage() for r in caplog.records if "fails-to-start stderr" in r.getMessage()]
    assert any("EAI_AGAIN" in line for line in logged) and not any(secret in line for line in logged)


@pytest.fixture
def fast_health(settings):
    """Health checks and reconnects on a test's time scale."""
    settings.MCP_HEALTH_INTERVAL_SECONDS = 0.2
    settings.MCP_RECONNECT_BASE_SECONDS = 0.1
    settings.MCP_RECONNECT_MAX_SECONDS = 0.4
    settings.MCP_RECONNECT_MAX_ATTEMPTS = 100
    settings.MCP_RECONNECT_COOLDOWN_SECONDS = 300
    return settings


@pytest.mark.parametrize("transport", ("sse", "streamable-http"))
def test_the_bridge_reconnects_after_the_server_is_killed_and_restarted(mcp_server, bridge_events, fast_health,
                                                                       transport):
    server = mcp_server(transport)
    config = server.config(server_id=41)
    assert bridge_call_tool(config, "echo", {"text": "before"}).text == "before"
    bridge_events.wait_for_state(41, "connected")
    listed = lambda: len([tools for cfg, tools in bridge_events.listings if cfg.server_id == 41])  # noqa: E731
    wait_until(listed, message="the first connect's listing")  # else the stop below may cut it short

    server.stop()
    down = bridge_events.wait_for_state(41, "disconnected")
    assert down["ok"] is False and down["error"]
    reports = len(bridge_events.states(41))
    server.start()
    up = bridge_events.wait_for_state(41, "connected", after=reports)

    assert up["ok"] is True and up["attempts"] == 0
    assert bridge_call_tool(config, "echo", {"text": "after"}).text == "after"
    # the first connect's listing and the reconnect's (listeners hear of a listing after the call that caused it)
    wait_until(lambda: listed() >= 2, message="the reconnect's listing")


def test_after_the_last_attempt_calls_fail_fast_until_someone_reconnects_by_hand(mcp_server, bridge_events,
                                                                                 fast_health):
    fast_health.MCP_RECONNECT_MAX_ATTEMPTS = 2
    server = mcp_server("streamable-http")
    server.stop()
    config = server.config(server_id=42)

    with pytest.raises(BridgeError) as first:
        bridge_call_tool(config, "echo", {"text": "x"})
    assert first.value.code == "mcp_unavailable"
    cooldown = bridge_events.wait_for_state(42, "cooldown")
    assert cooldown["attempts"] == 2 and cooldown["next_attempt_at"] is not None

    server.start()
    started = time.monotonic()
    with pytest.raises(BridgeError) as fast:
        bridge_call_tool(config, "echo", {"text": "x"})
    assert fast.value.code == "mcp_unavailable" and fast.value.retry_after > 200
    assert time.monotonic() - started < 2

    bridge_reconnect(42)
    assert bridge_call_tool(config, "echo", {"text": "back"}).text == "back"


def test_an_idle_connection_is_closed_and_the_next_call_reconnects(mcp_server, settings):
    settings.MCP_IDLE_SECONDS = 0.3
    config = mcp_server("streamable-http").config()
    bridge_call_tool(config, "echo", {"text": "x"})

    wait_until(lambda: not bridge_status(), message="the idle connection to close")
    assert bridge_call_tool(config, "echo", {"text": "again"}).text == "again"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_tools_list_changed_announcement_re_lists_and_tells_the_listeners(config_for, bridge_events, transport):
    config, _ = config_for(transport, server_id=43)
    bridge_call_tool(config, "echo", {"text": "x"})
    wait_until(lambda: bridge_events.listings, message="the first listing")

    bridge_call_tool(config, "grow", {})

    def grown_listed():
        return any("grown" in [t.name for t in tools] for _cfg, tools in bridge_events.listings)
    wait_until(grown_listed, message="a listing with the new tool")
    assert "grown" in [t.name for t in bridge_list_tools(config)]


def test_a_listener_that_raises_does_not_break_the_connection(mcp_server):
    from mcp_app.bridge import hooks

    def broken(*_args):
        raise RuntimeError("listener bug")

    hooks.health_listeners.append(broken)
    hooks.listing_listeners.append(broken)
    try:
        config = mcp_server("streamable-http").config()
        assert bridge_call_tool(config, "echo", {"text": "fine"}).text == "fine"
        assert bridge_call_tool(config, "echo", {"text": "still"}).text == "still"
    finally:
        hooks.health_listeners.remove(broken)
        hooks.listing_listeners.remove(broken)


# --- stdio servers inside a bubblewrap sandbox ---------------------------------------------------------------

@pytest.fixture
def host_listener():
    listener = HangUpListener("127.0.0.1")
    yield listener
    listener.close()


def sandboxed_config(workdir: Path, **kwargs) -> ServerConfig:
    """The test server under the system python3 (the venv's interpreter lives under /root, which the sandbox
    user can't reach), importing the SDK from the venv bound read-only."""
    site = next(VENV.glob("lib/python3*/site-packages"))
    spec = SandboxSpec(backend="bubblewrap", profile="mcp-test", network=False, ro_binds=(str(VENV), str(TESTS_DIR)))
    return make_stdio_config(command="/usr/bin/python3", env={"PYTHONPATH": str(site)}, sandbox=spec,
                             workdir=str(workdir), **kwargs)


@pytest.fixture
def workdir(tmp_path) -> Path:
    path = tmp_path / "server-workdir"
    path.mkdir(mode=0o700)
    return path


def test_a_stdio_server_runs_inside_bubblewrap_lists_and_calls(workdir):
    config = sandboxed_config(workdir)

    assert [t.name for t in bridge_list_tools(config)][:2] == ["echo", "add"]
    assert bridge_call_tool(config, "add", {"a": 20, "b": 22}).structured == {"result": 42}
    status = bridge_call_tool(config, "read_file", {"path": "/proc/self/status"}).text
    assert "Uid:" in status and "Uid:\t0\t" not in status  # the sandbox user, never root


def test_a_sandboxed_server_has_no_network_while_the_same_server_on_the_host_has(workdir, host_listener):
    args = {"host": "127.0.0.1", "port": host_listener.port}

    on_host = bridge_call_tool(make_stdio_config(name="on-host"), "net_probe", args)
    sandboxed = bridge_call_tool(sandboxed_config(workdir, name="sandboxed"), "net_probe", args)

    assert on_host.text.startswith("connected")
    assert sandboxed.text.startswith("refused")


def test_a_sandboxed_server_cannot_read_goclaws_data_dir(workdir, settings):
    probe = Path(settings.DATA_DIR) / f"mcp-sandbox-probe-{secrets.token_hex(4)}.txt"
    probe.write_text("goclaw's own secret")
    try:
        on_host = bridge_call_tool(make_stdio_config(name="on-host"), "read_file", {"path": str(probe)})
        sandboxed = bridge_call_tool(sandboxed_config(workdir, name="sandboxed"), "read_file", {"path": str(probe)})
    finally:
        probe.unlink()

    assert on_host.text == "goclaw's own secret"
    assert sandboxed.text.startswith("error:")


def test_a_sandbox_profile_with_unrestricted_network_is_refused_for_bubblewrap(workdir):
    spec = SandboxSpec(backend="bubblewrap", network=True, network_local=False, ro_binds=(str(VENV),))
    config = make_stdio_config(command="/usr/bin/python3", sandbox=spec, workdir=str(workdir))

    with pytest.raises(BridgeError) as caught:
        bridge_list_tools(config)

    assert caught.value.code == "mcp_launch_refused"

