"""The `exec` tool with real subprocesses (no Django DB; settings come from ToolContext.settings)."""
from __future__ import annotations

import os
import stat
import time

import pytest

from tools_app.base import ToolContext, ToolError
from tools_app.builtin.runtime import TOOLS, ExecTool
from tools_app.registry import ToolRegistry


def wait_gone(pid: int, seconds: float = 3.0) -> bool:
    """True once `pid` no longer runs (a zombie awaiting its reaper counts as gone)."""
    end = time.monotonic() + seconds
    while True:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.05)


@pytest.fixture
def tool():
    return ExecTool()


@pytest.fixture
def workspace(tmp_path):
    return tmp_path / "agents" / "a1" / "ws"  # does not exist yet: the tool creates it


def make_ctx(workspace, **settings):
    return ToolContext(agent_key="a1", workspace=workspace, settings=settings)


def run(tool, workspace, args, **settings):
    return tool.run(make_ctx(workspace, **settings), args)


# --- metadata -------------------------------------------------------------------------------------

def test_metadata_and_registration():
    tool = TOOLS[0]
    assert isinstance(tool, ExecTool)
    assert tool.name == "exec" and tool.aliases == ("bash",) and tool.group == "runtime"
    assert tool.read_only is False and tool.requires_approval is True
    assert tool.command_argument == "command"
    props = tool.parameters["properties"]
    assert props["command"]["minLength"] == 1 and props["command"]["maxLength"] == 100_000
    assert props["timeout"]["minimum"] == 1 and props["timeout"]["maximum"] == 3600
    reg = ToolRegistry()
    reg.register(tool)  # the schema is valid
    assert reg.get("bash") is tool


def test_timeout_for_covers_command_timeout_plus_grace(tool, workspace):
    ctx = make_ctx(workspace)
    assert tool.timeout_for(ctx, {"command": "x"}) >= 60 + 3
    assert tool.timeout_for(ctx, {"command": "x", "timeout": 600}) >= 603
    assert tool.timeout_for(make_ctx(workspace, exec_timeout_seconds=5), {"command": "x"}) >= 8
    assert tool.timeout_for(make_ctx(workspace, exec_timeout_seconds=5), {"command": "x"}) < 60
    # an administrator's tool_timeouts entry caps the command timeout
    assert tool.timeout_for(make_ctx(workspace, tool_timeouts={"exec": 10}), {"command": "x", "timeout": 600}) < 60


# --- running --------------------------------------------------------------------------------------

def test_success_output_and_exit_line(tool, workspace):
    r = run(tool, workspace, {"command": "echo hello"})
    assert not r.is_error
    assert r.for_llm == "hello\n[exit code 0]"


def test_nonzero_exit_and_stderr(tool, workspace):
    r = run(tool, workspace, {"command": "echo out; echo oops >&2; exit 3"})
    assert r.is_error
    assert r.for_llm == "out\nSTDERR:\noops\n[exit code 3]"


def test_signal_exit(tool, workspace):
    r = run(tool, workspace, {"command": "kill -9 $$"})
    assert r.is_error
    assert r.for_llm.endswith("[exit code -9 (killed by SIGKILL)]")


def test_workspace_created_private_and_is_cwd_and_home(tool, workspace):
    assert not workspace.exists()
    r = run(tool, workspace, {"command": "pwd -P; echo $HOME"})
    assert not r.is_error, r.for_llm
    real = os.path.realpath(workspace)
    assert r.for_llm == f"{real}\n{real}\n[exit code 0]"
    assert stat.S_IMODE(workspace.stat().st_mode) == 0o700


def test_working_dir_inside_workspace(tool, workspace):
    (workspace / "sub" / "dir").mkdir(parents=True)
    r = run(tool, workspace, {"command": "pwd -P", "working_dir": "sub/dir"})
    assert r.for_llm.splitlines()[0] == os.path.realpath(workspace / "sub" / "dir")


@pytest.mark.parametrize("working_dir", ["../", "..", "sub/../../", "/etc", "/", "link_out", "link_out/x"])
def test_working_dir_escape_refused(tool, workspace, working_dir):
    (workspace / "sub").mkdir(parents=True)
    (workspace / "link_out").symlink_to("/etc")
    with pytest.raises(ToolError, match="working_dir"):
        run(tool, workspace, {"command": "touch canary_escape", "working_dir": working_dir})
    assert not (workspace / "canary_escape").exists()
    assert not (workspace.parent / "canary_escape").exists()


def test_working_dir_missing_or_file(tool, workspace):
    workspace.mkdir(parents=True)
    (workspace / "f.txt").write_text("x")
    with pytest.raises(ToolError, match="does not exist"):
        run(tool, workspace, {"command": "true", "working_dir": "nope"})
    with pytest.raises(ToolError, match="not a directory"):
        run(tool, workspace, {"command": "true", "working_dir": "f.txt"})


def test_working_dir_denied_path(tool, workspace):
    (workspace / ".goclaw").mkdir(parents=True)
    (workspace / "private").mkdir()
    with pytest.raises(ToolError, match="working_dir refused"):
        run(tool, workspace, {"command": "true", "working_dir": ".goclaw"})
    with pytest.raises(ToolError, match="working_dir refused"):
        run(tool, workspace, {"command": "true", "working_dir": "private"}, denied_paths=["private/"])


def test_nul_refused(tool, workspace):
    with pytest.raises(ToolError, match="NUL"):
        run(tool, workspace, {"command": "touch canary\x00; echo"})
    assert not workspace.exists() or not (workspace / "canary").exists()


def test_empty_and_oversized_command_refused(tool, workspace):
    with pytest.raises(ToolError):
        run(tool, workspace, {"command": "   "})
    with pytest.raises(ToolError):
        run(tool, workspace, {"command": "x" * 100_001})


def test_denied_command_never_runs(tool, workspace):
    workspace.mkdir(parents=True)
    r = run(tool, workspace, {"command": "touch canary; rm -rf /"})
    assert r.is_error
    assert r.for_llm.startswith("command denied by safety policy: ")
    assert not (workspace / "canary").exists()


def test_timeout_reported_and_group_killed(tool, workspace):
    workspace.mkdir(parents=True)
    start = time.monotonic()
    r = run(tool, workspace, {"command": "sleep 300 & echo $! > pidfile; echo started; sleep 300", "timeout": 1},
            exec_grace_seconds=1)
    assert time.monotonic() - start < 8
    assert r.is_error
    assert r.for_llm == "started\n[timed out after 1s; process group killed]"
    assert wait_gone(int((workspace / "pidfile").read_text()))


def test_default_timeout_from_settings(tool, workspace):
    r = run(tool, workspace, {"command": "sleep 30"}, exec_timeout_seconds=1, exec_grace_seconds=0)
    assert r.is_error and "[timed out after 1s; process group killed]" in r.for_llm


def test_output_truncation_note(tool, workspace):
    r = run(tool, workspace, {"command": "yes | head -c 5000000"})
    assert not r.is_error
    assert r.for_llm.endswith("[stdout truncated at 1 MiB]\n[exit code 0]")
    assert len(r.for_llm) > 1024 * 1024  # no 30k truncation here: the pipeline's budget does that


def test_env_hides_parent_secrets(tool, workspace, monkeypatch):
    monkeypatch.setenv("GOCLAW_TEST_SECRET_TOKEN", "tok-should-not-leak")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    # `env` alone is refused by the env_dump rule group; disable it to look at the environment.
    assert run(tool, workspace, {"command": "env"}).for_llm.startswith("command denied by safety policy")
    r = run(tool, workspace, {"command": "env"}, shell_disabled_rule_groups=["env_dump"])
    assert not r.is_error, r.for_llm
    assert "should-not-leak" not in r.for_llm
    assert "GOCLAW_TEST_SECRET_TOKEN" not in r.for_llm and "OPENAI_API_KEY" not in r.for_llm
    assert "PATH=" in r.for_llm


def test_unknown_backend_fails_closed(tool, workspace):
    workspace.mkdir(parents=True)
    with pytest.raises(ToolError, match="sandbox backend bwrap-missing is not available"):
        run(tool, workspace, {"command": "touch canary"}, sandbox_backend="bwrap-missing")
    assert not (workspace / "canary").exists()


def test_disabled_rule_groups_are_passed(tool, workspace, monkeypatch):
    seen = {}

    class Verdict:
        verdict, observe, reasons, groups = "allow", False, [], ()

    def fake_check(command, disabled_groups=frozenset()):
        seen["args"] = (command, disabled_groups)
        return Verdict()

    import tools_app.security.shell_check as shell_check

    monkeypatch.setattr(shell_check, "check_command", fake_check)
    run(tool, workspace, {"command": "true"}, shell_disabled_rule_groups=["network"])
    assert seen["args"] == ("true", frozenset({"network"}))
