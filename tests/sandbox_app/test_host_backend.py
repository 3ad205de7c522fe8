"""sandbox_exec on the host backend (backend="host", a profile with the sandbox switched off), with real
subprocesses (no Django DB, no Django settings)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sandbox_app.services import (
    ExecLimits,
    SandboxError,
    is_secret_env_name,
    safe_child_env,
    sandbox_exec,
)
from tests.sandbox_app.procs import cancel_once_running, sleep_marker, wait_no_leftovers

MIB = 1024 * 1024


def pid_alive(pid: int) -> bool:
    """A zombie (already dead, waiting for a reaper) counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (FileNotFoundError, IndexError):
        return False


def wait_gone(pid: int, seconds: float = 3.0) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return not pid_alive(pid)


# --- exit codes and streams -----------------------------------------------------------------------

def test_exit_code_zero_and_stdout(tmp_path):
    r = sandbox_exec(backend="host", command="echo hello", cwd=tmp_path)
    assert r.exit_code == 0
    assert r.stdout == "hello\n"
    assert r.stderr == ""
    assert not r.timed_out and not r.stdout_truncated and not r.stderr_truncated
    assert r.backend == "host"
    assert r.duration_ms >= 0


def test_exit_code_nonzero_and_stderr(tmp_path):
    r = sandbox_exec(backend="host", command="echo out; echo err >&2; exit 3", cwd=tmp_path)
    assert r.exit_code == 3
    assert r.stdout == "out\n"
    assert r.stderr == "err\n"


def test_signal_reported_as_negative(tmp_path):
    r = sandbox_exec(backend="host", command="kill -9 $$", cwd=tmp_path)
    assert r.exit_code == -9
    assert not r.timed_out


def test_invalid_utf8_is_replaced(tmp_path):
    r = sandbox_exec(backend="host", command=r"printf 'a\377b'", cwd=tmp_path)
    assert r.stdout == "a\ufffdb"


def test_stdout_capped_without_blocking_child(tmp_path):
    r = sandbox_exec(backend="host", command="yes | head -c 5000000; echo done >&2", cwd=tmp_path,
                     limits=ExecLimits(timeout_seconds=30))
    assert r.exit_code == 0, r.stderr
    assert not r.timed_out
    assert r.stdout_truncated
    assert len(r.stdout.encode()) == MIB
    assert r.stderr == "done\n"  # the child ran to completion: it was never blocked on the pipe


def test_stderr_capped_independently(tmp_path):
    r = sandbox_exec(backend="host", command="head -c 300000 /dev/zero | tr '\\0' x >&2; echo ok",
                     cwd=tmp_path, limits=ExecLimits(max_output_bytes=100_000))
    assert r.exit_code == 0
    assert r.stdout == "ok\n" and not r.stdout_truncated
    assert r.stderr_truncated and len(r.stderr) == 100_000


def test_stdin_bytes(tmp_path):
    payload = b"x" * 300_000  # more than a pipe buffer
    r = sandbox_exec(backend="host", argv=["wc", "-c"], cwd=tmp_path, stdin=payload)
    assert r.exit_code == 0 and r.stdout.strip() == "300000"


def test_stdin_defaults_to_devnull(tmp_path):
    r = sandbox_exec(backend="host", command="cat; echo end", cwd=tmp_path, limits=ExecLimits(timeout_seconds=5))
    assert r.stdout == "end\n" and not r.timed_out


# --- timeouts and process groups ------------------------------------------------------------------

def test_timeout_kills_whole_process_group(tmp_path):
    pidfile = tmp_path / "pidfile"
    r = sandbox_exec(backend="host", command="sleep 300 & echo $! > pidfile; sleep 300", cwd=tmp_path,
                     limits=ExecLimits(timeout_seconds=1, grace_seconds=1))
    assert r.timed_out  # killed at the timeout, not after the 300 s sleep (benchmarks/bench_timeouts.py times it)
    assert r.exit_code is None
    grandchild = int(pidfile.read_text())
    assert wait_gone(grandchild), f"grandchild {grandchild} survived the timeout"


def test_timeout_sigkill_after_grace_when_sigterm_ignored(tmp_path):
    r = sandbox_exec(backend="host", command="echo $$ > pidfile; trap '' TERM; echo ready; while :; do sleep 0.1; done",
                     cwd=tmp_path, limits=ExecLimits(timeout_seconds=1, grace_seconds=0.5))
    assert r.timed_out and r.exit_code is None
    assert r.stdout == "ready\n"  # output produced before the timeout is kept
    assert wait_gone(int((tmp_path / "pidfile").read_text())), "the shell ignoring SIGTERM survived the grace period"


def test_background_grandchild_holding_pipes_does_not_hang(tmp_path):
    pidfile = tmp_path / "pidfile"
    r = sandbox_exec(backend="host", command="sleep 100 & echo $! > pidfile; echo main done", cwd=tmp_path,
                     limits=ExecLimits(timeout_seconds=60))
    assert r.exit_code == 0
    assert not r.timed_out  # returned when the main process exited, not when the 60 s timeout fired
    assert r.stdout == "main done\n"
    assert wait_gone(int(pidfile.read_text())), "leftover background process was not killed"


def test_detached_background_process_is_killed_after_main_exits(tmp_path):
    pidfile = tmp_path / "pidfile"
    r = sandbox_exec(backend="host", command="sleep 100 >/dev/null 2>&1 </dev/null & echo $! > pidfile", cwd=tmp_path)
    assert r.exit_code == 0
    assert wait_gone(int(pidfile.read_text()))


def test_setting_the_cancel_event_from_another_thread_kills_the_whole_process_group(tmp_path):
    marker = sleep_marker()
    with cancel_once_running("sleep", marker, count=2) as cancel:
        r = sandbox_exec(backend="host", command=f"sleep {marker} & sleep {marker}", cwd=tmp_path, cancel=cancel,
                         limits=ExecLimits(timeout_seconds=60))
    assert r.cancelled and not r.timed_out and r.exit_code is None
    assert "[sandbox] cancelled" in r.stderr
    assert wait_no_leftovers("sleep", marker) == []


def test_a_cancel_event_already_set_starts_nothing(tmp_path):
    cancel = threading.Event()
    cancel.set()
    r = sandbox_exec(backend="host", command="touch ran", cwd=tmp_path, cancel=cancel)
    assert r.cancelled and r.exit_code is None and "[sandbox] cancelled" in r.stderr
    assert not (tmp_path / "ran").exists()


def test_cancel_must_be_an_event(tmp_path):
    with pytest.raises(SandboxError, match="cancel must be a threading.Event"):
        sandbox_exec(backend="host", command="touch ran", cwd=tmp_path, cancel=True)
    assert not (tmp_path / "ran").exists()


def test_a_run_whose_cancel_event_stays_unset_ends_normally(tmp_path):
    r = sandbox_exec(backend="host", command="echo done", cwd=tmp_path, cancel=threading.Event())
    assert r.exit_code == 0 and r.stdout == "done\n" and not r.cancelled and r.stderr == ""


def test_limits_are_clamped():
    assert ExecLimits(timeout_seconds=0.01).timeout_seconds == 1
    assert ExecLimits(timeout_seconds=10**9).timeout_seconds == 3600
    assert ExecLimits(timeout_seconds=float("nan")).timeout_seconds == 60
    assert ExecLimits(grace_seconds=-5).grace_seconds == 0


# --- environment ----------------------------------------------------------------------------------

def test_env_is_minimal_and_secrets_hidden(tmp_path, monkeypatch):
    monkeypatch.setenv("GOCLAW_TEST_SECRET_TOKEN", "s3cr3t-goclaw")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    monkeypatch.setenv("SOME_HARMLESS_VAR", "harmless")
    r = sandbox_exec(backend="host", command="env; ls / >/dev/null && echo PATH_WORKS", cwd=tmp_path,
                     env=safe_child_env({"HOME": str(tmp_path)}))
    assert r.exit_code == 0
    assert "s3cr3t-goclaw" not in r.stdout and "GOCLAW_TEST_SECRET_TOKEN" not in r.stdout
    assert "sk-should-not-leak" not in r.stdout and "OPENAI_API_KEY" not in r.stdout
    assert "SOME_HARMLESS_VAR" not in r.stdout  # not a copy of the parent env at all
    assert "PATH_WORKS" in r.stdout
    assert f"HOME={tmp_path}" in r.stdout
    assert "LC_ALL=C.UTF-8" in r.stdout and "TERM=dumb" in r.stdout


def test_env_none_means_minimal_env(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    r = sandbox_exec(backend="host", argv=["env"], cwd=tmp_path)
    assert "OPENAI_API_KEY" not in r.stdout and "PATH=" in r.stdout


def test_safe_child_env_rules(monkeypatch):
    monkeypatch.setenv("PATH", "relative/bin::/usr/bin:" + os.environ.get("PATH", ""))
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_x")
    monkeypatch.setenv("MY_VAR", "v")
    env = safe_child_env({"EXPLICIT_API_KEY": "kept", "FOO": "bar"}, strip=["FOO", "TERM"],
                         inherit=["MY_VAR", "GITHUB_TOKEN"])
    assert env["EXPLICIT_API_KEY"] == "kept"  # explicit extra is trusted
    assert "FOO" not in env and "TERM" not in env  # strip wins
    assert env["MY_VAR"] == "v"
    assert "GITHUB_TOKEN" not in env  # inherited but secret-looking
    path = env["PATH"].split(":")
    assert path[:3] == ["/usr/local/bin", "/usr/bin", "/bin"]
    assert all(os.path.isabs(p) for p in path)
    assert env["LANG"] == env["LC_ALL"] == "C.UTF-8"


@pytest.mark.parametrize("name", ["GH_TOKEN", "AWS_SECRET_ACCESS_KEY", "DATABASE_URL", "GOCLAW_ANYTHING",
                                  "MY_PASSWORD", "DB_PASSWD", "STRIPE_API_KEY", "SSH_PRIVATE_KEY",
                                  "GOOGLE_APPLICATION_CREDENTIALS", "SENTRY_DSN", "x_token_y"])
def test_secret_names(name):
    assert is_secret_env_name(name)


@pytest.mark.parametrize("name", ["PATH", "HOME", "LANG", "LC_ALL", "TERM", "TZ", "EDITOR"])
def test_non_secret_names(name):
    assert not is_secret_env_name(name)


# --- argv mode, cwd, errors -----------------------------------------------------------------------

def test_argv_mode_has_no_shell(tmp_path):
    r = sandbox_exec(backend="host", argv=["echo", "$HOME", "a;b", "`id`"], cwd=tmp_path)
    assert r.exit_code == 0
    assert r.stdout == "$HOME a;b `id`\n"


def test_cwd_is_used(tmp_path):
    r = sandbox_exec(backend="host", argv=["pwd", "-P"], cwd=tmp_path)
    assert r.stdout.strip() == os.path.realpath(tmp_path)


def test_missing_cwd_raises(tmp_path):
    with pytest.raises(SandboxError, match="does not exist"):
        sandbox_exec(backend="host", command="true", cwd=tmp_path / "nope")
    assert not (tmp_path / "nope").exists()


def test_relative_cwd_raises():
    with pytest.raises(SandboxError, match="absolute"):
        sandbox_exec(backend="host", command="true", cwd=Path("relative"))


def test_unknown_backend_fails_closed(tmp_path):
    with pytest.raises(SandboxError, match="sandbox backend no-such-backend is not available"):
        sandbox_exec(command="touch canary", cwd=tmp_path, backend="no-such-backend")
    assert not (tmp_path / "canary").exists()


@pytest.mark.parametrize("kwargs", [{}, {"command": "true", "argv": ["true"]}, {"argv": []},
                                    {"command": "   "}, {"command": "echo \x00"}, {"argv": ["echo", "a\x00"]}])
def test_bad_arguments(tmp_path, kwargs):
    with pytest.raises(SandboxError):
        sandbox_exec(backend="host", cwd=tmp_path, **kwargs)


def test_missing_executable(tmp_path):
    with pytest.raises(SandboxError, match="executable not found"):
        sandbox_exec(backend="host", argv=["definitely-not-a-real-binary-xyz"], cwd=tmp_path)


def test_sandbox_app_imports_nothing_from_tools_app():
    code = (
        "import sys, sandbox_app, sandbox_app.services, sandbox_app.backends, sandbox_app.backends.host\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('tools_app', 'teams_app', 'mcp_app', 'django')]\n"
        "assert not bad, bad\n"
    )
    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True, timeout=30)
