"""Custom-tool command templates as shell code (docs/custom-tools.md, "Arguments are data").

A template's `{{.key}}` placeholders never become text in the script: each becomes a reference to an environment
variable that holds the argument, so the shell reads the value as data and never parses it. What is left to decide
at save time is *where* each reference stands, and this module decides it from the template's syntax tree
(tree-sitter-bash; the project's own shell analysis cross-checks the result):

- the three places a reference expands as one literal piece of text: a word of a command (written `"${VAR}"`),
  inside the author's double quotes and in an unquoted here-document (both written `${VAR}`);
- everything else is refused with the placeholder and the reason: places where the shell expands nothing (single
  quotes, `$'…'`, quoted here-documents, comments, after a backslash), places where the shell would read the value as
  code, a name or a number (arithmetic, `[[ … ]]`, `${…}` operators, array subscripts, a command or variable name),
  and programs that run their arguments or input as code (`eval`, `sh -c`, `source`, `trap`, interpreters' `-c`/`-e`
  programs and script operands, a shell reading its input, `xargs`, `find -exec`, `sudo`/`env`/`timeout` wrappers…).

A value can also travel through the author's own variables (`v={{.x}}; eval "$v"`), a command substitution's output,
`read`, a `for` loop, positional parameters, a function's input, a file the template writes or a descriptor it opens;
those carry the placeholder's taint and are held to the same rules. Where tree-sitter is known to read shell
differently from /bin/sh, the template is refused rather than guessed (`_structure_problems`).
"""
from __future__ import annotations

import functools
import re
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tools_app.security.shell_check.analysis import CommandAnalysis, normalize_text
from tools_app.security.shell_check.classify import executes_stdin
from tools_app.security.shell_check.command import SimpleCommand, operands
from tools_app.security.shell_check.vocabulary import (
    AWKS,
    CMD_ENV,
    DANGER_ENV,
    INTERPRETERS,
    MAX_DEPTH,
    SHELLS,
    UNKNOWN_VALUE,
    basename,
    interpreter_name,
    word_set,
)
from tools_app.security.shell_check.wrappers import (
    TOOL_SHELLS,
    inline_program,
    unwrap,
)

if TYPE_CHECKING:
    from tree_sitter import Node

# Where a placeholder stands, which decides how its reference is written into the script.
WORD = "word"          # part of a word: "${VAR}" (one piece of text, never split or globbed)
DQUOTE = "dquote"      # inside the author's double quotes: ${VAR}
HEREDOC = "heredoc"    # inside an unquoted here-document: ${VAR}

TAINT = "\ue0a0"  # a value (or something carrying one) inside a statically decoded word
NEWLINE = b"\n"

_local = threading.local()


@functools.cache
def _language():
    """tree-sitter's bash grammar, loaded on the first template checked (not when a process starts)."""
    import tree_sitter_bash
    from tree_sitter import Language

    return Language(tree_sitter_bash.language())

# Builtins whose operands are names, options or code: a value there is refused whatever it is.
NAME_OR_CODE_BUILTINS = word_set(
    "eval . source alias unalias let trap fc enable complete compgen bind mapfile readarray shopt hash getopts read "
    "unset export readonly local declare typeset wait coproc caller ulimit")
# Programs that run shell commands found in their arguments or input (sqlite3 `.shell`, psql `\!`, mysql `system`,
# gdb `shell`, make `$(shell …)`, compilers' `-wrapper`): a value anywhere in their arguments or input is refused.
COMMAND_RUNNING_TOOLS = TOOL_SHELLS | word_set("vim vi nvim ex ed less more man")
# Nodes whose children must cover their text (blanks aside): where tree-sitter drops a word, it differs from /bin/sh.
COVERED = frozenset({"program", "command", "redirected_statement", "pipeline", "list", "compound_statement", "subshell",
                     "if_statement", "elif_clause", "else_clause", "while_statement", "for_statement", "do_group",
                     "case_statement", "case_item", "function_definition", "variable_assignments",
                     "declaration_command", "unset_command", "negated_command", "file_redirect", "herestring_redirect",
                     "heredoc_redirect", "test_command", "command_name", "concatenation", "binary_expression",
                     "unary_expression", "variable_assignment", "command_substitution", "process_substitution"})
# Commands that copy their input or operands into files named by their operands.
FILE_WRITERS = word_set("tee cp mv install ln dd rsync sponge")
# Paths that read standard input as a file.
STDIN_PATHS = frozenset({"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})
# JSON processors whose first operand is a program in their own language (it can read the environment).
JSON_PROGRAMS = word_set("jq gojq jaq yq")
# Variables a value must not be assigned to: they choose programs, libraries or code other programs load.
SENSITIVE_VARIABLES = DANGER_ENV | CMD_ENV | word_set(
    "PATH IFS CDPATH ENV BASH_ENV PS1 PS2 PS3 PS4 PROMPT_COMMAND SHELL HOME TMPDIR GLOBIGNORE BASH_XTRACEFD INPUTRC "
    "HISTFILE MAIL MAILPATH GCONV_PATH LOCPATH NLSPATH HOSTALIASES RESOLV_HOST_CONF MALLOC_CONF TERMINFO TERMCAP "
    "NODE_OPTIONS NODE_PATH RUBYOPT RUBYLIB PERL5OPT PERL5LIB PERLLIB PYTHONPATH PYTHONHOME PYTHONSTARTUP "
    "PYTHONWARNINGS PYTHONINSPECT PYTHONBREAKPOINT JAVA_TOOL_OPTIONS _JAVA_OPTIONS JDK_JAVA_OPTIONS CLASSPATH LUA_INIT "
    "LUA_PATH LUA_CPATH PHPRC PHP_INI_SCAN_DIR OPENSSL_CONF OPENSSL_ENGINES SSLKEYLOGFILE CURL_HOME WGETRC "
    "XDG_CONFIG_HOME XDG_CONFIG_DIRS XDG_DATA_DIRS ZDOTDIR LESSKEY")
SENSITIVE_VARIABLE = re.compile(
    r"^(LD_|DYLD_|BASH_FUNC_|GIT_|PYTHON|PERL|RUBY|NODE_|NPM_CONFIG_|LUA_|LC_|GCONV|DOCKER_|KUBE|SSH_|GNUPG|GPG_)|"
    r"(PATH|_OPTIONS|_OPTS|_COMMAND|_CMD|EDITOR|PAGER|_SHELL|PRELOAD|_HOOK|_HOOKS|_PROGRAM|_ASKPASS|_CONFIG)$")
# A here-document delimiter tree-sitter and /bin/sh read the same way: a plain word, whole-quoted or backslashed.
HEREDOC_DELIMITER = re.compile(
    r"""^(?:[A-Za-z0-9_][A-Za-z0-9_.-]*|'[A-Za-z0-9_.-]+'|"[A-Za-z0-9_.-]+"|\\[A-Za-z0-9_.-]+)$""")
TEST_BINARY = word_set("= == != < > -eq -ne -lt -le -gt -ge -nt -ot -ef =~")
TEST_UNARY_SAFE = word_set("-n -z -a -b -c -d -e -f -g -h -k -L -O -G -N -p -r -s -S -t -u -w -x")
ARITHMETIC = frozenset({"arithmetic_expansion", "c_style_for_statement", "subscript", "postfix_expression",
                        "ternary_expression"})


class TemplateRefused(ValueError):
    """The template puts a placeholder (or a value derived from one) where it could be read as code."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Site:
    """One placeholder occurrence: character span in the template, parameter name, and the reference text."""

    start: int
    end: int
    name: str
    reference: str  # the environment variable holding the value


def _parse(text: str):
    parser = getattr(_local, "parser", None)
    if parser is None:
        from tree_sitter import Parser

        parser = _local.parser = Parser(_language())
    return parser.parse(text.encode())


def _text(node: Node) -> str:
    return node.text.decode("utf-8", "replace")


def _line(node: Node) -> int:
    return node.start_point[0] + 1


def _walk(node: Node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _first_error(root: Node) -> Node | None:
    return next((n for n in _walk(root) if n.is_error or n.is_missing), None)


def _unescape_word(text: str) -> str:
    return re.sub(r"\\(\n|.)", lambda m: "" if m.group(1) == "\n" else m.group(1), text, flags=re.S)


def _unescape_dquoted(text: str) -> str:
    return re.sub(r"\\([$`\"\\\n])", lambda m: "" if m.group(1) == "\n" else m.group(1), text)


@dataclass
class _Script:
    """One parsed script (the template, or code a template hands to `sh -c` / `eval`) and what carries a value."""

    root: Node
    ours: dict[tuple[int, int], str]              # byte span of our references -> label "{{.x}}"
    tainted: dict[str, str]                       # variable name -> label of the value it carries
    where: str = ""                               # "" for the template, else "in the code run by sh -c: "
    depth: int = 0
    stdin: str | None = None                      # label of a value on the input this (nested) script inherits
    problems: list[str] = field(default_factory=list)
    fds: dict[str, str] = field(default_factory=dict)      # file descriptor opened on a value -> its label
    written: dict[str, str] = field(default_factory=dict)  # file (base name, "*": computed) holding a value -> label
    functions: dict[str, Node] = field(default_factory=dict)
    _memo: dict = field(default_factory=dict)

    def refuse(self, message: str) -> None:
        message = self.where + message
        if message not in self.problems:
            self.problems.append(message)

    # --- taint ---------------------------------------------------------------------------------------------------
    def expansion_label(self, node: Node) -> str | None:
        """The label of the value an expansion node yields, if it carries one (ours, a tainted variable, a positional
        parameter, or a command substitution whose commands see one)."""
        key = (node.start_byte, node.end_byte, node.type)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = None  # cycles are impossible in a tree, but keep the memo honest while recursing
        label = None
        if node.type in ("expansion", "simple_expansion"):
            label = self.ours.get((node.start_byte, node.end_byte))
            if label is None:
                name = next((c for c in node.children if c.type in ("variable_name", "special_variable_name")), None)
                text = _text(name) if name is not None else ""
                if text in self.tainted:
                    label = f"${text} (it carries {self.tainted[text]})"
                elif text.isdigit() and (text != "0" or self.depth > 0) or text in ("@", "*"):
                    label = f"${text} (a positional parameter, which can carry an argument)"
        elif node.type in ("command_substitution", "process_substitution"):
            inner = self.contains_taint(node, skip_self=True) or self.stdin_taint(node)
            if inner and node.type == "command_substitution":
                label = f"the output of {_text(node)[:60]} (it carries {inner})"
        self._memo[key] = label
        return label

    def contains_taint(self, node: Node, skip_self: bool = False) -> str | None:
        """The label of the first value-carrying expansion inside `node` (its whole subtree)."""
        key = ("contains", node.start_byte, node.end_byte, node.type, skip_self)
        if key in self._memo:
            return self._memo[key]
        found = None
        for n in _walk(node):
            if skip_self and n is node:
                continue
            if n.type in ("expansion", "simple_expansion", "command_substitution"):
                label = self.expansion_label(n)
                if label:
                    found = label
                    break
        self._memo[key] = found
        return found

    def stdin_taint(self, node: Node) -> str | None:
        """The label of a value that reaches `node`'s standard input: a here-document, here-string or `<` file
        around it, or an earlier stage of a pipeline it is in (a command substitution's commands share the input
        of the command around them, so the walk goes on through them)."""
        key = ("stdin", node.start_byte, node.end_byte, node.type)
        if key not in self._memo:
            self._memo[key] = None
            self._memo[key] = self._stdin_taint(node)
        return self._memo[key]

    def _stdin_taint(self, node: Node) -> str | None:
        if node.type == "command":
            for redirect in node.children:
                label = self._redirect_input_taint(redirect)
                if label:
                    return label
        child, parent = node, node.parent
        while parent is not None:
            if parent.type == "redirected_statement":
                for redirect in parent.children_by_field_name("redirect"):
                    label = self._redirect_input_taint(redirect)
                    if label:
                        return label
            elif parent.type == "heredoc_redirect":  # tree-sitter nests `cat <<EOF | sh` pipelines in the redirect
                label = self._redirect_input_taint(parent)
                if label:
                    return label
            elif parent.type == "pipeline":
                for stage in parent.children:
                    if stage.start_byte >= child.start_byte:
                        break
                    label = self.contains_taint(stage) or (self.stdin_taint(stage) if stage.is_named else None)
                    if label:
                        return label
            child, parent = parent, parent.parent
        return self.stdin

    def _redirect_input_taint(self, redirect: Node) -> str | None:
        if redirect.type == "heredoc_redirect":
            body = next((c for c in redirect.children if c.type == "heredoc_body"), None)
            return self.contains_taint(body) if body is not None else None
        if redirect.type == "herestring_redirect":
            return self.contains_taint(redirect)
        if redirect.type == "file_redirect":
            op = next((c for c in redirect.children if not c.is_named), None)
            dest = redirect.child_by_field_name("destination")
            if op is None or dest is None:
                return None
            if _text(op) == "<&":
                return self.fds.get(_text(dest)) or self.contains_taint(dest)
            if _text(op) in ("<", "<>"):
                return self.contains_taint(dest) or self.file_taint(self._static(dest))
        return None

    def file_taint(self, path: str) -> str | None:
        """The label of a value a file may hold: written by a value-carrying command earlier in the template (matched
        by base name; a computed path may be any of them), or a file descriptor opened on one."""
        if TAINT in path:
            return "a file a value names"
        if re.fullmatch(r"/dev/fd/\d+|/proc/self/fd/\d+", path):
            return self.fds.get(path.rsplit("/", 1)[1]) or (self.stdin if path.endswith("/0") else None)
        if not self.written:
            return None
        if UNKNOWN_VALUE in path:
            return next(iter(self.written.values()))
        return self.written.get(path.rstrip("/").rsplit("/", 1)[-1]) or self.written.get("*")

    def _program_argv(self, node: Node) -> list[str]:
        """A command's argv after its wrappers (`env`, `command`, `timeout` …): the program that really runs."""
        name = node.child_by_field_name("name")
        cmd = SimpleCommand([self._static(name)] + [self._static(a) for a in node.children_by_field_name("argument")],
                            {}, [], 0, 0)
        for _ in range(MAX_DEPTH + 2):
            try:
                res = _unwrap(cmd) if cmd.argv else None
            except (IndexError, ValueError):
                res = None
            if res is None or res[0] != "argv":
                break
            cmd.argv = list(res[1])
        return cmd.argv

    def exported(self) -> str | None:
        """A value-carrying variable the template exports (programs such as make read their whole environment)."""
        allexport = False
        for node in _walk(self.root):
            if node.type == "declaration_command" and node.children and node.children[0].type == "export":
                for c in node.children[1:]:
                    if c.type == "variable_assignment" and (label := self.contains_taint(c)):
                        return label
                    if c.type == "variable_name" and _text(c) in self.tainted:
                        return self.tainted[_text(c)]
            elif node.type == "command" and _text(node).startswith(("set -a", "set -o allexport")):
                allexport = True
        return next(iter(self.tainted.values())) if allexport and self.tainted else None

    def track(self) -> None:
        """Files and descriptors that end up holding a value: written by a command that carries one (an output
        redirection, tee, cp, dd …), or a descriptor opened on a value-carrying input (`exec 3<<EOF`); `exec` with
        no command turns a value-carrying input into the rest of the script's standard input."""
        for node in _walk(self.root):
            if node.type == "function_definition":
                name = next((c for c in node.children if c.type == "word"), None)
                body = next((c for c in node.children if c.is_named and c.type != "word"), None)
                if name is not None and body is not None:
                    self.functions[_text(name)] = body
        for node in _walk(self.root):
            if node.type not in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
                continue
            statement = node.parent
            if statement is None:
                continue
            fd = next((c for c in node.children if c.type == "file_descriptor"), None)
            op = next((_text(c) for c in node.children if not c.is_named and _text(c) != "\n"), "")
            if op in (">", ">>", ">|", "&>", "&>>", ">&", "&>|"):
                dest = node.child_by_field_name("destination")
                if dest is None or (op == ">&" and re.fullmatch(r"\d+|-", _text(dest))):
                    continue
                label = self.contains_taint(statement) or self.stdin_taint(statement)
                if label:
                    path = self._static(dest)
                    key = "*" if TAINT in path or UNKNOWN_VALUE in path else path.rstrip("/").rsplit("/", 1)[-1]
                    self.written.setdefault(key, label)
                continue
            label = self._redirect_input_taint(node)
            if not label:
                continue
            if fd is not None and _text(fd) != "0":
                self.fds.setdefault(_text(fd), label)
            elif _is_bare_exec(statement):
                self.stdin = self.stdin or label
        for node in _walk(self.root):
            if node.type != "command" or node.child_by_field_name("name") is None:
                continue
            argv = self._program_argv(node)
            if not argv or basename(argv[0]) not in FILE_WRITERS:
                continue
            label = self.contains_taint(node) or self.stdin_taint(node)
            if label:
                for path in argv[1:]:
                    path = path.removeprefix("of=")
                    if not path.startswith("-"):
                        key = "*" if TAINT in path or UNKNOWN_VALUE in path else path.rstrip("/").rsplit("/", 1)[-1]
                        self.written.setdefault(key, label)
        self._memo.clear()

    def settle(self) -> None:
        """Variables, files and descriptors that carry a value, until neither finds more (each can feed the other:
        `exec <<EOF` makes `v=$(cat)` carry it; a variable written to a file makes the file carry it)."""
        for _ in range(16):
            before = (len(self.tainted), len(self.written), len(self.fds), self.stdin)
            self.propagate()
            self.track()
            if (len(self.tainted), len(self.written), len(self.fds), self.stdin) == before:
                return
        raise TemplateRefused(["the value passes through too many variables, files and inputs for goclaw to follow"])

    def propagate(self) -> None:
        """Variables that end up holding a value: assigned from one (directly, or from another such variable),
        iterated over one, or read from input. A dependency graph, so a long chain costs one pass; rounds only
        re-read what a command's input brings (`printf %s "$v" | { w=$(cat); }`), and never ending is a refusal."""
        flows: list[tuple[str, list[Node]]] = []  # (variable, the nodes its value comes from)
        for node in _walk(self.root):
            if node.type == "variable_assignment":
                name = node.child_by_field_name("name")
                if name is not None and name.type == "subscript":
                    name = next((c for c in name.children if c.type == "variable_name"), None)
                value = node.child_by_field_name("value")
                if name is not None and value is not None:
                    flows.append((_text(name), [value]))
            elif node.type == "for_statement":
                var = node.child_by_field_name("variable")
                values = node.children_by_field_name("value")
                if var is not None and not values:
                    self.tainted.setdefault(_text(var), "the positional parameters")
                elif var is not None:
                    flows.append((_text(var), values))
            elif node.type == "command" and node.child_by_field_name("name") is not None:
                argv = self._program_argv(node)  # `command read v`, `builtin read v` too
                if argv and argv[0] in ("read", "getopts", "mapfile", "readarray", "printf", "wait"):
                    for word in argv[1:]:
                        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", word):
                            self.tainted.setdefault(word, f"what {argv[0]} reads")
        readers: dict[str, list[int]] = {}  # variable -> flows whose value mentions it
        for index, (_, nodes) in enumerate(flows):
            for n in (x for v in nodes for x in _walk(v)):
                if n.type in ("variable_name", "special_variable_name"):
                    readers.setdefault(_text(n), []).append(index)
        for _ in range(16):
            before = len(self.tainted)
            self._memo.clear()
            queue = []
            for target, nodes in flows:
                label = next((lb for v in nodes if (lb := self.contains_taint(v))), None)
                if label and target not in self.tainted:
                    self.tainted[target] = label
                    queue.append(target)
            queue.extend(self.tainted)
            while queue:
                source = queue.pop()
                for index in readers.get(source, ()):
                    target = flows[index][0]
                    if target not in self.tainted:
                        self.tainted[target] = f"${source} (it carries {self.tainted[source]})"
                        queue.append(target)
            self._memo.clear()
            if len(self.tainted) == before:
                return
        raise TemplateRefused(["the value passes through too many commands' input for goclaw to follow"])

    # --- where an expansion stands -----------------------------------------------------------------------------------
    def position(self, node: Node, label: str, ours: bool) -> str | None:
        """The context of a value-carrying expansion (WORD, DQUOTE, HEREDOC), or None after refusing it."""
        operators = {_text(c) for c in node.children_by_field_name("operator")} if node.type == "expansion" else set()
        if operators & {"!", "@"}:
            self.refuse(f"{label} is expanded with ${{!…}} or ${{…@…}}, which bash evaluates further (a subscript "
                        "or a prompt string runs commands)")
            return None
        context, n, p = WORD, node, node.parent
        if p is not None and p.type == "string":
            prev = p.prev_sibling
            if prev is not None and prev.type == "$" and prev.end_byte == p.start_byte:
                self.refuse(f"{label} is inside $\"…\" (a locale-translated string in bash): use plain double quotes")
                return None
            context, n, p = DQUOTE, p, p.parent
        elif p is not None and p.type == "heredoc_body":
            return HEREDOC
        for a in _ancestors(node):
            if a.type == "command_substitution" and a.children and a.children[0].type == "`" and ours:
                self.refuse(f"{label} is inside `…` (backquotes re-read their text): write $(…)")
                return None
        bare_ok = ours  # our references are written quoted; the author's own `$v` must be quoted by the author
        while p is not None:
            t = p.type
            if t == "concatenation":
                n, p = p, p.parent
                continue
            if t == "command":
                if context == WORD and not bare_ok:
                    self.refuse(f"{label} is unquoted in a command's arguments, so the shell would split it into "
                                "several words and expand * and ? in it: write it in double quotes")
                    return None
                return context
            if t == "command_name":
                self.refuse(f"{label} is the name of the command to run: the value would choose the program")
                return None
            if t == "variable_assignment":
                if n == p.child_by_field_name("value"):
                    return context
                self.refuse(f"{label} is part of a variable name")
                return None
            if t == "file_redirect":
                if n == p.child_by_field_name("destination"):
                    return context
                self.refuse(f"{label} is part of a redirection operator")
                return None
            if t == "herestring_redirect":
                return context
            if t in ("case_statement", "case_item"):
                return context  # the subject, or a pattern (a quoted reference matches literally)
            if t == "for_statement":
                if n in p.children_by_field_name("value"):
                    if context == WORD and not bare_ok:
                        self.refuse(f"{label} is unquoted in a for loop's list, so the shell would split it into "
                                    "several items: write it in double quotes")
                        return None
                    return context
                self.refuse(f"{label} names the loop variable")
                return None
            if t == "test_command":
                if p.children and p.children[0].type == "[":
                    return context  # judged with the test's operators (see _judge_test)
                self.refuse(f"{label} is inside [[ … ]], where bash evaluates operands as arithmetic and patterns "
                            "(code can run): use [ … ]")
                return None
            if t in ("binary_expression", "unary_expression", "parenthesized_expression", "negated_expression"):
                n, p = p, p.parent
                continue
            if t in ARITHMETIC or (t == "compound_statement" and p.children and p.children[0].type == "(("):
                self.refuse(f"{label} is inside an arithmetic expression or subscript, which the shell evaluates "
                            "(in bash, `a[$(cmd)]` there runs cmd)")
                return None
            if t == "expansion":
                self.refuse(f"{label} is inside ${{…}}, where it would be read as a pattern, offset or name: "
                            "assign it to a variable first")
                return None
            if t == "declaration_command":
                self.refuse(f"{label} is a variable name or option of {_text(p.children[0])}: only the value "
                            "after NAME= may hold it")
                return None
            if t == "unset_command":
                self.refuse(f"{label} would name the variables or functions unset removes")
                return None
            if t == "array":
                self.refuse(f"{label} is inside a bash array, which /bin/sh does not run")
                return None
            if t == "function_definition":
                self.refuse(f"{label} names a function")
                return None
            if t in ("heredoc_redirect", "heredoc_start"):
                self.refuse(f"{label} is part of a here-document delimiter")
                return None
            self.refuse(f"{label} stands where goclaw cannot tell how the shell would read it ({t})")
            return None
        self.refuse(f"{label} stands outside any command")
        return None

    # --- what consumes it -------------------------------------------------------------------------------------------
    def judge(self) -> None:
        for node in _walk(self.root):
            if node.type in ("expansion", "simple_expansion", "command_substitution") and \
                    (node.start_byte, node.end_byte) not in self.ours:
                label = self.expansion_label(node)
                if label:
                    self.position(node, label, ours=False)
            elif node.type == "variable_name" and _text(node) in self.tainted and (
                    _in_arithmetic(node) or _expansion_operand(node)):
                self.refuse(f"${_text(node)} (it carries {self.tainted[_text(node)]}) is used in an arithmetic "
                            "expression (a subscript, or an offset or length in ${…}), which evaluates it")
            elif node.type == "subscript" and (names := self._tainted_in_index(node)):
                self.refuse(f"${names[0]} (it carries {self.tainted[names[0]]}) is named in the subscript "
                            f"{_text(node)[:60]}, which bash evaluates as arithmetic (in bash, `a[$(cmd)]` there runs cmd)")
            elif node.type == "declaration_command":
                self._judge_declaration(node)
            elif node.type == "variable_assignment":
                self._judge_assignment(node)
            elif node.type == "command":
                self._judge_command(node)
            elif node.type == "test_command" and node.children and node.children[0].type == "[":
                self._judge_test(node)

    def _tainted_in_index(self, subscript: Node) -> list[str]:
        """Tainted variables a subscript's index names bare (`a[v]`, `a[v+1]`: tree-sitter reads them as words)."""
        names = []
        for child in subscript.children[1:]:
            for n in _walk(child):
                if n.type == "word":
                    names += [w for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", _text(n)) if w in self.tainted]
        return names

    def _judge_declaration(self, node: Node) -> None:
        """bash's declare / typeset / local with -i (every assignment is arithmetic), -a / -A (a value that reads as
        `(…)` is a compound assignment, its subscripts arithmetic) or -n (the value names the variable `$r` reads,
        subscript included): a variable so declared must never hold a value, whenever it is assigned."""
        if not node.children or _text(node.children[0]) not in ("declare", "typeset", "local"):
            return
        options = [self._static(c) for c in node.children[1:] if c.type not in ("variable_assignment", "variable_name")]
        if not any(TAINT in o or UNKNOWN_VALUE in o or (o.startswith("-") and set(o[1:]) & set("iaAn"))
                   for o in options):
            return
        for child in node.children[1:]:
            name = child.child_by_field_name("name") if child.type == "variable_assignment" else \
                child if child.type == "variable_name" else None
            if name is not None and name.type == "subscript":
                name = next((c for c in name.children if c.type == "variable_name"), None)
            if name is not None and _text(name) in self.tainted:
                self.refuse(f"{self.tainted[_text(name)]} is assigned to {_text(name)}, which "
                            f"{_text(node.children[0])} {' '.join(options)[:40]} makes bash evaluate (as arithmetic, "
                            f"a compound array or a variable name), so code can run")

    def _judge_assignment(self, node: Node) -> None:
        name = node.child_by_field_name("name")
        value = node.child_by_field_name("value")
        label = self.contains_taint(value) if value is not None else None
        if name is not None and label and _sensitive(_text(name)):
            self.refuse(f"{label} is assigned to {_text(name)}, a variable that chooses programs, libraries or "
                        "code other programs load")

    def _static(self, node: Node | None) -> str:
        """A word's text as the shell would see it, with TAINT where a value lands and UNKNOWN_VALUE where something
        else is computed at run time."""
        if node is None:
            return ""
        t = node.type
        if t == "command_name":
            return "".join(self._static(c) for c in node.children)
        if t == "word":
            return _unescape_word(_text(node))
        if t == "number":
            return _text(node)
        if t == "raw_string":
            return _text(node)[1:-1]
        if t == "string":
            out = []
            for c in node.children:
                if c.type == '"':
                    continue
                out.append(_unescape_dquoted(_text(c)) if c.type == "string_content" else self._static(c))
            return "".join(out)
        if t == "concatenation":
            return "".join(self._static(c) for c in node.children)
        if t in ("expansion", "simple_expansion", "command_substitution"):
            if (node.start_byte, node.end_byte) in self.ours or self.expansion_label(node):
                return TAINT
            return "~" if _text(node) in ("$HOME", "${HOME}") else UNKNOWN_VALUE
        return TAINT if self.contains_taint(node) else UNKNOWN_VALUE

    def _judge_command(self, node: Node) -> None:
        name = node.child_by_field_name("name")
        if name is None:
            return
        argv = [self._static(name)] + [self._static(a) for a in node.children_by_field_name("argument")]
        assigns = {}
        for a in node.children:
            if a.type == "variable_assignment":
                n, v = a.child_by_field_name("name"), a.child_by_field_name("value")
                assigns[_text(n) if n is not None else ""] = self._static(v)
        stdin = self.stdin_taint(node)
        body = self.functions.get(argv[0])
        if body is not None:  # a function of the template: its body runs with this call's input (and arguments)
            if stdin and self.depth < 4:
                inner = _Script(body, self.ours, self.tainted, self.where + f"in function {argv[0]} (line "
                                f"{_line(node)}): ", self.depth + 1, stdin, fds=self.fds, written=self.written,
                                functions=self.functions)
                inner.judge()
                for problem in inner.problems:
                    if problem not in self.problems:
                        self.problems.append(problem)
            return
        self._judge_argv(argv, assigns, stdin, _literal_heredoc(node), _line(node))

    def _judge_argv(self, argv: list[str], assigns: dict[str, str], stdin: str | None, heredoc: str | None,
                    line: int) -> None:
        cmd = SimpleCommand(list(argv), dict(assigns), [], 0, 0)
        shown = " ".join(a.replace(TAINT, "{value}").replace(UNKNOWN_VALUE, "$…") for a in argv)[:80]
        for _ in range(MAX_DEPTH + 2):
            if not cmd.argv:
                return
            if cmd.name in ("xargs", "parallel") and stdin:
                self.refuse(f"`{shown}` (line {line}) splits its input, which carries {stdin}, into the arguments "
                            "of a command")
                return
            if TAINT in cmd.argv[0]:
                self.refuse(f"a value is the program `{shown}` runs (line {line}): it would choose the program")
                return
            if UNKNOWN_VALUE in cmd.argv[0] and (any(TAINT in a for a in cmd.argv) or stdin):
                self.refuse(f"`{shown}` (line {line}) hands a value to a program computed at run time, which "
                            "goclaw cannot judge: name the program literally")
                return
            if "/" in cmd.argv[0] and (label := self.file_taint(cmd.argv[0])):
                self.refuse(f"`{shown}` (line {line}) runs a file that holds {label}")
                return
            try:
                res = _unwrap(cmd)
            except (IndexError, ValueError):
                res = None
            for key, value in cmd.assigns.items():
                if key not in assigns and TAINT in value and _sensitive(key):  # `env NAME=…` (prefixes: above)
                    self.refuse(f"a value is assigned to {key} by `{shown}` (line {line}), a variable that chooses "
                                "programs or code")
            if res is None:
                break
            kind, value = res
            if kind == "code":
                if TAINT in value or UNKNOWN_VALUE in value and any(TAINT in a for a in cmd.argv):
                    self.refuse(f"`{shown}` (line {line}) runs a value as shell code ({cmd.name})")
                else:
                    self.nested(value, f"in the code {cmd.name} runs (line {line}): ", stdin, _env_names(cmd))
                return
            cmd.argv = list(value)
        self._judge_program(cmd, stdin, heredoc, shown, line)

    def _judge_program(self, cmd: SimpleCommand, stdin: str | None, heredoc: str | None, shown: str,
                       line: int) -> None:
        nm, args = cmd.name, cmd.args
        base = interpreter_name(nm)
        where = f"`{shown}` (line {line})"
        tainted_at = [i for i, a in enumerate(args) if TAINT in a]
        env_names = _env_names(cmd)

        def reads(path: str, what: str) -> bool:
            """Refuse when the program reads its code from `path` and a value may be there."""
            label = stdin if path in STDIN_PATHS and stdin else self.file_taint(path)
            if label:
                self.refuse(f"{where} reads {what} from {path.replace(TAINT, '{value}').replace(UNKNOWN_VALUE, '$…')}"
                            f", which holds {label}")
            return bool(label)

        if nm in SHELLS or base in SHELLS:
            kind, at, ended = _shell_operand(args)
            if any(i < at or i == at and not (kind == "stdin" and ended) for i in tainted_at):
                self.refuse(f"{where} lets a value be the code {nm} runs, the script it runs or one of its options")
            elif kind == "code":
                if at < len(args) and UNKNOWN_VALUE not in args[at]:
                    self.nested(args[at], f"in the code {nm} -c runs (line {line}): ", stdin, env_names)
            elif kind == "script":
                reads(args[at], "its script")
            elif stdin:
                self.refuse(f"{where} runs its input as commands, and {stdin} reaches that input")
            elif heredoc is not None:
                self.nested(heredoc, f"in the here-document {nm} runs (line {line}): ", None, env_names)
            return
        if nm == "alias":
            self.refuse(f"{where}: an alias changes how /bin/sh reads the lines after it, so goclaw cannot judge "
                        "where the arguments land; write the command out")
            return
        if nm in NAME_OR_CODE_BUILTINS:
            if tainted_at or (stdin and nm in ("eval", ".", "source")):
                self.refuse(f"{where} passes a value to {nm}, which reads its operands as code, names or options")
            elif nm in (".", "source") and args:
                reads(args[0], "the commands it runs")
            elif nm == "eval" and not any(UNKNOWN_VALUE in a for a in args):
                self.nested(" ".join(args), f"in the code eval runs (line {line}): ", stdin)
            return
        if nm == "set":
            end = args.index("--") if "--" in args else len(args)
            if any(i < end for i in tainted_at):
                self.refuse(f"{where} passes a value to set as an option: write `set -- …`")
            return
        if nm == "printf":
            fmt = 1 if args[:1] == ["--"] else 0
            if tainted_at and (tainted_at[0] <= fmt or "-v" in args):
                self.refuse(f"{where} makes a value printf's format or option: write printf '%s' {{{{.x}}}}")
            return
        if nm == "test":
            self._judge_test_words(args, where)
            return
        program_files = [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-f", "--file", "--from-file")]
        program_files += [a.split("=", 1)[1] for a in args if a.startswith(("--file=", "--from-file="))]
        if nm in AWKS | JSON_PROGRAMS | word_set("sed") and any(reads(f, "its program") for f in program_files):
            return
        if nm in AWKS:
            ops = operands(args, word_set("-F -v -W --assign --field-separator"))
            program_at = len(args) if "-f" in args or not ops else args.index(ops[0])
            if any(i <= program_at for i in tainted_at if not args[i - 1:i] == ["-v"]) or \
                    any(args[i - 1:i] == ["-f"] for i in tainted_at):
                self.refuse(f"{where} lets a value be (part of) the awk program or its options")
            return
        if nm == "sed":
            scripts = [i + 1 for i, a in enumerate(args) if a in ("-e", "--expression", "-f", "--file")]
            if not scripts:
                ops = operands(args, word_set("-l --line-length"))
                scripts = [args.index(ops[0])] if ops else []
            first = min(scripts) if scripts else len(args)
            if any(i in scripts or i < first for i in tainted_at):
                self.refuse(f"{where} lets a value be (part of) the sed script or its options (sed can run "
                            "commands)")
            return
        if nm in JSON_PROGRAMS:
            i, program_at, data = 0, None, set()
            while i < len(args) and program_at is None:
                a = args[i]
                if a in ("--arg", "--argjson", "--slurpfile", "--rawfile"):
                    data.add(i + 2)  # the value (or file) of a named variable: data to the program
                    i += 3
                elif a in ("--indent", "-L", "--library-path", "--args", "--jsonargs") or a in ("-f", "--from-file"):
                    if a in ("-f", "--from-file"):
                        program_at = i + 1
                    i += 1 if a in ("--args", "--jsonargs") else 2
                elif a.startswith("-") and a != "-" and TAINT not in a:
                    i += 1
                else:
                    program_at = i
            if any(i <= (program_at if program_at is not None else len(args)) for i in tainted_at if i not in data):
                self.refuse(f"{where} lets a value be the {nm} program or one of its options: pass it with "
                            f"--arg name {{{{.x}}}}")
            return
        if nm == "perl" and tainted_at and any(re.fullmatch(r"-[a-zA-Z]*[np][a-zA-Z]*", a) for a in args):
            self.refuse(f"{where}: perl -n/-p opens its operands with <>, which runs a file name ending in | "
                        "as a command")
            return
        if base in INTERPRETERS:
            code = inline_program(cmd)
            if code is not None and TAINT in code:
                self.refuse(f"{where} puts a value inside the program {nm} runs")
                return
            flags = INTERPRETERS[base]
            code_at = next((i for i, a in enumerate(args) if a in flags or (len(a) > 2 and a[:2] in flags)), None)
            ops = [i for i, a in enumerate(args) if not a.startswith("-") and (i == 0 or args[i - 1] not in (
                "-W", "-X", "-r", "--require", "-I", "-M", "-x"))]
            ops += [i for i, a in enumerate(args) if a == "-" and i not in ops]
            script_at = code_at + 1 if code_at is not None else (min(ops) if ops else None)
            if script_at is None:
                if stdin or tainted_at:
                    self.refuse(f"{where} reads its program from its input or options, and a value reaches them")
                return
            if any(i <= script_at for i in tainted_at):
                self.refuse(f"{where} lets a value choose the program {nm} runs or its options")
            elif code_at is None and script_at < len(args):
                reads(args[script_at], "its program")
            return
        if nm in COMMAND_RUNNING_TOOLS and (tainted_at or stdin or env_names or self.exported()):
            self.refuse(f"{where} passes a value to {nm}, which can run shell commands found in its arguments "
                        "or input")
            return
        if nm == "git":
            i = 0
            while i < len(args) and args[i].startswith("-"):
                i += 2 if args[i] in ("-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path",
                                      "--config-env") else 1
            if any(j <= i for j in tainted_at):
                self.refuse(f"{where} lets a value choose git's options or subcommand (git -c can run commands)")
            return
        if nm == "find":
            for i, a in enumerate(args):
                if a in ("-exec", "-execdir", "-ok", "-okdir"):
                    j = i + 1
                    while j < len(args) and args[j] not in (";", "+", "\\;"):
                        j += 1
                    if i + 1 < j:
                        self._judge_argv(args[i + 1:j], {}, stdin, None, line)
            return
        if executes_stdin(cmd) and stdin:
            self.refuse(f"{where} runs its input as code, and {stdin} reaches it")

    def _judge_test(self, node: Node) -> None:
        words: list[str] = []

        def flatten(n: Node) -> None:
            for c in n.children:
                if c.type in ("[", "]"):
                    continue
                if c.type in ("binary_expression", "unary_expression", "parenthesized_expression"):
                    flatten(c)
                else:
                    words.append(self._static(c) if c.is_named and c.type != "test_operator" else _text(c))

        flatten(node)
        self._judge_test_words(words, f"`{_text(node)[:80]}` (line {_line(node)})")

    def _judge_test_words(self, words: list[str], where: str) -> None:
        """`[`/`test` read their operands by position: a value whole in a word must sit where it can only be an
        operand (next to a literal operator, or alone), never where it could be read as `-v` (bash evaluates its
        operand's subscript) or as another operator."""
        for i, w in enumerate(words):
            if TAINT not in w or (w[0] != TAINT and w[0] not in "-!()=<>"):
                continue  # no value, or literal text first: the word cannot spell an operator
            before = words[i - 1] if i > 0 else None
            after = words[i + 1] if i + 1 < len(words) else None
            last = i + 1 == len(words)
            if len(words) == 1 or before in TEST_BINARY or before in TEST_UNARY_SAFE or after in TEST_BINARY or \
                    (before == "!" and last and i == 1):
                continue
            self.refuse(f"{where}: a value stands where [ or test could read it as an operator; put a literal "
                        "operator next to it ([ -n {{.x}} ], [ {{.x}} = text ])")

    def heredocs(self) -> None:
        """Every `$` and backquote of an unquoted here-document must be one tree-sitter read as an expansion: it
        misses a few (backquotes, a tab before the first line's `$` in `<<-`), and /bin/sh would expand them."""
        for node in _walk(self.root):
            if node.type != "heredoc_body" or node.parent is None:
                continue
            start = next((c for c in node.parent.children if c.type == "heredoc_start"), None)
            if start is None or any(q in _text(start) for q in "'\"\\"):
                continue  # quoted delimiter: /bin/sh expands nothing there either
            covered = [(c.start_byte, c.end_byte) for c in node.children if c.type in (
                "expansion", "simple_expansion", "command_substitution", "arithmetic_expansion")]
            body, base = node.text, node.start_byte
            i = 0
            while i < len(body):
                ch = body[i:i + 1]
                if ch == b"\\":
                    i += 2
                    continue
                nxt = body[i + 1:i + 2]
                if ch == b"`" or ch == b"$" and (nxt.isalnum() or nxt in (b"_", b"{", b"(", b"@", b"*", b"#", b"?",
                                                                          b"$", b"!", b"-")):
                    if not any(s <= base + i < e for s, e in covered):
                        line = node.start_point[0] + 1 + body[:i].count(NEWLINE)
                        self.refuse(f"line {line} of a here-document "
                                    "holds an expansion goclaw's parser cannot read (backquotes, or a tab right "
                                    "before a $ on the first line of a <<- here-document): write $(…), or put text "
                                    "before it")
                        return
                i += 1

    def nested(self, code: str, where: str, stdin: str | None = None,
               env_names: dict[str, str] | None = None) -> None:
        """Judge code the template hands to another shell (a literal `sh -c '…'`, `eval '…'`, a here-document a
        shell reads): there, positional parameters and the template's value-carrying variables carry values."""
        if self.depth >= 4:
            self.refuse(where + "code nested too deeply to judge")
            return
        tree = _parse(code)
        error = _first_error(tree.root_node)
        if error is not None:
            self.refuse(where + f"it is not valid shell syntax (line {_line(error)}), so goclaw cannot judge it")
            return
        for problem in _structure_problems(tree.root_node):
            self.refuse(where + problem)
        inner = _Script(tree.root_node, {}, {**self.tainted, **(env_names or {})}, self.where + where,
                        self.depth + 1, stdin, fds=dict(self.fds), written=dict(self.written))
        inner.heredocs()
        inner.settle()
        inner.judge()
        for problem in inner.problems:
            if problem not in self.problems:
                self.problems.append(problem)


class _NoAnalysis:
    cmds: list = []


_NO_ANALYSIS = _NoAnalysis()


def _unwrap(cmd: SimpleCommand):
    """shell_check's `unwrap`, with the shell's own wrappers read exactly: `command` looks a name up only when its
    leading options hold -v/-V (shell_check looks anywhere, which `command eval printf -v …` would slip past)."""
    if cmd.name in ("command", "builtin", "exec"):
        args, i = cmd.args, 0
        while i < len(args) and args[i].startswith("-") and args[i] != "-":
            if args[i] == "--":
                i += 1
                break
            if cmd.name == "command" and ("v" in args[i] or "V" in args[i]):
                return None
            i += 2 if cmd.name == "exec" and args[i] == "-a" else 1
        return ("argv", args[i:]) if args[i:] else None
    return unwrap(_NO_ANALYSIS, cmd)


def _ancestors(node: Node):
    p = node.parent
    while p is not None:
        yield p
        p = p.parent


def _shell_operand(args: list[str]) -> tuple[str, int, bool]:
    """How a shell given `args` finds its commands: ("code", index of the -c string), ("script", index of the script
    file) or ("stdin", index of the first operand after the options, len(args) if none); and whether `--` ended the
    options (an operand after it cannot turn into one)."""
    has_c = has_s = ended = False
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 2
            continue
        if a == "--":
            i += 1
            ended = True
            break
        if a.startswith("--command"):
            return "code", (i if "=" in a else i + 1), False
        if a[:1] in "-+" and len(a) > 1 and TAINT not in a:
            has_c = has_c or (a[0] == "-" and not a.startswith("--") and "c" in a)
            has_s = has_s or (a[0] == "-" and not a.startswith("--") and "s" in a)
            i += 1
            continue
        break
    if has_c:
        return "code", i, ended
    if has_s or i >= len(args) or args[i] in STDIN_PATHS:
        return "stdin", i, ended
    return "script", i, ended


def _env_names(cmd: SimpleCommand) -> dict[str, str]:
    """Variables a command puts a value in for the program it runs (`v=… sh -c`, `env v=… sh -c`)."""
    return {k: "a value in its environment" for k, v in cmd.assigns.items() if TAINT in v}


def _is_bare_exec(statement: Node) -> bool:
    """`exec` with redirections only (it rewires the shell's own descriptors for the rest of the script), also
    spelled `command exec`, `builtin exec`, `exec --`."""
    command = statement.child_by_field_name("body") if statement.type == "redirected_statement" else statement
    if command is None or command.type != "command":
        return False
    name = command.child_by_field_name("name")
    words = [_unescape_word(_text(w)).strip("'\"") for w in [name, *command.children_by_field_name("argument")]
             if w is not None]
    while words and words[0] in ("command", "builtin", "--"):
        words.pop(0)
    return words[:1] == ["exec"] and all(w == "--" for w in words[1:])


def _in_arithmetic(node: Node) -> bool:
    for a in _ancestors(node):
        if a.type in ARITHMETIC or (a.type == "compound_statement" and a.children and a.children[0].type == "(("):
            return True
        if a.type == "test_command" and a.children and a.children[0].type == "[[":
            return True
        if a.type in ("command", "program", "string", "heredoc_body"):
            return False
    return False


def _expansion_operand(node: Node) -> bool:
    """Is this bare variable name an operand of a `${…}` operator rather than its subject (`${s:n}`, `${s:0:n}`:
    bash evaluates offsets and lengths as arithmetic)?"""
    child = node
    for a in _ancestors(node):
        if a.type == "expansion":
            subject = next((c for c in a.children if c.type in ("variable_name", "subscript", "special_variable_name")),
                           None)
            return subject is not None and subject is not child and subject.start_byte != child.start_byte
        if a.type in ("command", "program", "string", "heredoc_body", "command_substitution"):
            return False
        child = a
    return False


def _sensitive(name: str) -> bool:
    return name in SENSITIVE_VARIABLES or bool(SENSITIVE_VARIABLE.search(name))


def _literal_heredoc(command: Node) -> str | None:
    """The body of a here-document fed to `command`, when it holds no expansion (a shell reading it runs it)."""
    parent = command.parent
    if parent is None or parent.type != "redirected_statement":
        return None
    for redirect in parent.children_by_field_name("redirect"):
        if redirect.type == "heredoc_redirect":
            body = next((c for c in redirect.children if c.type == "heredoc_body"), None)
            if body is not None:
                return _text(body)
    return None


def _structure_problems(root: Node) -> list[str]:
    """Shapes where tree-sitter is known to read a script differently from /bin/sh: refused, never guessed. A
    here-document delimiter must be a plain word; nothing but the delimiter line may sit between `<<` and the body
    (tree-sitter swallows a body line that starts with a backslash into the command); no unquoted word spans lines."""
    problems = []
    for node in _walk(root):
        if node.type in COVERED and node.child_count:
            pos = node.start_byte
            for child in [*node.children, None]:
                end = child.start_byte if child is not None else node.end_byte
                if end > pos:
                    text = _source(root)[pos:end].replace(b"\\\n", b"")
                    if text.strip(b" \t\n"):
                        problems.append(f"line {node.start_point[0] + 1}: goclaw's parser skips part of this command "
                                        f"({text.strip()[:20].decode('utf-8', 'replace')!r}): write it another way")
                        break
                if child is not None:
                    pos = max(pos, child.end_byte)
        if node.type == "heredoc_start" and not HEREDOC_DELIMITER.fullmatch(_text(node)):
            problems.append(f"here-document delimiter {_text(node)[:40]!r} (line {_line(node)}): write a plain "
                            "word such as EOF, or 'EOF' to keep the text literal")
        elif node.type == "heredoc_redirect":
            for child in node.children:
                if child.type not in ("heredoc_body", "heredoc_end") and b"\n" in child.text.replace(b"\\\n", b""):
                    problems.append(f"the here-document at line {_line(node)} is followed by commands that run "
                                    "past its line, which goclaw's parser misreads: end the line after <<EOF")
                    break
        elif node.type in ("number", "word") and node.text.isdigit() and node.next_sibling is not None and \
                node.next_sibling.start_byte == node.end_byte and node.next_sibling.type.endswith("redirect"):
            problems.append(f"line {_line(node)}: goclaw's parser reads the descriptor of {_text(node)}"
                            f"{_text(node.next_sibling)[:8]} as an argument: write the redirection another way")
        elif node.type == "word" and b"\n" in node.text.replace(b"\\\n", b""):
            problems.append(f"line {_line(node)}: goclaw's parser reads a word across lines here (a backslash at the "
                            "start of a here-document line?): rewrite it")
    return list(dict.fromkeys(problems))


def _source(root: Node) -> bytes:
    return root.text if root.type == "program" else _source(root.parent) if root.parent is not None else root.text


def _explain(node: Node, label: str) -> str:
    """Why a placeholder's reference would not expand where the template puts it."""
    for a in [node, *_ancestors(node)]:
        if a.type == "raw_string":
            return (f"{label} is inside single quotes, where the shell expands nothing (single-quoted text is "
                    "usually a program for awk, sed or another interpreter): write it outside the quotes or inside "
                    "double quotes")
        if a.type == "ansi_c_string":
            return f"{label} is inside $'…', where the shell expands nothing"
        if a.type == "comment":
            return f"{label} is inside a comment"
        if a.type == "heredoc_body":
            start = next((c for c in a.parent.children if c.type == "heredoc_start"), None) if a.parent else None
            if start is not None and any(q in _text(start) for q in "'\"\\"):
                return (f"{label} is in a here-document with a quoted delimiter (<<'EOF'), where the shell expands "
                        "nothing: write the delimiter unquoted (<<EOF)")
            return (f"{label} is where goclaw's parser cannot read a here-document's line (a tab right before it "
                    "on the first line of a <<- here-document): put text before it")
        if a.type == "heredoc_start":
            return f"{label} is part of a here-document delimiter"
    return f"{label} is escaped by a backslash or joined to a $, so the shell would not expand it as one value"


def check_template(template: str, sites: list[Site]) -> list[str]:
    """The context (WORD, DQUOTE, HEREDOC) of each site, in order. Raises TemplateRefused with every problem."""
    parts, pos, spans = [], 0, []
    for site in sites:
        parts.append(template[pos:site.start])
        start = len("".join(parts).encode())
        ref = "${" + site.reference + "}"
        parts.append(ref)
        spans.append((start, start + len(ref.encode())))
        pos = site.end
    parts.append(template[pos:])
    tree = _parse("".join(parts))
    root = tree.root_node
    error = _first_error(root)
    if error is not None:
        raise TemplateRefused([f"with its placeholders in place, the command is not valid shell syntax near line "
                               f"{_line(error)} (goclaw must read its structure to place the arguments)"])
    problems = _structure_problems(root)
    labels = {span: "{{." + site.name + "}}" for span, site in zip(spans, sites)}
    script = _Script(root, labels, {})
    contexts = []
    for span, site in zip(spans, sites):
        label = labels[span]
        node = root.descendant_for_byte_range(*span)
        if node is None or node.type != "expansion" or (node.start_byte, node.end_byte) != span:
            script.refuse(_explain(node, label) if node is not None else f"{label} could not be placed")
            contexts.append(None)
            continue
        contexts.append(script.position(node, label, ours=True))
    script.heredocs()
    script.settle()
    script.judge()
    problems += script.problems
    if problems:
        raise TemplateRefused(problems)
    return contexts


# --- the cross-check -------------------------------------------------------------------------------------------------
_SENTINEL = "goclawargumentvalue"


def cross_check(script: str, references: list[str]) -> list[str]:
    """Problems the project's shell analysis (bashlex, its own lexer, wrapper unwrapping) finds with the rendered
    script when every reference holds a marker value: the marker must never be a program, shell code (`sh -c`,
    `eval`, a here-document a shell reads), an inline interpreter program, or input a command runs as code."""
    analysis = CommandAnalysis()
    for name in references:
        analysis.vars[name] = _SENTINEL
    text, _ = normalize_text(script)
    try:
        analysis.text(text, 0)
    except Exception:  # the analysis is tolerant by design; a crash is a refusal, never a pass
        return ["the command could not be analysed by goclaw's shell check"]
    problems = []

    def mentions(c) -> bool:  # here-document bodies are kept raw: a reference there is still a value
        return any(_SENTINEL in a for a in c.argv) or any(_SENTINEL in t or "GOCLAW_ARG_" in t for _, t in c.redirs) \
            or any(_SENTINEL in v for v in c.assigns.values())

    def inner(cmds, seen):
        for c in cmds:
            if id(c) in seen:
                continue
            seen.add(id(c))
            yield c
            yield from inner(c.code or [], seen)
            yield from inner(c.subs, seen)

    for c in analysis.cmds:
        if c.argv and _SENTINEL in c.argv[0]:
            problems.append("goclaw's shell check finds a value run as a program (through a file or wrapper)")
        if c.icode and _SENTINEL in c.icode:
            problems.append(f"goclaw's shell check finds a value inside the program {c.name} runs")
        if any(mentions(x) for x in inner(c.code or [], set())):
            problems.append(f"goclaw's shell check finds a value inside the shell code {c.name} runs")
        if executes_stdin(c):
            upstream = [u for u in analysis.cmds if u.pipe == c.pipe and u.stage < c.stage]
            if any(mentions(u) for u in upstream) or any(_SENTINEL in t or "GOCLAW_ARG_" in t for op, t in c.redirs
                                                        if op in ("<<", "<<<", "<")):
                problems.append(f"goclaw's shell check finds {c.name or 'a command'} running input that carries "
                                "a value as code")
    return list(dict.fromkeys(problems))


def verify_script(script: str, sites: list[Site], contexts: list[str]) -> list[str]:
    """Defence in depth on the rendered script: every reference is where the template analysis put it, quoted, and
    nothing else in the script names a reference variable."""
    tree = _parse(script)
    root = tree.root_node
    if _first_error(root) is not None:
        return ["the rendered command is not valid shell syntax"]
    expected = {}
    for site, context in zip(sites, contexts):
        expected[site.reference] = expected.get(site.reference, 0) + 1
    found: dict[str, int] = {}
    problems = []
    for node in _walk(root):
        if node.type not in ("expansion", "simple_expansion"):
            continue
        name = next((c for c in node.children if c.type == "variable_name"), None)
        if name is None or _text(name) not in expected:
            continue
        found[_text(name)] = found.get(_text(name), 0) + 1
        parent = node.parent
        quoted = parent is not None and (parent.type == "heredoc_body" or parent.type == "string" and
                                         (parent.prev_sibling is None or parent.prev_sibling.type != "$" or
                                          parent.prev_sibling.end_byte != parent.start_byte))
        if node.type != "expansion" or not quoted or len(node.children) != 3:
            problems.append(f"the reference ${_text(name)} is not quoted in the rendered command")
    if found != expected:
        problems.append("the rendered command does not hold exactly one reference per placeholder")
    return problems
