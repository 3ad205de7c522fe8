"""The `exec` tool with real processes in the agent's sandbox profile (bubblewrap by default); per-call
settings come from ToolContext.settings, the directory and denied paths from its Workspace, the profile from the
database."""
from __future__ import annotations

import os
import stat
import time

import pytest

from sandbox_app.models import SandboxProfile
from tests.factories import make_agent
from tools_app.base import ToolContext, ToolError
from tools_app.builtin.runtime import TOOLS, ExecTool
from tools_app.registry import ToolRegistry
from tools_app.workspace import Workspace, denied_paths

pytestmark = pytest.mark.django_db


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


@pytest.fixture
def exec_agent(db, workspace):
    return make_agent(workspace=str(workspace))


def make_ctx(workspace, agent=None, denied=(), **settings):
    if agent is None:
        agent = make_agent(workspace=str(workspace))
    ws = Workspace(root=workspace, denied=denied_paths({"denied_paths": list(denied)}), agent_key=agent.key)
    return ToolContext(agent_key=agent.key, agent_id=agent.pk, workspace=ws, settings=settings)


def run(tool, workspace, args, agent=None, denied=(), **settings):
    return tool.run(make_ctx(workspace, agent, denied, **settings), args)


def host_agent(workspace):
    profile = SandboxProfile.objects.create(name="host-off", backend="host", mode="off")
    return make_agent(workspace=str(workspace), sandbox_profile=profile)


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
    agent = make_agent(workspace=str(workspace))
    ctx = make_ctx(workspace, agent)
    assert tool.timeout_for(ctx, {"command": "x"}) >= 300 + 3  # the default profile's timeout
    assert tool.timeout_for(ctx, {"command": "x", "timeout": 60}) >= 63
    # the profile's timeout is also the ceiling
    assert tool.timeout_for(ctx, {"command": "x", "timeout": 3600}) < 320
    assert tool.timeout_for(make_ctx(workspace, agent, exec_timeout_seconds=5), {"command": "x"}) >= 8
    assert tool.timeout_for(make_ctx(workspace, agent, exec_timeout_seconds=5), {"command": "x"}) < 60
    # an administrator's tool_timeouts entry caps the command timeout
    assert tool.timeout_for(make_ctx(workspace, agent, tool_timeouts={"exec": 10}), {"command": "x", "timeout": 600}) < 60


# --- running --------------------------------------------------------------------------------------

def test_success_output_and_exit_line(tool, workspace):
    r = run(tool, workspace, {"command": "echo hello"})
    assert not r.is_error
    assert r.for_llm == "hello\n[exit code 0]"


def test_nonzero_exit_and_stderr(tool, workspace):
    r = run(tool, workspace, {"command": "echo out; echo oops >&2; exit 3"})
    assert r.is_error
    assert r.for_llm == "out\nSTDERR:\noops\n[exit code 3]"


def test_signal_exit_in_the_sandbox_reads_as_a_shell_would(tool, workspace):
    r = run(tool, workspace, {"command": "kill -9 $$"})
    assert r.is_error
    assert r.for_llm.endswith("[exit code 137]")  # bubblewrap reports a signal death as 128+N


def test_signal_exit_on_the_host(tool, workspace):
    r = run(tool, workspace, {"command": "kill -9 $$"}, host_agent(workspace))
    assert r.is_error
    assert r.for_llm.endswith("[exit code -9 (killed by SIGKILL)]")


def test_workspace_created_private_and_is_cwd_and_home(tool, workspace):
    assert not workspace.exists()
    r = run(tool, workspace, {"command": "pwd -P; echo $HOME; id -u"})
    assert not r.is_error, r.for_llm
    cwd, home, uid = r.for_llm.splitlines()[:3]
    assert (cwd, home) == ("/workspace", "/workspace")
    assert uid != "0" and int(uid) == workspace.stat().st_uid  # the sandbox user owns the workspace
    assert stat.S_IMODE(workspace.stat().st_mode) == 0o700
    assert r.sandbox == {"backend": "bubblewrap", "profile": "default"}


def test_host_profile_runs_in_the_real_workspace_and_says_so(tool, workspace):
    r = run(tool, workspace, {"command": "pwd -P; echo $HOME"}, host_agent(workspace))
    real = os.path.realpath(workspace)
    assert r.for_llm == f"{real}\n{real}\n[exit code 0]"
    assert r.sandbox == {"backend": "host", "profile": "host-off"}


def test_working_dir_inside_workspace(tool, workspace):
    (workspace / "sub" / "dir").mkdir(parents=True)
    r = run(tool, workspace, {"command": "pwd -P", "working_dir": "sub/dir"})
    assert r.for_llm.splitlines()[0] == "/workspace/sub/dir"


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
        run(tool, workspace, {"command": "true", "working_dir": "private"}, denied=["private/"])


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
    # 5 s: the sandbox's start counts against the limit, and on a loaded machine "echo started" may come after 1 s
    r = run(tool, workspace, {"command": "sleep 300 & echo $! > pidfile; echo started; sleep 300", "timeout": 5},
            exec_grace_seconds=1)  # benchmarks/bench_timeouts.py measures how soon after the limit it returns
    assert r.is_error
    assert r.for_llm == "started\n[timed out after 5s; process group killed]"
    assert (workspace / "pidfile").read_text().strip().isdigit()  # a pid inside the sandbox's own namespace


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


def test_host_timeout_kills_the_whole_group(tool, workspace):
    workspace.mkdir(parents=True)
    r = run(tool, workspace, {"command": "sleep 300 & echo $! > pidfile; echo started; sleep 300", "timeout": 1},
            host_agent(workspace), exec_grace_seconds=1)
    # (a shell that outlives its child by a moment may add "Terminated" on stderr: not part of the contract)
    assert r.for_llm.startswith("started\n") and r.for_llm.endswith("\n[timed out after 1s; process group killed]")
    assert wait_gone(int((workspace / "pidfile").read_text()))


def test_a_broken_sandbox_fails_closed_and_never_runs_on_the_host(tool, workspace, tmp_path):
    workspace.mkdir(parents=True)
    profile = SandboxProfile.objects.create(name="broken", ro_binds=[str(tmp_path / "no-such-dir")])
    r = run(tool, workspace, {"command": "touch canary"}, make_agent(workspace=str(workspace), sandbox_profile=profile))
    assert r.is_error and r.for_llm.startswith("command not run: ")
    assert r.sandbox == {"backend": "bubblewrap", "profile": "broken"}
    assert not (workspace / "canary").exists()


def test_an_unavailable_docker_engine_fails_closed(tool, workspace, monkeypatch):
    from sandbox_app import backends

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    backends.reset_backend("docker")
    workspace.mkdir(parents=True)
    profile = SandboxProfile.objects.create(name="dock", backend="docker")
    r = run(tool, workspace, {"command": "touch canary"}, make_agent(workspace=str(workspace), sandbox_profile=profile))
    backends.reset_backend("docker")
    assert r.is_error and "docker engine not reachable" in r.for_llm
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


def test_the_agent_config_accepts_and_applies_exec_output_and_grace_settings(tool, workspace):
    agent = make_agent(workspace=str(workspace), other_config={"exec_max_output_bytes": 2048, "exec_grace_seconds": 1})
    r = run(tool, workspace, {"command": "yes | head -c 100000"}, agent, **agent.other_config)
    assert r.for_llm.endswith("[stdout truncated at 2 KiB]\n[exit code 0]")
