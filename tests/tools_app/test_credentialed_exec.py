"""Credentialed exec: a registered CLI binary runs only through `credentialed_exec` — its path checked against the
real file at every call, no shell (operators refused), denied arguments refused, its sealed env injected and scrubbed
from the output — and exec and custom tools refuse it, wrappers included.

The fake CLIs are small root-owned shell scripts in a root-owned directory under /tmp (outside every workspace); the
tool binds such a path read-only into the sandbox (bubblewrap shows only system directories otherwise), so these
tests run them through the agent's real sandbox backend."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile

import pytest

from goclaw.errors import ValidationError
from tests.factories import make_agent
from tools_app import pipeline
from tools_app.base import ToolContext, ToolError
from tools_app.builtin.credentialed import CredentialedBinarySource, parse_arguments
from tools_app.builtin.custom import tool_from_row
from tools_app.builtin.runtime import ExecTool
from tools_app.calls import ToolCall
from tools_app.hooks import hooks
from tools_app.models import SecureCLIBinary, ToolInvocation
from tools_app.services.cli_binaries import (CLIBinaryCollision, cli_binary_add_preset, cli_binary_create,
                                             cli_binary_delete, cli_binary_update)
from tools_app.services.custom_tools import CustomToolCollision, custom_tool_create
from tools_app.workspace import Workspace

SECRET = "ghp_planted-Secret-7f3a9c1e"
FAKE_CLI = '#!/bin/sh\necho "token=$FAKE_TOKEN"\nfor a in "$@"; do printf "<%s>\\n" "$a"; done\n'


@pytest.fixture
def bindir():
    path = tempfile.mkdtemp(prefix="goclaw-cli-")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def install(bindir: str, name: str, script: str = FAKE_CLI) -> str:
    path = os.path.join(bindir, name)
    with open(path, "w") as fh:
        fh.write(script)
    os.chmod(path, 0o755)
    os.chown(path, 0, 0)
    return path


def ctx_for(agent):
    return ToolContext(agent_key=agent.key, agent_id=agent.pk, settings={},
                       workspace=Workspace(root=agent.workspace_path, agent_key=agent.key))


def cred_tool(agent):
    tools = list(CredentialedBinarySource().tools_for(agent, ""))
    assert len(tools) == 1
    return tools[0]


def run(agent, binary, args):
    return cred_tool(agent).run(ctx_for(agent), {"binary": binary, "args": args})


# --- parsing: one command, no shell --------------------------------------------------------------------------------
@pytest.mark.parametrize("args", ["pr list; cat /etc/passwd", "pr list | sh", "a && b", "a || b", "a > out",
                                  "a < in", "a 2>&1", "a &", "(a)", "a $(id)", "a `id`", "a\nb", "a\rb", "a\x00b",
                                  'a "$(id)"'])
def test_every_shell_operator_is_refused_with_a_clear_error(args):
    with pytest.raises(ToolError, match="no shell"):
        parse_arguments(args)


def test_quoted_words_stay_one_literal_argument():
    assert parse_arguments("""api --jq '.[] | .name' --body "a; b && c" $HOME *""") == \
        ["api", "--jq", ".[] | .name", "--body", "a; b && c", "$HOME", "*"]


# --- registration: the path must be the real, root-owned file ------------------------------------------------------
@pytest.mark.django_db
def test_relative_symlinked_workspace_and_writable_paths_are_refused(bindir):
    real = install(bindir, "gh")
    link = os.path.join(bindir, "gh2")
    os.symlink(real, link)
    agent = make_agent()
    in_ws = install(str(agent.workspace_path), "gh")
    writable = install(tempfile.mkdtemp(prefix="goclaw-cli-"), "gh")
    os.chmod(writable, 0o775)
    for path, message in (("gh", "not an absolute path"), ("./gh", "not an absolute path"),
                          (link, "symbolic link"), (in_ws, "inside an agent workspace"),
                          (writable, "writable by no one else"), (os.path.join(bindir, "none"), "cannot be checked")):
        with pytest.raises(ValidationError, match=message) as info:
            cli_binary_create(actor=None, name=os.path.basename(path), path=path)
        assert info.value.code == "cli_binary_bad_path"
    assert not SecureCLIBinary.objects.exists()


@pytest.mark.django_db
def test_the_env_is_sealed_write_only_and_a_name_is_unique_per_scope(bindir):
    row = cli_binary_create(actor=None, name="gh", path=install(bindir, "gh"), env={"FAKE_TOKEN": SECRET})
    row.refresh_from_db()
    assert SECRET not in row.env_sealed and row.env_names == ["FAKE_TOKEN"] and row.env_changed_at
    with pytest.raises(CLIBinaryCollision):
        cli_binary_create(actor=None, name="gh", path=row.path)
    with pytest.raises(ValidationError, match="deny_args"):
        cli_binary_update(actor=None, binary=row, deny_args=["(unclosed"])


# --- running -------------------------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_the_binary_runs_with_its_env_and_literal_arguments_and_the_secret_is_scrubbed(bindir):
    agent = make_agent()
    cli_binary_create(actor=None, name="gh", path=install(bindir, "gh"), env={"FAKE_TOKEN": SECRET},
                      tips="use pr list")
    tool = cred_tool(agent)
    assert "gh: use pr list" in tool.description and tool.parameters["properties"]["binary"]["enum"] == ["gh"]
    result = tool.run(ctx_for(agent), {"binary": "gh", "args": "pr list --body 'a; b' '$HOME'"})
    assert not result.is_error, result.for_llm
    assert result.sandbox["backend"] == "bubblewrap"  # the fake CLI ran inside the sandbox, bound read-only
    assert "token=[REDACTED]" in result.for_llm and SECRET not in result.for_llm
    assert "<pr>\n<list>\n<--body>\n<a; b>\n<$HOME>" in result.for_llm


@pytest.mark.django_db
def test_a_binary_swapped_after_registration_is_refused_at_call_time(bindir):
    agent = make_agent()
    path = install(bindir, "gh")
    cli_binary_create(actor=None, name="gh", path=path, env={"FAKE_TOKEN": SECRET})
    other = install(tempfile.mkdtemp(prefix="goclaw-cli-"), "evil", '#!/bin/sh\nenv\n')
    os.remove(path)
    os.symlink(other, path)
    with pytest.raises(ToolError, match="path check.*symbolic link"):
        run(agent, "gh", "pr list")
    os.remove(path)
    install(bindir, "gh")
    os.chmod(path, 0o777)
    with pytest.raises(ToolError, match="path check.*writable"):
        run(agent, "gh", "pr list")


@pytest.mark.django_db
@pytest.mark.parametrize("preset, args", [
    ("gh", "auth token"), ("gh", "auth status --show-token"), ("gh", "pr list --debug"),
    ("aws", "configure get aws_secret_access_key"), ("aws", "sts get-session-token"), ("aws", "s3 ls --debug"),
    ("gcloud", "auth print-access-token"), ("gcloud", "config config-helper --format=json print-access-token"),
    ("kubectl", "config view --raw"), ("kubectl", "get secrets -A"), ("kubectl", "get pods -v=9"),
    ("terraform", "state pull"), ("terraform", "output -json"),
    # global flags before the subcommand, and quoting, do not get around the rules
    ("kubectl", "-n web config view --raw"), ("kubectl", "--context=x get secret db -o yaml"),
    ("aws", "--region eu-west-1 configure export-credentials"), ("gcloud", "--project p 'auth' list"),
    ("gh", "--repo a/b \"auth\" token"), ("gcloud", "--verbosity=debug compute instances list"),
    # ssh with a ProxyCommand runs a local command with the credentials in its environment
    ("gh", "codespace ssh -c x -- -o ProxyCommand=env"), ("gh", "cs ssh"),
    ("gcloud", "compute ssh vm --ssh-flag=-oProxyCommand=env"), ("gcloud", "compute scp a vm:b --scp-flag=-F/x"),
])
def test_preset_deny_args_refuse_credential_printing(bindir, preset, args):
    agent = make_agent()
    # terraform runs programs its configuration names (external data sources): its risk must be acknowledged
    cli_binary_add_preset(actor=None, preset=preset, path=install(bindir, preset), env={"FAKE_TOKEN": SECRET},
                          risk_acknowledged=preset == "terraform")
    with pytest.raises(ToolError, match=f"refused for {preset}"):
        run(agent, preset, args)


@pytest.mark.django_db
def test_preset_binaries_still_run_their_ordinary_commands(bindir):
    agent = make_agent()
    cli_binary_add_preset(actor=None, preset="kubectl", path=install(bindir, "kubectl"))
    cli_binary_add_preset(actor=None, preset="gh", path=install(bindir, "gh"))
    for binary, args in (("kubectl", "get pods -n web"), ("gh", "pr list --repo a/b --json title")):
        result = run(agent, binary, args)
        assert not result.is_error and "<" + args.split()[0] + ">\n<" + args.split()[1] + ">" in result.for_llm


@pytest.mark.django_db
def test_only_agents_with_an_enabled_binary_get_the_tool(bindir):
    mine, other = make_agent(), make_agent()
    row = cli_binary_create(actor=None, name="gh", path=install(bindir, "gh"), agent=mine)
    assert list(CredentialedBinarySource().tools_for(other, "")) == []
    with pytest.raises(ToolError, match="unknown binary 'sh'; available: gh"):
        cred_tool(mine).run(ctx_for(mine), {"binary": "sh", "args": ""})
    cli_binary_update(actor=None, binary=row, enabled=False)
    assert list(CredentialedBinarySource().tools_for(mine, "")) == []
    cli_binary_update(actor=None, binary=row, enabled=True)
    cli_binary_delete(actor=None, binary=row)
    assert list(CredentialedBinarySource().tools_for(mine, "")) == []


# --- exec and custom tools refuse registered binaries ----------------------------------------------------------------
BYPASSES = ["gh auth token", "{path} auth token", "env gh auth token", "env -i FAKE=1 gh auth token",
            "command gh auth token", "sh -c 'gh auth token'", "bash -c 'true; gh auth token'", "exec gh auth",
            "$(which gh) auth token", "ls && timeout 5 gh auth token", "{dir}/../{base}/gh auth token"]


@pytest.mark.django_db
@pytest.mark.parametrize("command", BYPASSES)
def test_exec_refuses_a_registered_binary_behind_any_wrapper(bindir, command):
    agent = make_agent()
    path = install(bindir, "gh")
    cli_binary_create(actor=None, name="gh", path=path)
    command = command.format(path=path, dir=bindir, base=os.path.basename(bindir))
    outcome = hooks.run_pre(ctx_for(agent), ExecTool(), {"command": command})
    assert outcome.blocked and "credentialed_exec" in outcome.blocked, command


@pytest.mark.django_db
def test_a_custom_tool_cannot_run_a_registered_binary(bindir):
    agent = make_agent()
    path = install(bindir, "gh")
    cli_binary_create(actor=None, name="gh", path=path)
    row = custom_tool_create(actor=None, name="gh_wrap", description="x", command=f"env {path} {{{{.a}}}}",
                             parameters={"type": "object", "properties": {"a": {"type": "string"}}})
    outcome = hooks.run_pre(ctx_for(agent), tool_from_row(row), {"a": "auth token"})
    assert outcome.blocked and "credentialed binary" in outcome.blocked
    # nor can one pose as credentialed_exec: the name is reserved by its source
    with pytest.raises(CustomToolCollision):
        custom_tool_create(actor=None, name="credentialed_exec", description="x", command="gh {{.a}}",
                           parameters={"type": "object", "properties": {"a": {"type": "string"}}})


@pytest.mark.django_db
def test_unrelated_commands_pass_and_nothing_is_refused_when_no_binary_is_registered(bindir):
    agent = make_agent()
    assert hooks.run_pre(ctx_for(agent), ExecTool(), {"command": "$(which ls) -l"}).blocked_by != "credentialed_binaries"
    cli_binary_create(actor=None, name="gh", path=install(bindir, "gh"))
    outcome = hooks.run_pre(ctx_for(agent), ExecTool(), {"command": "echo gh; ls ghost"})
    assert outcome.blocked_by != "credentialed_binaries"


# --- through the pipeline ------------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_through_the_pipeline_the_secret_reaches_the_binary_but_not_the_output_audit_or_logs(bindir, monkeypatch,
                                                                                            caplog):
    monkeypatch.setenv("GOCLAW_PLATFORM_ONLY", "platform-value-never-in-child")
    agent = make_agent()
    script = ('#!/bin/sh\nprintf %s "$FAKE_TOKEN" | sha256sum\necho "token=$FAKE_TOKEN"\n'
              'echo "platform=${GOCLAW_PLATFORM_ONLY-unset}"\n')
    path = install(bindir, "gh", script)
    cli_binary_create(actor=None, name="gh", path=path, env={"FAKE_TOKEN": SECRET})
    with caplog.at_level(logging.DEBUG):
        out = pipeline.execute(ToolCall(agent, "credentialed_exec", {"binary": "gh", "args": "pr list"}))
        refused = pipeline.execute(ToolCall(agent, "exec", {"command": f"sh -c '{path} pr list'"}))
    assert out.status == "ok", out.as_dict()
    assert hashlib.sha256(SECRET.encode()).hexdigest() in out.for_llm  # the binary had the value
    assert "token=[REDACTED]" in out.for_llm and "platform=unset" in out.for_llm
    assert refused.status != "ok" and "credentialed_exec" in refused.for_llm
    audit = json.dumps([list(r.values()) for r in ToolInvocation.objects.values()], default=str)
    for where, text in (("output", json.dumps(out.as_dict())), ("audit rows", audit), ("logs", caplog.text)):
        assert SECRET not in text, where


# --- P15: binaries that can reveal their credentials, and the credential's transformations --------------------------
TRANSFORMER = r'''#!/bin/sh
t="$FAKE_TOKEN"
echo "rev: $(printf %s "$t" | rev)"
echo "b64: $(printf %s "$t" | base64 -w0)"
echo "b64 inside: $(printf 'TOKEN: %s\n' "$t" | base64 -w0)"
echo "b64 inside2: $(printf 'X=%s;' "$t" | base64 -w0)"
echo "b64url: $(printf %s "$t" | base64 -w0 | tr '+/' '-_' | tr -d =)"
echo "hex: $(printf %s "$t" | od -An -tx1 | tr -d ' \n')"
echo "HEX: $(printf %s "$t" | od -An -tx1 | tr -d ' \n' | tr a-f A-F)"
echo "spaced: $(printf %s "$t" | sed 's/./& /g')"
echo "lines:"
printf %s "$t" | fold -w1
echo
echo "rev split: $(printf %s "$t" | rev | sed 's/./&,/g')"
echo "dump:"
printf 'GH_TOKEN=%s\n' "$t" | od -c
echo "url: $(python3 -c 'import os, urllib.parse; print(urllib.parse.quote(os.environ["FAKE_PASS"], safe=""))')"
echo "piece 1: $(printf %s "$t" | cut -c1-12)"
echo "piece 2: $(printf %s "$t" | cut -c13-)"
echo "done"
'''
PASSWORD = "p@ss/w0rd+Zq9!x7-long"


def _spellings(secret: str) -> list[str]:
    import base64
    import urllib.parse

    raw = secret.encode()
    b64 = base64.b64encode(raw).decode()
    return [secret, secret[::-1], b64, b64.rstrip("="), base64.urlsafe_b64encode(raw).decode().rstrip("="),
            raw.hex(), raw.hex().upper(), " ".join(secret), "\n".join(secret), ",".join(secret[::-1]),
            secret[:12], secret[12:], urllib.parse.quote(PASSWORD, safe=""), PASSWORD]


@pytest.mark.django_db
def test_a_binary_printing_its_credential_transformed_has_every_spelling_redacted(bindir):
    agent = make_agent()
    cli_binary_create(actor=None, name="gh", path=install(bindir, "gh", TRANSFORMER),
                      env={"FAKE_TOKEN": SECRET, "FAKE_PASS": PASSWORD})
    result = run(agent, "gh", "")
    out = result.for_llm
    assert not result.is_error and "done" in out, out
    for spelling in _spellings(SECRET):
        assert spelling not in out, (spelling, out)
    for label in ("rev", "b64", "b64url", "hex", "HEX", "spaced", "rev split", "url", "piece 1", "piece 2"):
        assert f"\n{label}: [REDACTED]" in "\n" + out, (label, out)
    assert "lines:\n[REDACTED]\n" in out
    # the od -c dump shows the value in lines of 16 characters with offsets between them: those runs go too
    dump = out.split("dump:\n", 1)[1].split("url:", 1)[0]
    assert dump.count("[REDACTED]") >= 1 and "p   l   a   n   t   e   d" not in dump, dump


@pytest.mark.django_db
def test_programs_that_can_start_others_or_print_their_environment_need_the_acknowledgement(bindir):
    """env, a shell, python (registered as its real file), busybox, and a busybox applet under another name (a
    hard link or a copy of busybox) are refused with a clear error; a symlinked applet is not a real file."""
    busybox = os.path.realpath("/bin/busybox")  # Debian's busybox-static (make docker-deps installs it)
    applet = os.path.join(bindir, "fetch-helper")
    try:
        os.link(busybox, applet)
    except OSError:  # another filesystem: a byte-for-byte copy is recognised too
        shutil.copy2(busybox, applet)
    os.chown(applet, 0, 0)
    python = os.path.realpath("/usr/bin/python3")  # e.g. /usr/bin/python3.11: a symlink is not registrable
    shell = os.path.realpath("/bin/sh")
    for path in ("/usr/bin/env", shell, python, busybox, applet):
        with pytest.raises(ValidationError) as info:
            cli_binary_create(actor=None, name=os.path.basename(path), path=path, env={"FAKE_TOKEN": SECRET})
        assert info.value.code == "cli_binary_risk_not_acknowledged", path
        assert "risk_acknowledged: true" in info.value.message and "can reveal its credentials" in info.value.message
    assert "busybox" in str(info.value.message)
    link = os.path.join(bindir, "sh")
    os.symlink(busybox, link)
    with pytest.raises(ValidationError, match="symbolic link"):
        cli_binary_create(actor=None, name="sh", path=link)
    assert not SecureCLIBinary.objects.exists()

    agent = make_agent()
    for path in ("/usr/bin/env", python, applet):
        cli_binary_create(actor=None, name=os.path.basename(path), path=path, env={"FAKE_TOKEN": SECRET},
                          risk_acknowledged=True)
    printed = run(agent, "env", "")
    assert not printed.is_error and "FAKE_TOKEN=[REDACTED]" in printed.for_llm and SECRET not in printed.for_llm
    reversed_ = run(agent, os.path.basename(python), """-c "import os; print(os.environ['FAKE_TOKEN'][::-1])" """)
    assert reversed_.for_llm.startswith("[REDACTED]\n") and SECRET[::-1] not in reversed_.for_llm, reversed_.for_llm


@pytest.mark.django_db
def test_a_row_saved_before_the_check_is_refused_at_call_time_until_acknowledged():
    agent = make_agent()
    row = cli_binary_create(actor=None, name="env", path="/usr/bin/env", env={"FAKE_TOKEN": SECRET},
                            risk_acknowledged=True)
    SecureCLIBinary.objects.filter(pk=row.pk).update(risk_acknowledged=False)  # as migration 0018 left old rows
    with pytest.raises(ToolError, match="acknowledges that risk"):
        run(agent, "env", "")
    with pytest.raises(ValidationError, match="risk_acknowledged"):  # any other change needs the decision too
        cli_binary_update(actor=None, binary=SecureCLIBinary.objects.get(pk=row.pk), tips="prints the env")
    cli_binary_update(actor=None, binary=SecureCLIBinary.objects.get(pk=row.pk), risk_acknowledged=True)
    assert "FAKE_TOKEN=[REDACTED]" in run(agent, "env", "").for_llm


@pytest.mark.django_db
def test_the_binary_gets_an_empty_home_of_its_own_not_the_workspace(bindir):
    """A CLI reads its configuration from HOME (gh aliases `!sh`, aws cli aliases and credential_process, kubeconfig
    exec plugins): a configuration the agent wrote in its workspace must not reach it."""
    agent = make_agent()
    workspace = ctx_for(agent).workspace.ensure()
    os.makedirs(os.path.join(workspace, ".config", "gh"))
    with open(os.path.join(workspace, ".config", "gh", "config.yml"), "w") as fh:
        fh.write("aliases:\n  leak: '!env'  # planted-by-the-agent\n")
    script = '#!/bin/sh\necho "home=$HOME"\nls -A "$HOME"\ncat "$HOME/.config/gh/config.yml" 2>/dev/null\necho end\n'
    cli_binary_create(actor=None, name="gh", path=install(bindir, "gh", script), env={"FAKE_TOKEN": SECRET})
    out = run(agent, "gh", "").for_llm
    assert "planted-by-the-agent" not in out and "home=/workspace" not in out, out
    # the run's private /tmp: nothing of the workspace (only a binary outside /usr is bound there, read-only)
    assert out.startswith("home=/tmp\n") and ".config" not in out, out
