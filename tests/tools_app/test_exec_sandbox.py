"""The red-team path, replayed through the API: with one agent token and every shell-check rule group switched
off (so only the sandbox stands in the way), `exec` cannot reach the server's environment, its data, the
database, other agents' workspaces or the network; the audit row says where the command ran."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest
from django.conf import settings

from sandbox_app.models import SandboxProfile
from tests.factories import make_agent
from tools_app.models import ToolInvocation
from tools_app.security.shell_check import RULE_GROUPS
from tools_app.services.agents import agent_update

pytestmark = pytest.mark.django_db
NO_SHELL_CHECK = {"shell_disabled_rule_groups": sorted(RULE_GROUPS)}


@pytest.fixture
def hostile(api, agent):
    agent_update(agent=agent, other_config=NO_SHELL_CHECK)

    def run(command: str) -> tuple[dict, ToolInvocation]:
        body = api.post("/api/v1/tools/execute", {"tool": "exec", "arguments": {"command": command}}, format="json").json()
        return body, ToolInvocation.objects.get(pk=body["invocation_id"])

    return run


def test_the_server_environment_is_neither_inherited_nor_readable(hostile, monkeypatch):
    monkeypatch.setenv("GOCLAW_CANARY_SECRET", "canary-8d1f0c")
    body, row = hostile("env; for f in /proc/[0-9]*/environ; do cat $f; done; echo; echo PIDS=$(ls /proc | grep -c '^[0-9]')")
    out = body["for_llm"]
    assert "canary-8d1f0c" not in out and "GOCLAW_CANARY_SECRET" not in out
    assert int(out.split("PIDS=")[1].split()[0]) < 10  # only the sandbox's own processes
    assert "/root" not in out  # not even the names of the server's PATH entries
    assert (row.sandbox_backend, row.sandbox_profile) == ("bubblewrap", "default")


def test_the_data_directory_and_the_checkout_are_invisible(hostile):
    secret = settings.DATA_DIR / "secret-key.txt"
    body, _ = hostile(f"ls -la {settings.DATA_DIR} {settings.BASE_DIR}; cat {secret}; ls /root /home; echo done")
    out = body["for_llm"]
    assert "No such file or directory" in out and "manage.py" not in out and "done" in out


def test_the_database_socket_and_port_cannot_be_reached(hostile):
    db = settings.DATABASES["default"]
    socket_dir = db.get("HOST") or "/tmp"
    body, _ = hostile(f"ls {socket_dir}; bash -c 'echo > /dev/tcp/127.0.0.1/5432' && echo CONNECTED; echo end")
    assert "CONNECTED" not in body["for_llm"] and ".s.PGSQL" not in body["for_llm"]


def test_a_loopback_listener_is_not_reachable_with_network_off(hostile):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        body, _ = hostile(f"bash -c 'echo hi > /dev/tcp/127.0.0.1/{port}' && echo CONNECTED; echo end")
        assert "CONNECTED" not in body["for_llm"]
        with pytest.raises(socket.timeout):
            listener.accept()


def test_another_agents_workspace_is_invisible(hostile):
    other = make_agent()
    other.workspace_path.mkdir(parents=True, exist_ok=True)
    (other.workspace_path / "their-secret.txt").write_text("other-agent-data")
    body, _ = hostile(f"cat {other.workspace_path}/their-secret.txt; ls /; echo end")
    assert "other-agent-data" not in body["for_llm"]


def test_writing_outside_the_workspace_fails_and_inside_works(hostile, agent):
    body, _ = hostile("echo x > /usr/evil; echo x > /etc/evil; echo ok > /workspace/fine.txt; cat /workspace/fine.txt")
    assert "ok" in body["for_llm"]
    assert (agent.workspace_path / "fine.txt").read_text() == "ok\n"


def test_a_profile_with_the_sandbox_off_runs_on_the_host_and_the_audit_says_so(api, agent):
    agent_update(agent=agent, sandbox_profile=SandboxProfile.objects.create(name="trusted-host", backend="host", mode="off"))
    body = api.post("/api/v1/tools/execute", {"tool": "exec", "arguments": {"command": "pwd"}}, format="json").json()
    row = ToolInvocation.objects.get(pk=body["invocation_id"])
    assert (row.sandbox_backend, row.sandbox_profile) == ("host", "trusted-host")
    assert str(agent.workspace_path.resolve()) in body["for_llm"]


def test_calls_that_start_no_process_record_no_sandbox(api):
    body = api.post("/api/v1/tools/execute", {"tool": "datetime", "arguments": {}}, format="json").json()
    row = ToolInvocation.objects.get(pk=body["invocation_id"])
    assert (row.sandbox_backend, row.sandbox_profile) == ("", "")


def _call(api, tool, **arguments):
    return api.post("/api/v1/tools/execute", {"tool": tool, "arguments": arguments}, format="json").json()


def test_what_the_file_tools_write_the_sandbox_can_change_and_the_reverse(api, agent):
    import pwd

    assert _call(api, "write_file", path="src/app.txt", content="v1\n")["status"] == "ok"
    body = _call(api, "exec", command="echo v2 >> src/app.txt && mkdir -p out && echo made > out/r.txt && echo ok")
    assert body["status"] == "ok", body["for_llm"]
    assert (agent.workspace_path / "src" / "app.txt").read_text() == "v1\nv2\n"
    assert _call(api, "read_file", path="out/r.txt")["for_llm"].strip().endswith("made")
    sandbox_uid = pwd.getpwnam("goclaw-sandbox").pw_uid
    assert (agent.workspace_path / "src").stat().st_uid == sandbox_uid  # created by the server, owned by the sandbox


def test_a_workspace_made_before_the_sandbox_is_handed_over_once(api, agent):
    legacy = agent.workspace_path / "old"
    legacy.mkdir(parents=True, mode=0o700)
    (legacy / "notes.txt").write_text("kept\n")
    (agent.workspace_path / "outside").symlink_to("/etc")  # never followed by the hand-over
    body = _call(api, "exec", command="cat old/notes.txt && echo more >> old/notes.txt && echo ok")
    assert body["status"] == "ok", body["for_llm"]
    assert (legacy / "notes.txt").read_text() == "kept\nmore\n"
    assert Path("/etc").stat().st_uid == 0 and Path("/etc/hostname").stat().st_uid == 0  # the link's target kept its owner
