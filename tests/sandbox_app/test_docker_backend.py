"""The docker backend against a real engine (a private dockerd started by the `docker_engine` fixture).

Real containers, no mocks. Each test says what must hold for a process in the sandbox; none of them
measures time (speed lives in benchmarks/bench_sandbox.py).
"""
from __future__ import annotations

import os
import socket
import subprocess
import threading
import uuid
from pathlib import Path

import pytest

from sandbox_app.backends.docker import LABEL, DockerBackend
from sandbox_app.identity import prepare_workspace, sandbox_identity
from sandbox_app.services import ExecLimits, SandboxError, SandboxSpec, sandbox_exec
from tests.sandbox_app.procs import cancel_once_running, live_pids_with_cmdline, sleep_marker, wait_no_leftovers
from tests.sandbox_app.dockerd import docker_engine  # noqa: F401  (session fixture)

MIB = 1024 * 1024
HOST_SECRET_ENV = "GOCLAW_DOCKER_TEST_SECRET"

pytestmark = pytest.mark.usefixtures("docker_engine")


@pytest.fixture(scope="module")
def backend(docker_engine):  # noqa: F811
    return DockerBackend()


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws


def run(backend, command, workspace, *, argv=None, cwd=None, env=None, stdin=None, spec=None, cancel=None, **limits):
    """One run in the docker backend with the env sandbox_exec would give it (unless `env` is passed)."""
    return backend.run(
        argv=argv or ["/bin/sh", "-c", command], workspace=workspace, cwd=cwd or workspace,
        env=env if env is not None else {"HOME": "/workspace", "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"},
        limits=ExecLimits(**{"timeout_seconds": 20, **limits}), spec=spec or SandboxSpec(backend="docker"),
        stdin=stdin, cancel=cancel,
    )


def sandbox_containers(engine) -> list[dict]:
    return engine.client.api.containers(all=True, filters={"label": LABEL})


# --- basics -----------------------------------------------------------------------------------------

def test_exit_code_stdout_and_stderr_come_back_separately(backend, workspace):
    r = run(backend, "echo out; echo err >&2; exit 3", workspace)
    assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n")
    assert not r.timed_out and r.backend == "docker"


def test_a_signal_is_reported_as_a_negative_exit_code(backend, workspace):
    assert run(backend, "kill -9 $$", workspace).exit_code == -9


def test_stdin_reaches_the_process(backend, workspace):
    r = run(backend, "cat; echo end", workspace, stdin=b"line one\nline two\n")
    assert r.stdout == "line one\nline two\nend\n"


def test_large_stdin_and_large_output_flow_at_the_same_time(backend, workspace):
    payload = (b"0123456789abcdef" * (MIB // 16)) * 3
    r = run(backend, "cat; echo end >&2", workspace, stdin=payload, max_output_bytes=4096)
    assert (r.exit_code, r.stderr, r.stdout_truncated) == (0, "end\n", True)
    assert r.stdout == payload[:4096].decode()


def test_concurrent_runs_share_one_backend(backend, workspace):
    results: dict[int, str] = {}

    def one(i: int) -> None:
        results[i] = run(backend, f"echo run-{i}; sleep 0.2", workspace).stdout

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: f"run-{i}\n" for i in range(4)}


def test_the_image_has_sh_bash_and_only_the_expected_users(docker_engine, backend, workspace):  # noqa: F811
    identity = sandbox_identity()
    r = run(backend, "cut -d: -f1,3 /etc/passwd; bash -c 'echo bash $BASH_VERSINFO'; id -un", workspace,
            env={"HOME": "/workspace", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"})
    expected_users = ["root:0", "nobody:65534"] + ([f"{identity.name}:{identity.uid}"]
                                                   if identity.uid != 65534 else [])
    assert r.stdout.split("\n")[:-3] == expected_users
    assert r.stdout.split("\n")[-3].startswith("bash 5")
    assert r.stderr == ""  # no locale warning from bash: the image carries C.UTF-8
    assert docker_engine.image.applets > 100 and docker_engine.image.uid == identity.uid


def test_cwd_maps_into_the_workspace_and_must_lie_inside_it(backend, workspace, tmp_path):
    (workspace / "sub" / "dir").mkdir(parents=True)
    assert run(backend, "pwd", workspace, cwd=workspace / "sub" / "dir").stdout == "/workspace/sub/dir\n"
    with pytest.raises(SandboxError, match="outside the workspace"):
        run(backend, "pwd", workspace, cwd=tmp_path)


def test_sandbox_exec_routes_a_docker_spec_to_the_container(docker_engine, workspace):  # noqa: F811
    r = sandbox_exec(command="echo $HOME; pwd; cat /etc/os-release | head -1", workspace=workspace,
                     spec=SandboxSpec(backend="docker", profile="p"), limits=ExecLimits(timeout_seconds=20))
    assert r.stdout == '/workspace\n/workspace\nNAME="goclaw sandbox"\n'
    assert (r.backend, r.profile) == ("docker", "p")


# --- who the process is and what it can touch ----------------------------------------------------------

def test_runs_as_the_unprivileged_sandbox_user_with_no_capabilities(backend, workspace):
    identity = sandbox_identity()
    r = run(backend, "id -u; id -g; grep -E '^Cap(Eff|Prm|Bnd):' /proc/self/status; grep NoNewPrivs /proc/self/status",
            workspace)
    lines = r.stdout.split("\n")
    assert lines[0] == str(identity.uid) and lines[1] == str(identity.gid)
    assert identity.uid != 0
    assert all(line.endswith("0000000000000000") for line in lines[2:5]), r.stdout
    assert lines[5].split() == ["NoNewPrivs:", "1"]


def test_writing_outside_the_workspace_fails(backend, workspace):
    r = run(backend, "for p in /x /etc/x /usr/x /bin/x /root/x /var/x /home/x; do "
                     "echo data > $p 2>/dev/null && echo WROTE $p; done; echo ok > /workspace/inside && echo in",
            workspace)
    assert "WROTE" not in r.stdout
    assert r.stdout == "in\n"
    assert (workspace / "inside").read_text() == "ok\n"


def test_host_secrets_data_dir_and_other_workspaces_are_unreachable(backend, workspace, tmp_path):
    secret = f"secret-{uuid.uuid4().hex}"
    marker = f"marker-{uuid.uuid4().hex}"
    data_dir = tmp_path / "goclaw-data"
    data_dir.mkdir(mode=0o700)
    (data_dir / marker).write_text(secret)
    other = tmp_path / "other-workspace"
    other.mkdir()
    prepare_workspace(other, sandbox_identity())  # owned by the sandbox user, as a real workspace would be
    (other / marker).write_text(secret)
    os.chown(other / marker, sandbox_identity().uid, sandbox_identity().gid)
    shadow_first = Path("/etc/shadow").read_text().splitlines()[0]
    host_root_names = set(os.listdir("/root"))

    r = run(backend, f"cat /etc/shadow; cat {data_dir}/{marker}; cat {other}/{marker}; "
                     f"cat /workspace/../{other.name}/{marker}; "
                     f"find / -path /proc -prune -o -path /sys -prune -o -path /dev -prune -o -name '{marker}' -print "
                     f"2>/dev/null; grep -rs {secret} /etc /root /home /var /tmp /run /workspace; echo done",
            workspace)
    assert r.stdout == "done\n"
    assert secret not in r.stderr
    assert r.stderr.count("No such file or directory") == 4  # the host's paths do not exist in there
    assert shadow_first not in r.stdout + r.stderr
    listed = set(run(backend, "ls -a /root 2>/dev/null", workspace).stdout.split()) - {".", ".."}
    assert not (listed & host_root_names)


def test_other_processes_environment_is_unreachable(backend, workspace):
    secret = f"environ-{uuid.uuid4().hex}"
    victim = subprocess.Popen(["sleep", "60"], env={"PATH": "/usr/bin:/bin", HOST_SECRET_ENV: secret})
    try:
        r = run(backend, f"cat /proc/{victim.pid}/environ; for f in /proc/[0-9]*/environ; do cat $f; done; "
                         "echo; ls -d /proc/[0-9]* | wc -l", workspace)
        assert secret not in r.stdout + r.stderr
        # only the container's own processes are visible (docker-init, sh, ls, wc, ...)
        assert int(r.stdout.split()[-1]) < 10
    finally:
        victim.kill()
        victim.wait()


def test_the_environment_is_exactly_what_was_given(backend, workspace, monkeypatch):
    monkeypatch.setenv(HOST_SECRET_ENV, "must-not-leak")
    given = {"HOME": "/workspace", "LANG": "C.UTF-8", "ONLY_THIS": "value with spaces=and equals"}
    r = run(backend, "", workspace, argv=["/usr/bin/env"], env=given)
    assert dict(line.split("=", 1) for line in r.stdout.splitlines()) == given


def test_files_written_in_the_workspace_are_usable_by_the_server(backend, workspace):
    identity = sandbox_identity()
    r = run(backend, "mkdir -p out/deep && echo payload > out/deep/file && chmod 600 out/deep/file", workspace)
    assert r.exit_code == 0, r.stderr
    produced = workspace / "out" / "deep" / "file"
    assert (produced.stat().st_uid, produced.stat().st_gid) == (identity.uid, identity.gid)
    assert produced.read_text() == "payload\n"
    with open(produced, "a") as fh:  # the server (root here) can write and clean up what the sandbox made
        fh.write("more\n")
    assert produced.read_text() == "payload\nmore\n"
    produced.unlink()
    (workspace / "out" / "deep").rmdir()


def test_read_only_binds_are_visible_and_read_only(backend, workspace, tmp_path):
    shared = tmp_path / "shared-tools"
    shared.mkdir()
    (shared / "tool.txt").write_text("tool\n")
    r = run(backend, f"cat {shared}/tool.txt; echo x > {shared}/new 2>/dev/null || echo refused", workspace,
            spec=SandboxSpec(backend="docker", ro_binds=(str(shared),)))
    assert r.stdout == "tool\nrefused\n"
    assert not (shared / "new").exists()


def test_ro_binds_cannot_cover_the_workspace_or_system_mounts(backend, workspace):
    for path in ("/", "/workspace", "/proc/self", "/tmp", "relative/path"):
        with pytest.raises(SandboxError):
            run(backend, "true", workspace, spec=SandboxSpec(backend="docker", ro_binds=(path,)))


# --- network ----------------------------------------------------------------------------------------

def test_tcp_to_a_host_loopback_listener_is_refused_with_network_off(backend, workspace):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    port = listener.getsockname()[1]
    try:
        r = run(backend, f"echo hello | nc -w 2 127.0.0.1 {port}; echo rc=$?; "
                         "ls /sys/class/net", workspace)
        assert "rc=0" not in r.stdout
        assert r.stdout.split("\n")[-2] == "lo"  # the only interface
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):  # nothing ever connected
            listener.accept()
    finally:
        listener.close()


def test_network_without_local_access_is_refused(backend, workspace):
    with pytest.raises(SandboxError, match="without local access"):
        run(backend, "true", workspace, spec=SandboxSpec(backend="docker", network=True, network_local=False))


# --- limits -----------------------------------------------------------------------------------------

def test_output_is_capped_per_stream_and_the_rest_drained(backend, workspace):
    r = run(backend, "yes | head -c 5000000; yes e | head -c 3000000 >&2; echo tail-done >&2", workspace,
            max_output_bytes=4096)
    assert r.exit_code == 0 and not r.timed_out
    assert len(r.stdout) == 4096 and r.stdout_truncated
    assert len(r.stderr) == 4096 and r.stderr_truncated


def test_fork_bomb_is_contained_and_the_host_stays_responsive(backend, workspace):
    host_runs: list[int] = []
    stop = threading.Event()

    def host_keeps_working():
        while not stop.is_set():
            host_runs.append(subprocess.run(["true"]).returncode)

    watcher = threading.Thread(target=host_keeps_working)
    watcher.start()
    try:
        # Counting needs no fork once the pids are gone: `set -- /proc/[0-9]*` is a shell builtin glob.
        counted = run(backend, "(for i in $(seq 1 200); do sleep 30 & done) 2>/dev/null; "
                               "set -- /proc/[0-9]*; echo $#", workspace, max_processes=32, timeout_seconds=10)
        bomb = run(backend, "b() { b | b & }; b; sleep 30", workspace, max_processes=64, timeout_seconds=3,
                   grace_seconds=1)
    finally:
        stop.set()
        watcher.join()
    assert "max_processes:cgroup" in counted.limits_enforced
    assert 20 < int(counted.stdout.split()[-1]) <= 32 + 1  # it did fork, up to the limit (+ docker-init)
    assert "max_processes:cgroup" in bomb.limits_enforced
    assert host_runs and all(code == 0 for code in host_runs)
    assert run(backend, "echo alive", workspace).stdout == "alive\n"


def test_memory_hog_is_killed_and_reported(backend, workspace):
    r = run(backend, "head -c 400000000 /dev/zero | tail > /dev/null", workspace, memory_bytes=32 * MIB)
    assert r.exit_code == -9
    assert "memory limit" in r.stderr
    assert "memory_bytes:cgroup" in r.limits_enforced


def test_rlimits_on_open_files_file_size_and_cpu_time_hold(backend, workspace):
    r = run(backend, "ulimit -n; head -c 100000 /dev/zero > big; echo rc=$?", workspace,
            max_open_files=64, max_file_bytes=10000)
    assert r.stdout.split("\n")[0] == "64"
    assert (workspace / "big").stat().st_size <= 10000
    assert "rc=0" not in r.stdout
    spin = run(backend, "while :; do :; done", workspace, cpu_seconds=1, timeout_seconds=30)
    assert not spin.timed_out and spin.exit_code in (-24, -9)  # SIGXCPU, then SIGKILL at the hard limit
    assert {"max_open_files:rlimit", "max_file_bytes:rlimit", "cpu_seconds:rlimit"} <= set(
        r.limits_enforced + spin.limits_enforced)


def test_a_sleeping_grandchild_dies_at_the_timeout(backend, workspace):
    marker = str(700000 + uuid.uuid4().int % 99999)
    seen = threading.Event()
    done = threading.Event()

    def watch():
        while not done.is_set() and not seen.is_set():
            if live_pids_with_cmdline("sleep", marker):
                seen.set()
            done.wait(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        r = run(backend, f"(setsid sleep {marker} &); sh -c 'sleep {marker}' & sleep 1000", workspace,
                timeout_seconds=2, grace_seconds=1)
    finally:
        done.set()
        watcher.join()
    assert r.timed_out and r.exit_code is None
    assert seen.is_set()  # the grandchildren did run ...
    assert live_pids_with_cmdline("sleep", marker) == []  # ... and none outlived the run


def test_setting_the_cancel_event_from_another_thread_kills_the_container(docker_engine, backend, workspace):  # noqa: F811
    marker = sleep_marker()
    with cancel_once_running("sleep", marker, count=2) as cancel:
        r = run(backend, f"(setsid sleep {marker} &); sleep {marker}", workspace, cancel=cancel, timeout_seconds=60)
    assert r.cancelled and not r.timed_out and r.exit_code is None
    assert wait_no_leftovers("sleep", marker) == []
    assert sandbox_containers(docker_engine) == []


def test_no_container_is_left_behind(docker_engine, backend, workspace):  # noqa: F811
    run(backend, "true", workspace)
    run(backend, "sleep 100", workspace, timeout_seconds=1, grace_seconds=0)
    with pytest.raises(SandboxError, match="executable not found"):
        run(backend, "", workspace, argv=["/no/such/binary"])
    assert sandbox_containers(docker_engine) == []


# --- failing closed ---------------------------------------------------------------------------------

def test_a_missing_image_is_a_clear_error(backend, workspace):
    with pytest.raises(SandboxError, match=r"docker image goclaw-missing:nope is missing.*sandbox_image"):
        run(backend, "true", workspace, spec=SandboxSpec(backend="docker", image="goclaw-missing:nope"))


def test_an_unreachable_engine_makes_the_docker_backend_unavailable(tmp_path, monkeypatch, workspace):
    dead = tmp_path / "dead.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(dead))
    s.close()  # the path exists, nobody listens: connection refused
    monkeypatch.setenv("DOCKER_HOST", f"unix://{dead}")
    with pytest.raises(SandboxError, match="docker engine not reachable"):
        DockerBackend()

    from sandbox_app import backends

    backends.reset_backend("docker")  # drop any cached instance: the next lookup asks the engine
    try:
        with pytest.raises(SandboxError, match="docker engine not reachable"):
            backends.get_backend("docker")
        with pytest.raises(SandboxError, match="docker engine not reachable"):
            sandbox_exec(command="true", workspace=workspace, spec=SandboxSpec(backend="docker"))
    finally:
        backends.reset_backend("docker")


def test_a_remote_engine_is_refused_without_being_contacted(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "tcp://192.0.2.1:2375")  # TEST-NET-1: nothing is sent there
    with pytest.raises(SandboxError, match="needs a local engine on a unix socket"):
        DockerBackend()
