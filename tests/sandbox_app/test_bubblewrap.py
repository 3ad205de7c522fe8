"""The bubblewrap backend, with real bwrap and real processes (no Django DB, no Django settings).

These run as root on the CI VM: every sandboxed process must come out as the `goclaw-sandbox` user."""
from __future__ import annotations

import os
import pwd
import secrets
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from sandbox_app import backends
from sandbox_app.backends.bubblewrap import BubblewrapBackend
from sandbox_app.identity import SANDBOX_USER, prepare_workspace, sandbox_identity
from sandbox_app.probes import PROBES, run_probes
from sandbox_app.services import (
    ExecLimits,
    SandboxError,
    SandboxSpec,
    safe_child_env,
    sandbox_capabilities,
    sandbox_exec,
)
from tests.sandbox_app.procs import cancel_once_running, sleep_marker, wait_no_leftovers

MIB = 1024 * 1024


@pytest.fixture
def ws(tmp_path) -> Path:
    """A workspace under pytest's 0700 tmp dir: the sandbox user can't search its ancestors."""
    path = tmp_path / "ws"
    path.mkdir(mode=0o700)
    return path


def sandbox_uid() -> int:
    return pwd.getpwnam(SANDBOX_USER).pw_uid


class Listener:
    """TCP listener on 127.0.0.1 that greets and counts connections."""

    def __init__(self, greeting: bytes) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.greeting = greeting
        self.accepted = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.sendall(self.greeting)
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        self.sock.close()


@pytest.fixture
def listener():
    server = Listener(b"hello-" + secrets.token_hex(4).encode() + b"\n")
    yield server
    server.close()


def tcp_command(port: int) -> str:
    return (f"if bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port}; cat <&3' 2>/dev/null; then echo CONNECTED; "
            f"else echo REFUSED; fi")


# --- identity and basics ----------------------------------------------------------------------------

def test_auto_resolves_to_bubblewrap_and_reports_backend_and_profile(ws):
    r = sandbox_exec(command="echo hello", workspace=ws, spec=SandboxSpec(profile="strict"))
    assert r.exit_code == 0 and r.stdout == "hello\n"
    assert r.backend == "bubblewrap"
    assert r.profile == "strict"
    assert "timeout_seconds:pid_namespace" in r.limits_enforced


def test_sandbox_runs_as_the_unprivileged_sandbox_uid_without_capabilities(ws):
    r = sandbox_exec(command="id -u; id -g; id -G; grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status",
                     workspace=ws, backend="bubblewrap")
    ident = sandbox_identity()
    lines = r.stdout.splitlines()
    assert lines[0] == str(sandbox_uid()) != "0"
    assert lines[1] == lines[2] == str(ident.gid)  # no supplementary groups
    assert "CapEff:\t0000000000000000" in r.stdout and "CapPrm:\t0000000000000000" in r.stdout
    assert "NoNewPrivs:\t1" in r.stdout


def test_nested_user_namespaces_are_disabled(ws):
    r = sandbox_exec(command="unshare --user true && echo NESTED_OK || echo NESTED_REFUSED", workspace=ws,
                     backend="bubblewrap")
    assert "NESTED_REFUSED" in r.stdout


def test_exit_codes_streams_stdin_and_output_cap(ws):
    r = sandbox_exec(command="echo out; echo err >&2; exit 3", workspace=ws, backend="bubblewrap")
    assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n")
    r = sandbox_exec(argv=["wc", "-c"], workspace=ws, backend="bubblewrap", stdin=b"x" * 300_000)
    assert r.stdout.strip() == "300000"
    r = sandbox_exec(command="yes | head -c 3000000; echo done >&2", workspace=ws, backend="bubblewrap",
                     limits=ExecLimits(max_output_bytes=MIB))
    assert r.stdout_truncated and len(r.stdout.encode()) == MIB and r.stderr == "done\n"
    r = sandbox_exec(command="kill -9 $$", workspace=ws, backend="bubblewrap")
    assert r.exit_code == 128 + 9  # bwrap reports a signal death the way a shell does


def test_missing_executable_raises(ws):
    with pytest.raises(SandboxError, match="executable not found"):
        sandbox_exec(argv=["definitely-not-a-real-binary-xyz"], workspace=ws, backend="bubblewrap")


def test_cwd_is_inside_workspace_and_home_is_workspace(ws):
    (ws / "sub").mkdir()
    r = sandbox_exec(command="pwd; echo $HOME", workspace=ws, cwd=ws / "sub", backend="bubblewrap")
    assert r.stdout == "/workspace/sub\n/workspace\n"
    with pytest.raises(SandboxError, match="not inside the workspace"):
        sandbox_exec(command="true", workspace=ws / "sub", cwd=ws, backend="bubblewrap")


# --- filesystem -------------------------------------------------------------------------------------

def test_write_outside_workspace_fails(ws):
    token = secrets.token_hex(6)
    r = sandbox_exec(command=f"for d in / /etc /usr /usr/bin /var /tmp/.. /workspace/..; do "
                             f"( : > $d/probe-{token} ) 2>/dev/null && echo WROTE $d; done; echo end",
                     workspace=ws, backend="bubblewrap")
    assert r.stdout == "end\n"
    for d in ("/", "/etc", "/usr", "/usr/bin", "/var"):
        assert not os.path.exists(f"{d}/probe-{token}")
    assert not (ws.parent / f"probe-{token}").exists()


def test_tmp_is_private_and_writable(ws):
    token = secrets.token_hex(6)
    r = sandbox_exec(command=f"echo x > /tmp/{token} && ls /tmp", workspace=ws, backend="bubblewrap")
    assert r.stdout == f"{token}\n"
    assert not os.path.exists(f"/tmp/{token}")


def test_data_dir_other_workspace_root_and_shadow_are_unreadable(ws, tmp_path):
    token = secrets.token_hex(8)
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "secret").write_text(f"data {token}\n")
    other = tmp_path / "other-ws"
    other.mkdir(mode=0o700)
    (other / "notes.txt").write_text(f"other {token}\n")
    prepare_workspace(other, sandbox_identity())  # owned by the sandbox user, like every workspace
    paths = [str(data), str(data / "secret"), str(other), str(other / "notes.txt"), "/root", "/etc/shadow",
             "/etc/gshadow", "/home", "/work/main", str(Path(__file__).resolve())]
    script = "; ".join(f"if [ -e '{p}' ]; then echo 'VISIBLE {p}'; cat '{p}' 2>/dev/null; ls '{p}' 2>/dev/null; fi"
                       for p in paths)
    r = sandbox_exec(command=script + "; echo end", workspace=ws, backend="bubblewrap")
    assert r.stdout == "end\n", r.stdout  # none of them even exists inside
    assert token not in r.stdout + r.stderr


def test_etc_is_minimal(ws):
    r = sandbox_exec(command="ls -A /etc; echo ---; cat /etc/passwd; echo ---; cat /etc/group; "
                             "awk 'BEGIN { print \"awk works\" }'", workspace=ws, backend="bubblewrap")
    listing, passwd, group = r.stdout.split("---\n")[:3]
    names = set(listing.split())
    assert {"passwd", "group", "ld.so.cache", "alternatives"} <= names
    assert not names & {"shadow", "gshadow", "sudoers", "ssh", "resolv.conf", "postgresql", "docker"}
    users = [line.split(":")[0] for line in passwd.splitlines()]
    assert users == ["root", "nobody", SANDBOX_USER]
    assert [line.split(":")[0] for line in group.splitlines()][:2] == ["root", "nogroup"]
    assert "awk works" in r.stdout  # /usr/bin/awk -> /etc/alternatives/awk -> gawk resolves


def test_workspace_files_are_writable_and_usable_by_the_server(ws):
    (ws / "from-server.txt").write_text("server\n")
    r = sandbox_exec(command="echo sandbox > made.txt && mkdir -p d/e && echo deep > d/e/f && cat from-server.txt",
                     workspace=ws, backend="bubblewrap")
    assert r.exit_code == 0 and r.stdout == "server\n"
    assert (ws / "made.txt").read_text() == "sandbox\n"
    (ws / "made.txt").write_text("rewritten\n")  # the server (root) can modify what the sandbox wrote
    assert (ws / "d/e/f").read_text() == "deep\n"
    (ws / "d/e/f").unlink()
    assert os.stat(ws).st_uid == sandbox_uid()  # only the root dir was handed over
    assert os.stat(ws / "from-server.txt").st_uid == 0


def test_workspace_under_searchable_parent_is_bound_from_fd_and_no_fd_leaks(ws, tmp_path):
    open_parent = Path("/tmp") / f"goclaw-test-{secrets.token_hex(4)}"
    open_parent.mkdir(mode=0o755)
    try:
        direct = open_parent / "ws"
        direct.mkdir(mode=0o700)
        for workspace in (ws, direct):  # gateway path and direct --bind-fd path
            r = sandbox_exec(command="ls /proc/self/fd; echo x > f && cat f", workspace=workspace,
                             backend="bubblewrap")
            assert r.exit_code == 0, r.stderr
            fds = r.stdout.split()[:-1]
            assert fds == ["0", "1", "2", "3"], fds  # 3 is ls's own directory handle
            assert (workspace / "f").read_text() == "x\n"
    finally:
        subprocess.run(["rm", "-rf", str(open_parent)], check=True)
    assert not any("goclaw-sandbox" in line for line in Path("/proc/self/mountinfo").read_text().splitlines())


def test_ro_binds_are_read_only_and_validated(ws):
    extra = Path("/tmp") / f"goclaw-ro-{secrets.token_hex(4)}"
    extra.mkdir(mode=0o755)
    try:
        (extra / "data.txt").write_text("shared\n")
        os.chmod(extra / "data.txt", 0o644)
        spec = SandboxSpec(backend="bubblewrap", ro_binds=(str(extra),))
        r = sandbox_exec(command=f"cat {extra}/data.txt; echo no > {extra}/new 2>/dev/null || echo READONLY",
                         workspace=ws, spec=spec)
        assert r.stdout == "shared\nREADONLY\n"
        with pytest.raises(SandboxError, match="absolute"):
            sandbox_exec(command="true", workspace=ws, spec=SandboxSpec(backend="bubblewrap", ro_binds=("rel",)))
        with pytest.raises(SandboxError, match="does not exist"):
            sandbox_exec(command="true", workspace=ws,
                         spec=SandboxSpec(backend="bubblewrap", ro_binds=(str(extra / "missing"),)))
    finally:
        subprocess.run(["rm", "-rf", str(extra)], check=True)


# --- processes --------------------------------------------------------------------------------------

def test_only_sandbox_processes_are_visible_and_foreign_environ_unreachable(ws):
    canary = secrets.token_hex(8)
    victim = subprocess.Popen(["sleep", "60"], env={"PATH": "/usr/bin:/bin", "VICTIM_CANARY": canary},
                              start_new_session=True)
    try:
        r = sandbox_exec(command=f"ls -d /proc/[0-9]* | sed 's,/proc/,,'; echo ---; "
                                 f"cat /proc/{victim.pid}/environ /proc/{os.getpid()}/environ 2>/dev/null; "
                                 f"for f in /proc/[0-9]*/environ; do cat $f 2>/dev/null; done | tr '\\0' '\\n'",
                         workspace=ws, backend="bubblewrap")
        pids, env_dump = r.stdout.split("---\n")
        assert all(int(p) < 20 for p in pids.split()), pids  # its own pid namespace: bwrap init, sh, ls, ...
        assert str(victim.pid) not in pids.split()
        assert canary not in env_dump
    finally:
        victim.kill()
        victim.wait()


def test_environment_holds_only_what_was_given(ws, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    monkeypatch.setenv("HARMLESS_PARENT_VAR", "parent")
    given = safe_child_env({"GIVEN_VAR": "given"})
    r = sandbox_exec(argv=["env"], workspace=ws, env=given, backend="bubblewrap")
    names = {line.split("=", 1)[0] for line in r.stdout.splitlines()}
    assert names <= set(given) | {"HOME", "PWD"}  # bwrap sets PWD for --chdir
    assert "GIVEN_VAR=given" in r.stdout and "HOME=/workspace" in r.stdout
    assert "sk-should-not-leak" not in r.stdout and "parent" not in r.stdout


def test_fork_bomb_is_contained_and_host_stays_responsive(ws):
    token = f"bomb-{secrets.token_hex(6)}"
    r = sandbox_exec(command=f"sh -c 'b() {{ b | b & }}; b; sleep 2; echo main-survived' {token}", workspace=ws,
                     backend="bubblewrap", limits=ExecLimits(timeout_seconds=30, grace_seconds=1, max_processes=32))
    assert "max_processes:cgroup" in r.limits_enforced
    assert "fork" in r.stderr.lower()  # forks failed at the limit
    assert wait_no_leftovers(token) == []
    after = sandbox_exec(command="echo alive", workspace=ws, backend="bubblewrap")
    assert after.stdout == "alive\n"


def test_memory_hog_is_killed(ws):
    r = sandbox_exec(command="a=$(head -c 300000000 /dev/zero | tr '\\0' x); echo SURVIVED ${#a}", workspace=ws,
                     backend="bubblewrap", limits=ExecLimits(timeout_seconds=60, memory_bytes=64 * MIB))
    assert "memory_bytes:cgroup" in r.limits_enforced
    assert "SURVIVED" not in r.stdout
    assert r.exit_code == 128 + 9 and not r.timed_out  # the OOM killer's SIGKILL


def test_rlimits_hold(ws):
    r = sandbox_exec(command="ulimit -n; ulimit -f; (head -c 20000 /dev/zero > big) 2>/dev/null; wc -c < big",
                     workspace=ws, backend="bubblewrap",
                     limits=ExecLimits(max_open_files=64, max_file_bytes=10240))
    assert r.stdout.split() == ["64", "20", "10240"]  # ulimit -f counts 512-byte blocks
    assert {"max_open_files:rlimit", "max_file_bytes:rlimit"} <= set(r.limits_enforced)


def test_timeout_kills_a_double_forked_setsid_grandchild(ws):
    token = f"grandchild-{secrets.token_hex(6)}"
    r = sandbox_exec(command=f"( setsid sh -c 'trap \"\" TERM HUP; while :; do sleep 1; done' {token} & ); "
                             f"echo started; sleep 600",
                     workspace=ws, backend="bubblewrap", limits=ExecLimits(timeout_seconds=2, grace_seconds=1))
    assert r.timed_out and r.exit_code is None
    assert r.stdout == "started\n"
    assert wait_no_leftovers(token) == []


def test_setting_the_cancel_event_from_another_thread_kills_everything_in_the_sandbox(ws):
    marker = sleep_marker()
    with cancel_once_running("sleep", marker, count=2) as cancel:
        r = sandbox_exec(command=f"( setsid sleep {marker} & ); sleep {marker}", workspace=ws, backend="bubblewrap",
                         cancel=cancel, limits=ExecLimits(timeout_seconds=60))
    assert r.cancelled and not r.timed_out and r.exit_code is None
    assert "[sandbox] cancelled" in r.stderr
    assert wait_no_leftovers("sleep", marker) == []


def test_host_backend_cancellation_also_kills_setsid_escapes_through_the_cgroup(ws):
    marker = sleep_marker()
    with cancel_once_running("sleep", marker, count=2) as cancel:
        r = sandbox_exec(command=f"( setsid sleep {marker} & ); sleep {marker}", workspace=ws, backend="host",
                         cancel=cancel, limits=ExecLimits(timeout_seconds=60))
    assert r.cancelled and not r.timed_out and "timeout_seconds:cgroup" in r.limits_enforced
    assert wait_no_leftovers("sleep", marker) == []


# --- network ----------------------------------------------------------------------------------------

def test_tcp_to_loopback_listener_and_postgres_port_refused_with_network_off(ws, listener):
    r = sandbox_exec(command=tcp_command(listener.port) + "; " + tcp_command(5432), workspace=ws,
                     backend="bubblewrap")
    assert r.stdout == "REFUSED\nREFUSED\n"
    assert listener.accepted == 0


def test_network_local_profile_reaches_a_loopback_listener(ws, listener):
    spec = SandboxSpec(backend="bubblewrap", network=True, network_local=True)
    r = sandbox_exec(command=tcp_command(listener.port) + "; test -e /etc/resolv.conf && echo RESOLV", workspace=ws,
                     spec=spec)
    assert listener.greeting.decode() in r.stdout and "CONNECTED" in r.stdout
    assert "RESOLV" in r.stdout
    assert listener.accepted == 1


def test_network_on_without_local_is_refused(ws):
    with pytest.raises(SandboxError, match="cannot restrict network destinations"):
        sandbox_exec(command="touch canary", workspace=ws,
                     spec=SandboxSpec(backend="bubblewrap", network=True, network_local=False))
    assert not (ws / "canary").exists()


# --- failing closed ---------------------------------------------------------------------------------

def test_missing_bwrap_binary_makes_the_backend_unavailable():
    with pytest.raises(SandboxError, match="bubblewrap is not usable: bwrap is not installed"):
        BubblewrapBackend(bwrap_path="/nonexistent/bin/bwrap")


def test_bwrap_setup_failure_fails_closed(ws):
    # The path exists (the server sees it) but lies under pytest's 0700 tmp dir, which the sandbox user can't
    # search: bwrap dies during setup, and the command must not have run.
    hidden = ws.parent / "hidden.txt"
    hidden.write_text("x")
    with pytest.raises(SandboxError, match="could not set up the sandbox"):
        sandbox_exec(command="touch canary", workspace=ws,
                     spec=SandboxSpec(backend="bubblewrap", ro_binds=(str(hidden),)))
    assert not (ws / "canary").exists()


@pytest.fixture
def broken_backends():
    """Replace bubblewrap and docker by backends that can't start; restore the real factories afterwards."""
    def broken_bubblewrap():
        return BubblewrapBackend(bwrap_path="/nonexistent/bin/bwrap")

    def broken_docker():
        raise SandboxError("docker engine not reachable (test)")

    backends.register_backend("bubblewrap", broken_bubblewrap)
    backends.register_backend("docker", broken_docker)
    yield
    backends.register_backend("bubblewrap", backends._bubblewrap_factory)
    backends.register_backend("docker", backends._docker_factory)


def test_auto_never_falls_back_to_host(ws, broken_backends):
    with pytest.raises(SandboxError, match="no sandbox backend is available"):
        sandbox_exec(command="touch canary", workspace=ws)
    with pytest.raises(SandboxError, match="bubblewrap is not usable"):
        sandbox_exec(command="touch canary", workspace=ws, backend="bubblewrap")
    assert not (ws / "canary").exists()


# --- the host backend as root -----------------------------------------------------------------------

def test_host_backend_runs_as_the_sandbox_user_when_root(ws, tmp_path):
    secret_dir = tmp_path / "data"
    secret_dir.mkdir(mode=0o700)
    (secret_dir / "key").write_text("top secret\n")
    r = sandbox_exec(command=f"id -u; id -G; cat /proc/{os.getpid()}/environ >/dev/null 2>&1 && echo ENVIRON_READ; "
                             f"cat {secret_dir}/key 2>/dev/null; echo x > f && echo WROTE",
                     workspace=ws, spec=SandboxSpec(backend="host", profile="off"))
    uid = sandbox_uid()
    assert r.backend == "host" and r.profile == "off"
    assert r.stdout.splitlines() == [str(uid), str(sandbox_identity().gid), "WROTE"]
    assert (ws / "f").read_text() == "x\n"


def test_host_backend_timeout_also_kills_setsid_escapes_through_the_cgroup(ws):
    token = f"hostescape-{secrets.token_hex(6)}"
    r = sandbox_exec(command=f"( setsid sh -c 'trap \"\" TERM HUP; while :; do sleep 1; done' {token} & ); sleep 600",
                     workspace=ws, backend="host", limits=ExecLimits(timeout_seconds=2, grace_seconds=1))
    assert r.timed_out and "timeout_seconds:cgroup" in r.limits_enforced
    assert wait_no_leftovers(token) == []


# --- capabilities and probes ------------------------------------------------------------------------

def test_capabilities_describe_this_machine():
    caps = sandbox_capabilities()
    assert caps["running_as_root"] is True
    assert caps["sandbox_user"]["name"] == SANDBOX_USER and caps["sandbox_user"]["uid"] == sandbox_uid()
    assert caps["bwrap"]["path"] == "/usr/bin/bwrap" and caps["bwrap"]["version"]
    assert set(caps["cgroup"]["controllers"]) == {"pids", "memory"}
    assert caps["backends"]["bubblewrap"] == "available" and caps["backends"]["host"] == "available"
    assert caps["auto_backend"] == "bubblewrap"


def test_run_probes_reports_every_probe_held_for_the_default_bubblewrap_spec(tmp_path):
    results = run_probes(SandboxSpec(backend="bubblewrap"), workspace_parent=tmp_path,
                         hostile_paths={"checkout": "/work/main", "this_test": __file__})
    names = [r.name for r in results]
    assert names[:len(PROBES)] == [p.name for p in PROBES]
    assert "hostile_path:checkout" in names and "hostile_path:fake_data_dir" in names
    assert [r for r in results if not r.held] == []
    assert list(tmp_path.iterdir()) == []  # cleaned up


def test_run_probes_flags_what_a_network_local_profile_opens(tmp_path):
    results = {r.name: r for r in run_probes(SandboxSpec(backend="bubblewrap", network=True, network_local=True),
                                             workspace_parent=tmp_path, hostile_paths={})}
    assert not results["tcp_loopback_refused"].held
    assert results["write_outside_workspace"].held and results["pid_namespace"].held


def test_the_default_environment_names_no_server_path_inside(ws, monkeypatch):
    from sandbox_app.services import DEFAULT_PATH

    monkeypatch.setenv("PATH", os.environ["PATH"] + ":/opt/server-only/bin")
    r = sandbox_exec(argv=["/bin/sh", "-c", 'echo "$PATH"'], workspace=ws, env=safe_child_env(), backend="bubblewrap")
    assert r.stdout.strip() == DEFAULT_PATH
