"""Custom-tool arguments are data, never shell text (issue P15 §3, docs/custom-tools.md "Arguments are data").

An operator's template put a placeholder inside an unquoted here-document (`cat <<EOF … {{.note}} … EOF`): the value
was spliced into the script, quoted for a word, and `$(id)` in it ran. Now every placeholder becomes a reference to an
environment variable holding the value; templates that put a placeholder where a value could still be read as code
are refused at save time. These tests run real custom tools in the real sandbox."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from goclaw.errors import ValidationError
from tests.factories import make_agent
from tools_app import pipeline
from tools_app.base import ToolContext, ToolError
from tools_app.builtin.custom import tool_from_row
from tools_app.calls import ToolCall
from tools_app.custom_tools import TemplateError, compile_template, render_command, template_problems
from tools_app.models import CustomTool
from tools_app.services.custom_tools import custom_tool_create
from tools_app.workspace import Workspace

X = {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}
NOTE = {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]}

# Each of these creates a file in the workspace if any shell, in any way, runs it as code.
PAYLOADS = [
    "$(touch pwned)",
    "`touch pwned`",
    "$(touch pwned)`touch pwned`",
    "'$(touch pwned)'",
    '"$(touch pwned)"',
    "x' ; touch pwned ; '",
    'x" ; touch pwned ; "',
    "; touch pwned",
    "a\ntouch pwned\n",
    "EOF\ntouch pwned\ncat <<EOF",
    "\tEOF\ntouch pwned\n",
    "a[$(touch pwned)]",
    "x[`touch pwned`]",
    "$((1+$(touch pwned)))",
    "${x@P}",
    "\\$(touch pwned)",
    "touch pwned",
    "/usr/bin/touch pwned",
    "-c touch pwned",
    "PATH=/tmp touch pwned",
    "$'\\x60touch pwned\\x60'",
    "$IFS touch pwned",
    "*",
    "\r\ntouch pwned\r\n",
    "}; touch pwned; {",
    "))); touch pwned; (((",
    "__import__('os').system('touch pwned')",
    'BEGIN{system("touch pwned")}',
    "1e touch pwned",
]


def make(agent, command, parameters=X, name="t", **fields):
    return custom_tool_create(actor=None, name=name, description="test tool", parameters=parameters,
                              command=command, agent=agent, requires_approval=False, **fields)


def run_direct(row, agent, args):
    ws = Workspace(root=agent.workspace_path, agent_key=agent.key)
    return tool_from_row(row).run(ToolContext(agent_key=agent.key, agent_id=agent.pk, workspace=ws, settings={}), args)


def workspace_files(agent) -> list[str]:
    return sorted(p.name for p in agent.workspace_path.iterdir()) if agent.workspace_path.exists() else []


# --- the reported attack, end to end --------------------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("payload", [p for p in PAYLOADS if "\r" not in p], ids=repr)
def test_a_value_in_an_unquoted_here_document_is_printed_literally_and_never_runs(payload):
    """The reported template, run through the pipeline in the real sandbox: the note comes back exactly as sent
    and nothing in it runs (before the fix, `$(touch pwned)` ran)."""
    agent = make_agent()
    make(agent, "cat <<EOF\nnote: {{.note}}\nEOF", parameters=NOTE, name="note")
    out = pipeline.execute(ToolCall(agent, "note", {"note": payload}))
    assert out.status == "ok", out.as_dict()
    assert out.for_llm == f"note: {payload}\n[exit code 0]"
    assert workspace_files(agent) == []


@pytest.mark.django_db
def test_the_here_document_template_runs_a_reference_and_shows_the_value_quoted_for_the_approver():
    agent = make_agent()
    row = make(agent, "cat <<EOF\nnote: {{.note}}\nEOF", parameters=NOTE, name="note")
    assert compile_template(row.command).script == "cat <<EOF\nnote: ${GOCLAW_ARG_note}\nEOF"
    summary, details = tool_from_row(row).summarize({"note": "$(id) `id` \\"}, agent.workspace_path)
    assert details["command"] == "cat <<EOF\nnote: \\$(id) \\`id\\` \\\\\nEOF"


@pytest.mark.django_db
def test_a_template_saved_before_the_check_that_hands_a_value_to_eval_is_refused_at_run_time_and_runs_nothing():
    """A row written behind the service's back (or saved by an older goclaw) is judged again when it runs."""
    agent = make_agent()
    row = make(agent, "printf '%s' {{.x}}")
    CustomTool.objects.filter(pk=row.pk).update(command="eval {{.x}}")
    row.refresh_from_db()
    with pytest.raises(ToolError, match=r"cannot run: its command template is refused \(.*eval"):
        run_direct(row, agent, {"x": "touch pwned"})
    assert workspace_files(agent) == []


# --- arguments become environment variables, with generated names --------------------------------------------------

@pytest.mark.django_db
def test_argument_names_never_become_environment_names():
    """A parameter named PATH or LD_PRELOAD fills GOCLAW_ARG_PATH / GOCLAW_ARG_LD_PRELOAD: the child's PATH is
    untouched and no library is preloaded."""
    agent = make_agent()
    params = {"type": "object", "properties": {"PATH": {"type": "string"}, "LD_PRELOAD": {"type": "string"}}}
    row = make(agent, "printf '%s|' {{.PATH}} {{.LD_PRELOAD}} \"$PATH\" \"${LD_PRELOAD-unset}\"", parameters=params)
    out = run_direct(row, agent, {"PATH": "/nonexistent", "LD_PRELOAD": "/tmp/evil.so"})
    first, second, path, preload = out.for_llm.split("|")[:4]
    assert (first, second, preload) == ("/nonexistent", "/tmp/evil.so", "unset")
    assert "/usr/bin" in path or "/bin" in path


@pytest.mark.django_db
def test_a_tools_own_env_may_not_use_the_argument_variables_names():
    with pytest.raises(ValidationError, match="reserved for the arguments"):
        make(None, "printf '%s' {{.x}}", env={"GOCLAW_ARG_x": "shadow"})
    assert not CustomTool.objects.exists()


@pytest.mark.django_db
def test_an_argument_too_long_for_a_process_environment_is_refused_with_a_clear_error():
    agent = make_agent()
    row = make(agent, "printf '%s' {{.x}} | wc -c")
    with pytest.raises(ToolError, match="argument x is longer than a process environment can carry"):
        run_direct(row, agent, {"x": "\u00e9" * 70_000})  # 140 000 bytes: more than Linux passes in one variable


# --- where a placeholder may stand ---------------------------------------------------------------------------------

ACCEPTED = [
    "printf '%s' {{.x}}",
    "printf '%s' a{{.x}}b",
    'printf \'%s\' "a {{.x}} b"',
    "cat <<EOF\n{{.x}}\nEOF",
    "cat <<-EOF\n\tline {{.x}}\n\tEOF",
    'printf \'%s\' "$(printf \'%s\' {{.x}})"',
    'v={{.x}}; printf \'%s\' "$v"',
    "case {{.x}} in {{.x}}) echo same;; esac",
    'for i in {{.x}}; do printf \'%s\' "$i"; done',
    "sh -c 'printf %s \"$1\"' sh {{.x}}",
    "python3 -c 'import sys; print(sys.argv[1])' {{.x}}",
    "awk '{print}' {{.x}}",
    "grep -F -- {{.x}} notes.txt",
    "[ {{.x}} = yes ] && echo yes",
    "[ -n {{.x}} ]",
    "jq -n --arg v {{.x}} '$v'",
    "export NOTE={{.x}}; printenv NOTE",
    "printf '%s' {{.x}} > out.txt",
    "printf '%s\\n' {{.x}} >> notes.txt; python3 summarize.py notes.txt",
    "f() { printf '%s' \"$1\"; }; f {{.x}}",
    "cat <<EOF\r\nnote: {{.x}}\r\nEOF\r\n",
]

REFUSED = [
    # (template, words the problem must hold)
    ("echo '{{.x}}'", "single quotes"),
    ("echo $'{{.x}}'", "$'…'"),
    ('echo $"{{.x}}"', "locale-translated"),
    ("echo `echo {{.x}}`", "`…`"),
    ("cat <<'EOF'\n{{.x}}\nEOF", "quoted delimiter"),
    ('cat <<"EOF"\n{{.x}}\nEOF', "quoted delimiter"),
    ("cat <<\\EOF\n{{.x}}\nEOF", "quoted delimiter"),
    ("cat <<{{.x}}\nEOF\n", "not valid shell syntax"),
    ("echo $(( {{.x}} + 1 ))", "arithmetic"),
    ("(( {{.x}} ))", "arithmetic"),
    ("for ((i=0; i<{{.x}}; i++)); do :; done", "arithmetic"),
    ("v={{.x}}; echo $((v + 1))", "arithmetic"),
    ("echo ${y:-{{.x}}}", "${…}"),
    ("echo ${{{.x}}}", "not valid shell syntax"),
    ("echo ${#{{.x}}}", "not valid shell syntax"),
    ("echo ${{.x}}", "would not expand"),
    ("echo \\{{.x}}", "would not expand"),
    ("# {{.x}}\necho hi", "comment"),
    ("[[ {{.x}} == a ]]", "[[ … ]]"),
    ("[ -v {{.x}} ]", "operator"),
    ("test {{.x}} {{.x}}", "operator"),
    ("{{.x}} --help", "program"),
    ("{{.x}}=1 ls", "program"),
    ("f{{.x}}() { :; }", "not valid shell syntax"),
    ("for {{.x}} in a; do :; done", "not valid shell syntax"),
    ("eval {{.x}}", "eval"),
    ("eval \"echo {{.x}}\"", "eval"),
    ("v={{.x}}; eval \"$v\"", "eval"),
    ("f() { eval \"$1\"; }; f {{.x}}", "eval"),
    ("for i in {{.x}}; do eval \"$i\"; done", "eval"),
    ("read -r l <<EOF\n{{.x}}\nEOF\neval \"$l\"", "eval"),
    ("sh -c {{.x}}", "code"),
    ("sh -c \"echo {{.x}}\"", "code"),
    ("bash -c \"echo {{.x}}\"", "code"),
    ("dash -c {{.x}}", "code"),
    ("sh -c 'eval \"$1\"' sh {{.x}}", "eval"),
    ("sh {{.x}}", "script"),
    ("sh -s {{.x}}", "option"),
    (". {{.x}}", "."),
    ("source {{.x}}", "source"),
    ("trap {{.x}} EXIT", "shell code"),
    ("alias e=eval\ne {{.x}}", "alias"),
    ("cat <<EOF | sh\n{{.x}}\nEOF", "input"),
    ("sh <<EOF\n{{.x}}\nEOF", "input"),
    ("bash <<EOF\necho {{.x}}\nEOF", "input"),
    ("printf '%s' {{.x}} | sh", "input"),
    ("printf '%s' {{.x}} | bash -s", "input"),
    ("cat {{.x}} | sh", "input"),
    ("sh < {{.x}}", "input"),
    ("printf '%s' {{.x}} | python3", "program"),
    ("xargs echo <<EOF\n{{.x}}\nEOF", "splits its input"),
    ("printf '%s' {{.x}} | xargs rm", "splits its input"),
    ("python3 -c \"print('{{.x}}')\"", "program"),
    ("python3 {{.x}}", "program"),
    ("node -e \"{{.x}}\"", "program"),
    ("perl -e {{.x}}", "program"),
    ("perl -ne 'print' {{.x}}", "<>"),
    ("awk {{.x}}", "awk program"),
    ('awk "BEGIN { print \\"{{.x}}\\" }"', "awk program"),
    ("sed {{.x}} f", "sed script"),
    ("sed -e {{.x}} f", "sed script"),
    ("jq {{.x}}", "jq program"),
    ("find . -exec {{.x}} \\;", "program"),
    ("find . -exec sh -c {{.x}} \\;", "code"),
    ("env {{.x}}", "program"),
    ("sudo {{.x}}", "program"),
    ("timeout 5 {{.x}}", "program"),
    ("nice -n 1 {{.x}}", "program"),
    ("exec {{.x}}", "program"),
    ("command {{.x}}", "program"),
    ("busybox {{.x}}", "program"),
    ("ssh host ls {{.x}}", "shell code"),
    ("su -c {{.x}}", "shell code"),
    ("watch ls {{.x}}", "shell code"),
    ("docker run img {{.x}}", "program"),
    ("git -c {{.x}} log", "git"),
    ("make {{.x}}", "make"),
    ("sqlite3 db {{.x}}", "sqlite3"),
    ("printf {{.x}}", "format"),
    ("set {{.x}}", "set --"),
    ("export {{.x}}", "variable name"),
    ("export PATH={{.x}}", "PATH"),
    ("LD_PRELOAD={{.x}} ls", "LD_PRELOAD"),
    ("env LD_PRELOAD={{.x}} ls", "LD_PRELOAD"),
    ("BASH_ENV={{.x}} bash script.sh", "BASH_ENV"),
    ("PS4={{.x}} bash -x script.sh", "PS4"),
    ("unset {{.x}}", "unset"),
    ("read {{.x}}", "read"),
    ("let v={{.x}}", "let"),
    ("v={{.x}}; $v", "program"),
    ("v={{.x}}; \"$v\" --version", "program"),
    ("v={{.x}}; echo $v", "split"),
    ("echo $(printf %s {{.x}})", "split"),
    ("for i in $(printf %s {{.x}}); do echo \"$i\"; done", "split"),
    ("$TOOL {{.x}}", "computed at run time"),
    ("a=(1 {{.x}})", "array"),
    ("echo {{.x}} > s.sh; . ./s.sh", ""),
    ("echo {{.x}} > s.sh; sh s.sh", ""),
    ("v={{.x}}; cat <<EOF\n`echo \"$v\"`\nEOF", "here-document"),
    ("cat <<-EOF\n\t{{.x}}\n\tEOF", "here-document"),
    ("printf %s {{.x}} > s.sh; . ./s.sh", "holds {{.x}}"),
    ("cat > s.sh <<EOF\n{{.x}}\nEOF\nsh s.sh", "holds {{.x}}"),
    ("printf %s {{.x}} | tee s.sh; sh s.sh", "holds {{.x}}"),
    ("printf %s {{.x}} > s.py; python3 s.py", "holds {{.x}}"),
    ("printf %s {{.x}} > run.sh; ./run.sh", "holds {{.x}}"),
    ("printf %s {{.x}} > p.awk; awk -f p.awk data", "holds {{.x}}"),
    ("exec 3<<EOF\n{{.x}}\nEOF\nsh <&3", "input"),
    ("exec <<EOF\n{{.x}}\nEOF\nsh", "input"),
    ("f() { sh; }; printf %s {{.x}} | f", "in function f"),
    ("{ sh; } <<EOF\n{{.x}}\nEOF", "input"),
    ("env v={{.x}} sh -c 'eval \"$v\"'", "eval"),
    ("v={{.x}} sh -c 'eval \"$v\"'", "eval"),
    ("bash -c 'eval \"$0\"' {{.x}}", "eval"),
    ("sh -c '$0' {{.x}}", "program"),
    ("python3 - <<EOF\n{{.x}}\nEOF", "program"),
    ("sed -f /dev/stdin notes <<EOF\n{{.x}}\nEOF", "/dev/stdin"),
    ("awk -f - <<EOF\n{{.x}}\nEOF", "skips part of this command"),
    ("sh 0<&4 4<<EOF\n{{.x}}\nEOF", ""),
    ("sh -c 'cat' <<EOF | sh\n\\eval {{.x}}\nEOF", "misreads"),
    ("echo\r{{.x}}", "control character"),
    ("command -- exec <<EOF\n{{.x}}\nEOF\nsh", "input"),
    ('v={{.x}}; echo "${!v}"', "bash evaluates further"),
    ('v={{.x}}; echo "${v@P}"', "bash evaluates further"),
    ("export N={{.x}}; make", "make"),
    ('command eval printf -v v %s {{.x}}; eval "$v"', "eval"),
    ('command -- read v <<EOF\n{{.x}}\nEOF\nsh -c "$v"', "code"),
    ("builtin eval {{.x}}", "eval"),
    ("echo $GOCLAW_ARG_x {{.x}}", "reserved"),
    ("echo {{.x}\n", "malformed"),
]


# Where /bin/sh is bash, these evaluate a variable's value as arithmetic or a variable name, so a value such as
# `a[$(id)]` or `([$(id)]=1)` runs id (each was accepted and ran it): integer, array and nameref declarations, a bare
# variable named in a subscript, and offsets and lengths in ${…}.
BASH_EVALUATED = [
    "typeset -i n={{.x}}", "f() { local -i n={{.x}}; }; f", "declare -i n; n={{.x}}", "declare -g -i n={{.x}}",
    "typeset -ia n; n={{.x}}", 'x={{.x}}; declare -i x; echo "$x"', "declare -a a={{.x}}", 'v={{.x}}; declare -a a="$v"',
    'v={{.x}}; declare -n r="$v"; echo "$r"', 'declare -n r; r={{.x}}; echo "$r"',
    'n={{.x}}; s=abc; echo "${s:n}"', 'n={{.x}}; s=abc; echo "${s:0:n}"', 'v={{.x}}; a=(1 2); echo "${a[v]}"',
    "v={{.x}}; a[v]=1", "v={{.x}}; a[v+1]=1",
]


@pytest.mark.parametrize("template", BASH_EVALUATED)
def test_a_value_bash_would_evaluate_as_arithmetic_or_a_name_is_refused(template):
    problems = template_problems(template, X)
    assert problems, f"accepted: {template!r}"
    assert "evaluat" in "; ".join(problems)


@pytest.mark.parametrize("template", ACCEPTED)
def test_a_placeholder_where_its_value_can_only_be_data_is_accepted(template):
    assert template_problems(template, X) == []


@pytest.mark.parametrize("template, words", REFUSED, ids=[t for t, _ in REFUSED])
def test_a_placeholder_where_its_value_could_be_read_as_code_is_refused_naming_it(template, words):
    problems = template_problems(template, X)
    assert problems, f"accepted: {template!r}"
    text = "; ".join(problems)
    assert words in text, text


@pytest.mark.django_db
def test_a_refused_template_is_a_validation_error_on_the_command_field():
    with pytest.raises(ValidationError) as err:
        make(None, "cat <<EOF | sh\n{{.x}}\nEOF")
    assert err.value.code == "custom_tool_invalid"
    assert "{{.x}} reaches that input" in err.value.details["command"]


def test_the_values_written_into_the_shown_command_mean_what_the_script_does():
    args = {"x": "a'b\"c$(d)`e`\\f\ng"}
    assert render_command("printf %s {{.x}}", args) == "printf %s 'a'\"'\"'b\"c$(d)`e`\\f\ng'"
    assert render_command('printf %s "<{{.x}}>"', args) == 'printf %s "<a\'b\\"c\\$(d)\\`e\\`\\\\f\ng>"'
    assert render_command("cat <<EOF\n{{.x}}\nEOF", args) == "cat <<EOF\na'b\"c\\$(d)\\`e\\`\\\\f\ng\nEOF"


def test_a_template_without_placeholders_is_left_alone():
    """No value reaches it, so there is nothing to judge (the shell safety check still judges it at every call)."""
    template = "echo $(( 1 + 2 )); cat <<'EOF'\n$x\nEOF\neval \"$SHELL\""
    assert compile_template(template).script == template


def test_a_bash_only_construct_the_parser_cannot_read_is_refused_not_guessed():
    problems = template_problems("cat <<-EOF; echo {{.x}}\nbody\nEOF", X)  # no space before ;: parsers differ
    assert problems and ("delimiter" in problems[0] or "not valid shell syntax" in problems[0])


# --- properties: for any value, an accepted context prints it verbatim; otherwise the template is refused -------------

# Every context that is accepted, once, printed with NUL separators (no value holds a NUL: it is refused).
ALL_CONTEXTS = (
    "printf '%s\\0' {{.x}}\n"
    "printf '%s\\0' a{{.x}}b\n"
    "printf '%s\\0' \"q {{.x}} q\"\n"
    "printf '%s\\0' \"$(printf '%s' {{.x}})\"\n"
    "v={{.x}}; printf '%s\\0' \"$v\"\n"
    "case {{.x}} in {{.x}}) printf '%s\\0' same;; *) printf '%s\\0' differ;; esac\n"
    "for i in {{.x}}; do printf '%s\\0' \"$i\"; done\n"
    "cat <<EOF\n{{.x}}\nEOF\n"
    "printf '\\0'\n"
    "cat <<-EOF\n\t<{{.x}}>\n\tEOF\n"
    "printf '\\0'\n"
    "sh -c 'printf \"%s\\0\" \"$1\"' sh {{.x}}\n"
    "[ {{.x}} = {{.x}} ] && printf '%s\\0' equal\n"
)

_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=200)


@pytest.mark.django_db
@hsettings(max_examples=50, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=_text | st.sampled_from(PAYLOADS))
def test_property_every_accepted_context_receives_any_value_verbatim(value):
    agent = make_agent()
    row = CustomTool.objects.filter(name="all_contexts").first() or make(None, ALL_CONTEXTS, name="all_contexts")
    result = run_direct(row, agent, {"x": value})
    assert not result.is_error, result.for_llm
    out = result.for_llm.removesuffix("\n[exit code 0]").split("\0")
    assert out == [value, f"a{value}b", f"q {value} q", value.rstrip("\n"), value, "same", value,
                   f"{value}\n", f"<{value}>\n", value, "equal", ""]
    assert workspace_files(agent) == []


# Fragments a template can wrap a placeholder in: some harmless, most of them places where a value would be code.
WRAPPERS = [
    ("printf '%s\\n' ", ""), ('printf \'%s\\n\' "', '"'), ("printf '%s\\n' '", "'"), ("cat <<EOF\n", "\nEOF"),
    ("cat <<'EOF'\n", "\nEOF"), ("cat <<-EOF\n\t", "\n\tEOF"), ("echo $((", "))"), ("echo ${y:-", "}"), ("eval ", ""),
    ("sh -c ", ""), ('sh -c "', '"'), ("sh -c '", "'"), ("echo `echo ", "`"), ("", " x"), ("echo $'", "'"),
    ("v=", '; eval "$v"'), ("v=", "; $v"), ("cat <<EOF | sh\n", "\nEOF"), ("printf %s ", " | sh"), ("trap ", " EXIT"),
    ("echo \\", ""), ("echo $", ""), ("bash -c '", "'"), ("sh -c 'printf \"%s\\n\" \"$1\"' sh ", ""),
    ("python3 -c \"print('", "')\""), ("find . -maxdepth 0 -exec ", " \\;"), ("env ", ""), ("xargs echo <<EOF\n", "\nEOF"),
    ("echo \"$(echo ", ')"'), ("echo $(echo ", ")"), ("awk 'BEGIN{print \"", "\"}'"), ("awk \"BEGIN{print \\\"", "\\\"}\""),
    ("for i in ", '; do eval "$i"; done'), ("f() { \"$@\"; }; f ", ""), ("f() { printf '%s\\n' \"$1\"; }; f ", ""),
    ("read -r l <<EOF\n", '\nEOF\n$l'), ("[ ", " ]"), ("[ -v ", " ]"), ("test ", " = x"), ("case ", " in *) echo c;; esac"),
    ("echo \"a\" ", " 'b'"), ("x=", '; printf "%s\\n" "$x"'), ("sh <<EOF\necho ", "\nEOF"), ("echo ", " | xargs echo"),
    ("sh -c sh <<EOF\n", "\nEOF"), ("exec 3<<EOF\n", "\nEOF\nsh <&3"), ("command -- exec <<EOF\n", "\nEOF\nsh"),
    ("f() { sh; }; printf %s ", " | f"), ("env v=", " sh -c 'eval \"$v\"'"), ("bash -c 'eval \"$0\"' ", ""),
    ("printf %s ", " > s.sh; . ./s.sh; rm -f s.sh"), ("env dd of=s.sh status=none <<EOF\n", "\nEOF\nsh s.sh; rm -f s.sh"),
    ("python3 - <<EOF\n", "\nEOF"), ("awk -f - <<EOF\n", "\nEOF"), ("sed -f /dev/stdin /dev/null <<EOF\n", "\nEOF"),
    ("sh -c 'cat' <<EOF | sh\n\\eval ", "\nEOF"), ("v=", '; echo "${v@P}"'), ("trap 'eval \"$v\"' EXIT; v=", ""),
]


@pytest.mark.django_db
@hsettings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layers=st.lists(st.sampled_from(WRAPPERS), min_size=1, max_size=3),
       payloads=st.lists(st.sampled_from(PAYLOADS), min_size=1, max_size=4))
def test_property_a_template_either_is_refused_or_runs_no_value_as_code(layers, payloads):
    """Templates built from random nestings of contexts: the check refuses each one where a value could run, and
    every template it accepts, run in the real sandbox with hostile values, creates no file."""
    template = "{{.x}}"
    for before, after in layers:
        template = before + template + after
    try:
        compile_template(template)
    except TemplateError:
        return
    agent = make_agent()
    row = CustomTool.objects.filter(command=template).first() or \
        make(None, template, name=f"fuzz_{abs(hash(template)) % 10**12}")
    for payload in payloads:
        try:
            run_direct(row, agent, {"x": payload})
        except ToolError:
            pass
        assert workspace_files(agent) == [], (template, payload)
