"""`sandbox_stdio_command` with the docker backend: a stdio MCP server (a busybox sh script, the image has no
python) in a container of the private engine, spoken to through the MCP bridge. Real engine, real SDK client."""
from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from mcp_app.bridge import bridge_call_tool, bridge_close_all, bridge_list_tools
from mcp_app.config import ServerConfig
from sandbox_app import backends
from sandbox_app.identity import sandbox_identity
from sandbox_app.runs import ExecLimits, SandboxError, SandboxSpec
from sandbox_app.services import safe_child_env
from sandbox_app.stdio import STDIO_LABEL, sandbox_stdio_command
from tests.servers import HangUpListener, wait_until
from tests.sandbox_app.dockerd import docker_engine  # noqa: F401  (session fixture)

SERVER_SCRIPT = str(Path(__file__).resolve().parents[1] / "mcp_app" / "shell_mcp_server.sh")
# Ignores both the end of stdin and SIGTERM: only a kill of its container ends it.
STUBBORN = ["/bin/sh", "-c", "trap '' TERM; exec </dev/null; while :; do sleep 1; done"]

pytestmark = pytest.mark.usefixtures("docker_engine")


@pytest.fixture(autouse=True)
def _fresh_docker_backend(docker_engine):  # noqa: F811
    """The registry's docker backend talks to this session's engine; no connection outlives a test."""
    backends.reset_backend("docker")
    yield
    bridge_close_all()
    backends.reset_backend("docker")


@pytest.fixture
def workdir(tmp_path) -> Path:
    path = tmp_path / "server-workdir"
    path.mkdir(mode=0o700)
    return path


def stdio_containers(engine, **filters) -> list[dict]:
    return engine.client.api.containers(all=True, filters={"label": STDIO_LABEL, **filters})


def shell_server(workdir: Path, *, name: str = "shell", network: bool = False, **kwargs) -> ServerConfig:
    """The shell MCP server in a docker sandbox, the script bound read-only at its own path."""
    spec = SandboxSpec(backend="docker", profile="mcp-docker", network=network, network_local=network,
                       ro_binds=(SERVER_SCRIPT,))
    return ServerConfig(server_id=1, name=name, transport="stdio", command="/bin/sh", args=(SERVER_SCRIPT,),
                        sandbox=spec, workdir=str(workdir), timeout=30.0, **kwargs)


def run_once(argv: list[str], workdir: Path, *, env: dict[str, str] | None = None, spec: SandboxSpec | None = None,
             limits: ExecLimits | None = None) -> str:
    cmd, cmd_env = sandbox_stdio_command(argv=argv, spec=spec or SandboxSpec(backend="docker"), workdir=workdir,
                                         env=env if env is not None else safe_child_env(), limits=limits)
    proc = subprocess.run(cmd, env=cmd_env, cwd="/", stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc.stdout.decode()


@pytest.fixture
def host_listener():
    listener = HangUpListener("0.0.0.0")
    yield listener
    listener.close()


# --- through the MCP bridge ------------------------------------------------------------------------------

def test_a_shell_mcp_server_in_a_container_lists_and_calls_its_tools(workdir):
    config = shell_server(workdir)

    assert [t.name for t in bridge_list_tools(config)] == ["echo", "whoami", "net_probe"]
    echoed = bridge_call_tool(config, "echo", {"text": 'say "hi" \\ to ü'})
    assert (echoed.text, echoed.is_error) == ('say "hi" \\ to ü', False)


def test_the_server_runs_as_the_sandbox_user_in_the_workspace_never_root(workdir):
    identity = sandbox_identity()

    who = bridge_call_tool(shell_server(workdir), "whoami", {}).text

    assert who == f"uid={identity.uid} gid={identity.gid} cwd=/workspace"
    assert identity.uid != 0


def test_with_the_network_off_a_port_the_host_listens_on_is_unreachable(workdir, host_listener):
    args = {"host": "127.0.0.1", "port": host_listener.port}

    isolated = bridge_call_tool(shell_server(workdir, name="isolated"), "net_probe", args).text
    with_local_network = bridge_call_tool(shell_server(workdir, name="local", network=True), "net_probe", args).text

    assert isolated.startswith(f"refused 127.0.0.1:{host_listener.port}")
    assert with_local_network == f"connected 127.0.0.1:{host_listener.port}"  # the probe itself works


def test_closing_the_bridge_removes_the_container(docker_engine, workdir):  # noqa: F811
    bridge_list_tools(shell_server(workdir))
    running = stdio_containers(docker_engine, status="running")
    assert len(running) == 1 and running[0]["Image"] == "goclaw-sandbox:latest"

    bridge_close_all()

    wait_until(lambda: not stdio_containers(docker_engine), message="the container to be removed")


# --- the launched command itself ---------------------------------------------------------------------------

def test_a_server_deaf_to_eof_and_sigterm_is_removed_when_its_cli_is_killed(docker_engine, workdir):  # noqa: F811
    cmd, env = sandbox_stdio_command(argv=STUBBORN, spec=SandboxSpec(backend="docker"), workdir=workdir,
                                     env=safe_child_env())
    proc = subprocess.Popen(cmd, env=env, cwd="/", stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: stdio_containers(docker_engine, status="running"), message="the container to run")
        os.killpg(proc.pid, signal.SIGKILL)  # the SDK's last resort, to the whole process group
        proc.wait(timeout=10)

        wait_until(lambda: not stdio_containers(docker_engine), message="the container to be removed")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def test_the_container_sees_only_the_environment_it_was_given(workdir, monkeypatch):
    monkeypatch.setenv("GOCLAW_LEAK_CANARY", "leaked")
    env = safe_child_env({"MCP_TOKEN": "t0k-secret"})

    cmd, _ = sandbox_stdio_command(argv=["/usr/bin/env"], spec=SandboxSpec(backend="docker"), workdir=workdir,
                                   env=env)
    seen = dict(line.split("=", 1) for line in run_once(["/usr/bin/env"], workdir, env=env).splitlines())

    assert seen == {**env, "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/workspace",
                    "HOSTNAME": "sandbox"}  # the engine always sets HOSTNAME
    assert seen["MCP_TOKEN"] == "t0k-secret" and "GOCLAW_LEAK_CANARY" not in seen
    assert not any("t0k-secret" in arg for arg in cmd)  # values never on the (world-readable) command line


def test_the_workspace_is_writable_and_the_rest_read_only(workdir):
    out = run_once(["/bin/sh", "-c", "echo made > /workspace/out.txt && echo ok; "
                                     f"echo x > {SERVER_SCRIPT} 2>/dev/null || echo bind-readonly; "
                                     "echo x > /etc/x 2>/dev/null || echo root-readonly"],
                   workdir, spec=SandboxSpec(backend="docker", ro_binds=(SERVER_SCRIPT,)))

    assert out == "ok\nbind-readonly\nroot-readonly\n"
    assert (workdir / "out.txt").read_text() == "made\n"
    assert (workdir / "out.txt").stat().st_uid == sandbox_identity().uid


def test_limits_become_the_containers_limits(docker_engine, workdir):  # noqa: F811
    limits = ExecLimits(max_open_files=64, max_processes=20, memory_bytes=64 * 1024 * 1024)
    cmd, env = sandbox_stdio_command(argv=STUBBORN, spec=SandboxSpec(backend="docker"), workdir=workdir,
                                     env=safe_child_env(), limits=limits)
    proc = subprocess.Popen(cmd, env=env, cwd="/", stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        running = wait_until(lambda: stdio_containers(docker_engine, status="running"), message="the container")
        host_config = docker_engine.client.api.inspect_container(running[0]["Id"])["HostConfig"]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    wait_until(lambda: not stdio_containers(docker_engine), message="the container to be removed")

    assert host_config["PidsLimit"] == 21  # the processes plus docker-init
    assert host_config["Memory"] == host_config["MemorySwap"] == 64 * 1024 * 1024
    assert {"Name": "nofile", "Soft": 64, "Hard": 64} in host_config["Ulimits"]
    assert host_config["Init"] is True and host_config["NetworkMode"] == "none"
    assert host_config["ReadonlyRootfs"] is True and host_config["CapDrop"] == ["ALL"]
    assert run_once(["/bin/sh", "-c", "ulimit -n"], workdir, limits=limits) == "64\n"


def test_a_missing_image_is_refused_before_anything_starts(workdir):
    with pytest.raises(SandboxError, match="missing.*nothing is pulled"):
        sandbox_stdio_command(argv=["/bin/true"], spec=SandboxSpec(backend="docker", image="goclaw-absent:1"),
                              workdir=workdir, env=safe_child_env())


def test_a_variable_that_would_steer_the_docker_cli_is_refused(workdir):
    with pytest.raises(SandboxError, match="DOCKER_HOST cannot be given"):
        sandbox_stdio_command(argv=["/bin/true"], spec=SandboxSpec(backend="docker"), workdir=workdir,
                              env=safe_child_env({"DOCKER_HOST": "tcp://elsewhere:2375"}))
