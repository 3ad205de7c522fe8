"""Custom tools: a command template from the database, arguments shell-quoted into it, run through the sandbox the
way `exec` runs; name collisions refused at save time; a change reaches every process within a second; the env is
sealed, write-only and scrubbed."""
from __future__ import annotations

import hashlib
import io
import json
import logging

import pytest
import requests
from django.core.management import call_command
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from goclaw import crypto
from goclaw.errors import ValidationError
from tests.factories import make_agent
from tests.servers import CatalogWatcher, DaphneProcess, free_port, up_env
from tools_app import pipeline
from tools_app.base import ToolContext, ToolError
from tools_app.calls import ToolCall
from tools_app.builtin.custom import CustomToolSource, tool_from_row
from tools_app.custom_tools import render_command, template_problems
from tools_app.models import CustomTool, ToolInvocation
from tools_app.services.agents import token_issue
from tools_app.services.custom_tools import (CustomToolCollision, custom_tool_create, custom_tool_delete,
                                             custom_tool_update)
from tools_app.toolsets import toolset_for
from tools_app.workspace import Workspace

SECRET = "planted-Secret-value-7f3a9c1e"
ECHO_ARGS = "printf '%s\\0' {{.x}}"
ONE_PARAM = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}

INJECTIONS = [
    "'; rm -rf ~; '",
    "$(touch pwned)",
    "`touch pwned`",
    "a\nb; touch pwned",
    "\u2018quoted\u2019 \u201cdouble\u201d",
    "\"; touch pwned; \"",
    "x' 'y",
    "${HOME} $PATH ~ * ? [a] {a,b}",
    "-n",
    "&& touch pwned || true | cat > pwned &",
    "\\' \\\\ \\",
    "",
    "y" * 40_000,  # twice in the command: still under the 100 000-character cap
]


def make(agent=None, **fields):
    data = {"name": "echo_args", "description": "prints its argument", "parameters": ONE_PARAM,
            "command": ECHO_ARGS, "agent": agent}
    data.update(fields)
    return custom_tool_create(actor=None, **data)


def ctx_for(agent):
    ws = Workspace(root=agent.workspace_path, agent_key=agent.key)
    return ToolContext(agent_key=agent.key, agent_id=agent.pk, workspace=ws, settings={})


def run_direct(row, agent, args):
    return tool_from_row(row).run(ctx_for(agent), args)


# --- rendering -----------------------------------------------------------------------------------------------------

def test_every_placeholder_becomes_one_quoted_word_and_a_missing_optional_argument_an_empty_one():
    command = render_command("dig +short {{.record_type}} {{ .domain }}", {"domain": "'; rm -rf ~; '"})
    assert command == "dig +short '' ''\"'\"'; rm -rf ~; '\"'\"''"


def test_non_string_arguments_are_rendered_as_json_then_quoted():
    assert render_command("x {{.n}} {{.o}} {{.b}}", {"n": 3, "o": {"a": [1, "b c"]}, "b": True}) == \
        "x 3 '{\"a\": [1, \"b c\"]}' true"


def test_a_placeholder_for_an_undeclared_parameter_or_a_malformed_one_is_named():
    assert template_problems("a {{.x}} {{.y}}", ONE_PARAM) == ["placeholder {{.y}} names no declared parameter"]
    assert "malformed placeholder" in template_problems("a {{x}}", ONE_PARAM)[0]
    assert template_problems("a {{.x}} {{ .x }}", ONE_PARAM) == []


@pytest.mark.parametrize("template, words", [
    ("echo '{{.x}}'", "inside single quotes"), ("echo `{{.x}}`", "inside `…`"),
    ("""echo "it's" '{{.x}}'""", "inside single quotes"), ("awk '{print \"{{.x}}\"}'", "inside single quotes"),
])
def test_a_placeholder_where_the_shell_expands_nothing_or_re_reads_text_is_refused(template, words):
    """Single quotes keep a reference literal (and usually hold another language's program); backquotes re-read
    their text: the template is refused, naming the placeholder."""
    assert any("{{.x}}" in p and words in p for p in template_problems(template, ONE_PARAM)), \
        template_problems(template, ONE_PARAM)


@pytest.mark.parametrize("template", ["echo {{.x}}", """printf '%s\\0' {{.x}}""", 'echo "done:" {{.x}}', "echo \\'{{.x}}",
                                      'echo "a {{.x}}"', 'grep "pattern {{.x}}" file'])
def test_a_placeholder_bare_or_inside_the_authors_double_quotes_is_fine(template):
    assert template_problems(template, ONE_PARAM) == []


# --- saving: validation and collisions -----------------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("fields, field, words", [
    ({"command": "echo {{.nope}}"}, "command", "{{.nope}} names no declared parameter"),
    ({"parameters": {"type": "array"}}, "parameters", '"type": "object"'),
    ({"parameters": {"type": "object", "properties": {"x": {"type": 5}}}}, "parameters", "invalid JSON Schema"),
    ({"timeout_seconds": 3601}, "timeout_seconds", "from 1 to 3600"),
    ({"timeout_seconds": 0}, "timeout_seconds", "from 1 to 3600"),
    ({"working_dir": "../outside"}, "working_dir", "inside the workspace"),
    ({"working_dir": "/etc"}, "working_dir", "inside the workspace"),
    ({"name": "Bad Name"}, "name", "lower-case"),
    ({"command": "echo \x00"}, "command", "NUL"),
    ({"command": "echo '{{.x}}'"}, "command", "{{.x}} is inside single quotes"),
    ({"command": "cat <<EOF | sh\n{{.x}}\nEOF"}, "command", "runs its input as commands, and {{.x}} reaches"),
    ({"command": "echo $GOCLAW_ARG_x {{.x}}"}, "command", "reserved for the variables goclaw passes"),
])
def test_an_invalid_definition_is_refused_with_the_field_and_the_reason(fields, field, words):
    with pytest.raises(ValidationError) as err:
        make(**fields)
    assert err.value.code == "custom_tool_invalid" and words in err.value.details[field]
    assert not CustomTool.objects.exists()


@pytest.mark.django_db
def test_the_defaults_are_a_60_second_timeout_the_custom_group_and_approval_like_exec():
    row = make()
    assert (row.timeout_seconds, row.group, row.requires_approval, row.enabled) == (60, "custom", True, True)


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["exec", "bash", "read_file"])
def test_a_name_a_built_in_tool_has_is_refused(name):
    with pytest.raises(CustomToolCollision) as err:
        make(name=name)
    assert "built-in" in err.value.message and err.value.code == "custom_tool_name_collision"


@pytest.mark.django_db
def test_a_name_another_source_reserves_is_refused():
    """`credentialed_exec` comes from its own source (only for agents with a binary): a custom tool may not take it."""
    with pytest.raises(CustomToolCollision) as err:
        make(name="credentialed_exec")
    assert "goclaw provides" in err.value.message


@pytest.mark.django_db
def test_a_name_another_visible_custom_tool_has_is_refused_but_two_agents_may_share_one():
    alice, bob = make_agent(), make_agent()
    make(agent=alice)
    make(agent=bob)  # not visible to alice: fine
    with pytest.raises(CustomToolCollision, match=f"agent {alice.key}'s custom tool"):
        make(agent=None)  # a global tool would be visible to alice too
    make(name="shared_tool")
    with pytest.raises(CustomToolCollision, match="a global custom tool is already named shared_tool"):
        make(name="shared_tool", agent=alice)
    other = make(name="other_tool", agent=alice)
    with pytest.raises(CustomToolCollision):
        custom_tool_update(actor=None, tool=other, name="echo_args")
    assert CustomTool.objects.get(pk=other.pk).name == "other_tool"


@pytest.mark.django_db
def test_a_collision_that_appears_later_is_skipped_and_logged(caplog):
    agent = make_agent()
    row = make(agent=agent)
    CustomTool.objects.filter(pk=row.pk).update(name="exec")  # behind the service's back (an old row, a new built-in)
    with caplog.at_level(logging.WARNING, logger="goclaw.custom_tools"):
        tools = list(CustomToolSource().tools_for(agent, ""))
    assert tools == [] and "shadowed by a built-in" in caplog.text
    assert toolset_for(agent).get("exec").__class__.__name__ == "ExecTool"


@pytest.mark.django_db
def test_a_save_reaches_the_agents_tool_set_and_a_disable_or_delete_removes_it():
    agent, stranger = make_agent(), make_agent()
    row = make(agent=agent)
    assert toolset_for(agent).get("echo_args") is not None
    assert toolset_for(stranger).get("echo_args") is None
    custom_tool_update(actor=None, tool=row, enabled=False)
    assert toolset_for(agent).get("echo_args") is None
    custom_tool_update(actor=None, tool=row, enabled=True, description="changed")
    assert toolset_for(agent).get("echo_args").description == "changed"
    custom_tool_delete(actor=None, tool=row)
    assert toolset_for(agent).get("echo_args") is None


# --- running: every argument arrives as one literal argv element ---------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("value", INJECTIONS, ids=lambda v: repr(v[:30]))
def test_an_injection_attempt_arrives_as_one_literal_argument_and_runs_nothing(value):
    agent = make_agent()
    row = make(agent=agent, parameters={"type": "object", "properties": {"x": {"type": "string"},
                                                                        "y": {"type": "string"}}},
               command="printf '%s\\0' {{.x}} {{.y}}")
    result = run_direct(row, agent, {"x": value, "y": value})
    assert not result.is_error, result.for_llm
    assert result.for_llm == f"{value}\0{value}\0\n[exit code 0]"
    assert not (agent.workspace_path / "pwned").exists()


@pytest.mark.django_db
def test_a_nul_byte_or_an_oversized_argument_is_refused_with_a_clear_error():
    agent = make_agent()
    row = make(agent=agent)
    with pytest.raises(ToolError, match="argument x: an argument contains a NUL byte"):
        run_direct(row, agent, {"x": "a\0b"})
    with pytest.raises(ToolError, match="the arguments make the command longer than 100000 characters"):
        run_direct(row, agent, {"x": "y" * 100_001})


_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=300)


@pytest.mark.django_db
@hsettings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=_text | st.sampled_from(INJECTIONS[:-1]))
def test_property_any_string_arrives_as_exactly_one_literal_argv_element(value):
    agent = make_agent()
    row = CustomTool.objects.filter(name="echo_args", agent=None).first() or make()
    result = run_direct(row, agent, {"x": value})
    assert not result.is_error, result.for_llm
    assert result.for_llm.encode() == value.encode() + b"\0\n[exit code 0]"


@pytest.mark.django_db
def test_the_tool_runs_in_the_workspace_with_its_working_dir_and_timeout_through_the_pipeline():
    agent = make_agent()
    (agent.workspace_path / "sub").mkdir()
    make(agent=agent, name="where", parameters={"type": "object", "properties": {}}, command="pwd; echo $HOME",
         working_dir="sub")
    make(agent=agent, name="slow", parameters={"type": "object", "properties": {}}, command="sleep 30",
         timeout_seconds=1)
    out = pipeline.execute(ToolCall(agent, "where", {}))
    assert out.status == "ok", out.as_dict()
    assert out.for_llm.splitlines()[0].endswith("/sub") and "[exit code 0]" in out.for_llm
    slow = pipeline.execute(ToolCall(agent, "slow", {}))
    assert "[timed out after 1s; process group killed]" in slow.for_llm


@pytest.mark.django_db
def test_a_working_dir_that_leaves_the_workspace_through_a_symlink_is_refused_at_run_time(tmp_path):
    agent = make_agent()
    (agent.workspace_path / "out").symlink_to(tmp_path)
    row = make(agent=agent, name="where", parameters={"type": "object", "properties": {}}, command="pwd",
               working_dir="out")
    with pytest.raises(ToolError, match="working_dir refused"):
        run_direct(row, agent, {})


@pytest.mark.django_db
def test_a_dangerous_rendered_template_is_refused_by_the_security_hook():
    agent = make_agent()
    make(agent=agent, name="wipe", parameters={"type": "object", "properties": {"x": {"type": "string"}}},
         command="rm -rf / {{.x}}")
    out = pipeline.execute(ToolCall(agent, "wipe", {"x": "a"}))
    assert (out.status, out.is_error) == ("denied", True), out.as_dict()
    assert "command denied by safety policy" in out.for_llm and "filesystem root" in out.for_llm


# --- the env: sealed, write-only, injected, scrubbed --------------------------------------------------------------

@pytest.mark.django_db
def test_the_env_reaches_the_command_but_not_the_output_logs_audit_rows_or_events(monkeypatch, caplog,
                                                                                 published_events):
    monkeypatch.setenv("GOCLAW_PLATFORM_ONLY", "platform-value-never-in-child")
    agent = make_agent()
    with caplog.at_level(logging.DEBUG):
        row = make(agent=agent, name="use_token", parameters={"type": "object", "properties": {}},
                   command='printf %s "$API_TOKEN" | sha256sum; printf %s "$API_TOKEN"; echo; echo "${GOCLAW_PLATFORM_ONLY-unset}"',
                   env={"API_TOKEN": SECRET})
        out = pipeline.execute(ToolCall(agent, "use_token", {}))
    assert out.status == "ok", out.as_dict()
    assert hashlib.sha256(SECRET.encode()).hexdigest() in out.for_llm  # the child had the value
    assert out.for_llm.endswith("[REDACTED]\nunset\n[exit code 0]")  # the platform's environment never reaches it
    row.refresh_from_db()
    assert SECRET not in row.env_sealed and row.env_names == ["API_TOKEN"] and row.env_changed_at is not None
    assert crypto.decrypt_json(row.env_sealed, associated_data=f"tools_app.CustomTool:{row.pk}:env") == \
        {"API_TOKEN": SECRET}
    audit = json.dumps([list(r.values()) for r in ToolInvocation.objects.values()], default=str)
    sent = [messages for _, _, messages in published_events]
    assert sent  # the call's tool.executed event at least
    for where, text in (("output", json.dumps(out.as_dict())), ("audit rows", audit), ("logs", caplog.text),
                        ("events", json.dumps(sent, default=str))):
        assert SECRET not in text, where
    assert "[REDACTED]" in out.for_llm


@pytest.mark.django_db
def test_a_short_env_value_is_scrubbed_from_the_output_too():
    agent = make_agent()
    row = make(agent=agent, name="short", parameters={"type": "object", "properties": {}},
               command='echo "v=$K"', env={"K": "abc"})
    assert run_direct(row, agent, {}).for_llm == "v=[REDACTED]\n[exit code 0]"


@pytest.mark.django_db
def test_an_env_update_sets_and_unsets_names_and_keeps_the_rest():
    row = make(env={"A": "first-value-1", "B": "second-value-2"})
    row = custom_tool_update(actor=None, tool=row, env={"A": None, "C": "third-value-3"})
    assert row.env_names == ["B", "C"]
    assert crypto.decrypt_json(row.env_sealed, associated_data=f"tools_app.CustomTool:{row.pk}:env") == \
        {"B": "second-value-2", "C": "third-value-3"}
    with pytest.raises(ValidationError, match="not a valid environment variable name"):
        custom_tool_update(actor=None, tool=row, env={"BAD NAME": "x"})


# --- hot reload across processes -----------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_custom_tool_saved_here_is_listed_and_callable_in_another_process_within_a_second(tmp_path):
    agent = make_agent()
    _, plain = token_issue(agent=agent, name="custom-tools")
    env = up_env(tmp_path / "var", DATABASE_URL=DaphneProcess.database_url())
    server = DaphneProcess(env, free_port(), tmp_path / "daphne.log")
    base, auth = f"http://127.0.0.1:{server.port}/api/v1", {"Authorization": f"Bearer {plain}"}
    catalog = CatalogWatcher(base, plain)



    try:
        server.wait_listening()
        assert "greet" not in catalog.names() and "exec" in catalog.names()  # built and cached there
        row = make(agent=agent, name="greet", parameters={"type": "object", "properties": {"who": {"type": "string"}}},
                   command="echo hello {{.who}}")
        catalog.wait_listed("greet", present=True)
        ran = requests.post(f"{base}/tools/execute", headers=auth, timeout=30,
                            json={"tool": "greet", "arguments": {"who": "daphne; id"}}).json()
        assert (ran["status"], ran["for_llm"]) == ("ok", "hello daphne; id\n[exit code 0]"), ran
        custom_tool_update(actor=None, tool=row, enabled=False)
        catalog.wait_listed("greet", present=False)
    finally:
        assert server.stop() == 0


@pytest.mark.django_db
def test_key_rotation_reseals_the_env_and_the_tool_still_runs_with_it(settings):
    old, new = bytes(range(32)).hex(), bytes(range(100, 132)).hex()
    settings.GOCLAW_ENCRYPTION_KEY, settings.GOCLAW_ENCRYPTION_OLD_KEYS = old, []
    agent = make_agent()
    row = make(agent=agent, name="use_token", parameters={"type": "object", "properties": {}},
               command='printf %s "$API_TOKEN" | sha256sum', env={"API_TOKEN": SECRET})
    settings.GOCLAW_ENCRYPTION_KEY, settings.GOCLAW_ENCRYPTION_OLD_KEYS = new, [old]
    call_command("rotate_encryption_key", stdout=io.StringIO())
    row.refresh_from_db()
    assert crypto.key_id_of(row.env_sealed) == crypto.current_key_id()
    settings.GOCLAW_ENCRYPTION_OLD_KEYS = []  # the old key is gone: only the re-sealed value can open
    result = run_direct(row, agent, {})
    assert hashlib.sha256(SECRET.encode()).hexdigest() in result.for_llm, result.for_llm


@pytest.mark.django_db
def test_the_approval_summary_shows_the_rendered_command_and_the_tools_own_directory():
    agent = make_agent()
    row = make(agent=agent, name="where", parameters={"type": "object", "properties": {"working_dir": {"type": "string"}}},
               command="ls {{.working_dir}}", working_dir="sub")
    summary, details = tool_from_row(row).summarize({"working_dir": "/etc; id"}, agent.workspace_path)
    assert details["command"] == "ls '/etc; id'" and details["working_dir"] == str(agent.workspace_path / "sub")
    assert details["simple_commands"] == ["ls '/etc; id'"] and "$ ls '/etc; id'" in summary
