"""`sandbox_stdio_command`: a long-lived process in the bubblewrap sandbox, spoken to over plain pipes (real bwrap)."""
from __future__ import annotations

import pwd
import subprocess
from pathlib import Path

import pytest

from sandbox_app.identity import SANDBOX_USER
from sandbox_app.runs import ExecLimits, SandboxError, SandboxSpec
from sandbox_app.services import safe_child_env
from sandbox_app.stdio import sandbox_stdio_command

# Echo lines back until stdin closes, prefixed with what the process sees of itself.
ECHO_LOOP = (
    "import os, sys\n"
    "for line in sys.stdin:\n"
    "    print(os.getuid(), os.getcwd(), line.strip(), flush=True)\n"
)


@pytest.fixture
def workdir(tmp_path) -> Path:
    """Under pytest's 0700 tmp dir: the sandbox user can't search its ancestors (the gateway path)."""
    path = tmp_path / "wd"
    path.mkdir(mode=0o700)
    return path


def start(argv: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(argv, env=env, cwd="/", stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


def test_the_process_talks_over_clean_pipes_as_the_sandbox_user_in_its_workdir(workdir):
    argv, env = sandbox_stdio_command(argv=["/usr/bin/python3", "-c", ECHO_LOOP], spec=SandboxSpec(backend="bubblewrap"),
                                      workdir=workdir, env=safe_child_env())
    proc = start(argv, env)
    try:
        proc.stdin.write(b"first\n")
        proc.stdin.flush()
        first = proc.stdout.readline()
        proc.stdin.write(b"second\n")
        proc.stdin.flush()
        second = proc.stdout.readline()
        proc.stdin.close()
        rest = proc.stdout.read()
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()

    uid = pwd.getpwnam(SANDBOX_USER).pw_uid
    assert first == f"{uid} /workspace first\n".encode()  # not one byte before the program's own output
    assert second == f"{uid} /workspace second\n".encode()
    assert rest == b""


def test_the_process_sees_only_the_environment_it_was_given(workdir, monkeypatch):
    monkeypatch.setenv("GOCLAW_LEAK_CANARY", "leaked")
    code = "import os, json; print(json.dumps(dict(os.environ)))"
    argv, env = sandbox_stdio_command(argv=["/usr/bin/python3", "-c", code], spec=SandboxSpec(backend="bubblewrap"),
                                      workdir=workdir, env=safe_child_env({"MCP_TOKEN": "t0k"}))
    out = subprocess.run(argv, env=env, cwd="/", capture_output=True, timeout=30).stdout.decode()

    assert '"MCP_TOKEN": "t0k"' in out and "GOCLAW_LEAK_CANARY" not in out
    assert '"HOME": "/workspace"' in out


def test_the_network_is_off_unless_the_spec_turns_it_on(workdir):
    code = ("import socket; s = socket.socket(); s.settimeout(2)\n"
            "try:\n    s.connect(('1.1.1.1', 53)); print('connected')\n"
            "except OSError as e:\n    print('refused', e.errno)")
    argv, env = sandbox_stdio_command(argv=["/usr/bin/python3", "-c", code], spec=SandboxSpec(backend="bubblewrap"),
                                      workdir=workdir, env=safe_child_env())
    out = subprocess.run(argv, env=env, cwd="/", capture_output=True, timeout=30).stdout.decode()

    assert out.startswith("refused")


def test_network_on_without_local_access_is_refused_for_bubblewrap(workdir):
    with pytest.raises(SandboxError, match="cannot restrict network destinations"):
        sandbox_stdio_command(argv=["/usr/bin/true"], spec=SandboxSpec(backend="bubblewrap", network=True),
                              workdir=workdir, env=safe_child_env())


def test_read_only_binds_are_visible_and_not_writable(workdir, tmp_path):
    shared = Path("/tmp") / f"goclaw-stdio-ro-{tmp_path.name}"
    shared.mkdir(mode=0o755, exist_ok=True)
    (shared / "data.txt").write_text("shared")
    (shared / "data.txt").chmod(0o644)
    code = ("import sys; p=sys.argv[1]; print(open(p + '/data.txt').read())\n"
            "try:\n open(p + '/new.txt', 'w')\nexcept OSError as e: print('readonly', e.errno)")
    try:
        argv, env = sandbox_stdio_command(argv=["/usr/bin/python3", "-c", code, str(shared)],
                                          spec=SandboxSpec(backend="bubblewrap", ro_binds=(str(shared),)),
                                          workdir=workdir, env=safe_child_env())
        out = subprocess.run(argv, env=env, cwd="/", capture_output=True, timeout=30).stdout.decode()
    finally:
        (shared / "data.txt").unlink()
        shared.rmdir()

    assert out.splitlines()[0] == "shared" and out.splitlines()[1].startswith("readonly")


def test_limits_become_rlimits_of_the_process(workdir):
    code = "import resource; print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])"
    argv, env = sandbox_stdio_command(argv=["/usr/bin/python3", "-c", code], spec=SandboxSpec(backend="bubblewrap"),
                                      workdir=workdir, env=safe_child_env(), limits=ExecLimits(max_open_files=64))
    out = subprocess.run(argv, env=env, cwd="/", capture_output=True, timeout=30).stdout.decode()

    assert out.strip() == "64"


def test_the_host_backend_starts_the_argv_unchanged(workdir):
    argv, env = sandbox_stdio_command(argv=["/usr/bin/python3", "-V"], spec=SandboxSpec(backend="host"),
                                      workdir=workdir, env={"PATH": "/usr/bin"})

    assert argv == ["/usr/bin/python3", "-V"] and env == {"PATH": "/usr/bin"}


def test_an_unknown_backend_is_refused(workdir):
    with pytest.raises(SandboxError):
        sandbox_stdio_command(argv=["/usr/bin/true"], spec=SandboxSpec(backend="nope"), workdir=workdir,
                              env=safe_child_env())
