"""Read-only views for approval rules: tools_app.services.approvals judges "allow always" rules and the
exec allowlist on the analysed command (argv after unquoting and unwrapping), never on its text.
"""
from __future__ import annotations

from dataclasses import dataclass

from .analysis import analyse, normalize_text
from .vocabulary import PROCESS_PATH, UNKNOWN_OUTPUT, UNKNOWN_VALUE

# ---------------------------------------------------------------- read-only views for approval rules
# tools_app.services.approvals judges "allow always" rules and the exec allowlist on the analysed command (argv after
# unquoting and unwrapping), never on its text. These helpers only read the analysis above.

_RULE_SYNTAX = frozenset(";&|()<>$`*?[{}\n")


def unquoted_shell_syntax(text: str) -> frozenset[str]:
    """The shell syntax `text` uses outside quotes: operators and redirections (`; & | ( ) < >`), expansions (`$`,
    backquotes, also inside double quotes), globs (`* ? [`), braces, newlines, a comment (`#`), a tilde at the start
    of a word (`~`), a trailing backslash (`\\`) or an open quote (`unterminated`). Empty for a command made only of
    literal words, quotes and escapes."""
    found: set[str] = set()
    i, n, word_start = 0, len(text), True
    while i < n:
        c = text[i]
        if c == "\\":
            if i + 1 >= n:
                found.add("\\")
            i, word_start = i + 2, False
            continue
        if c == "'":
            k = text.find("'", i + 1)
            if k < 0:
                found.add("unterminated")
                break
            i, word_start = k + 1, False
            continue
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                if text[j] == "\\":
                    j += 2
                    continue
                if text[j] in "$`":
                    found.add(text[j])
                j += 1
            if j >= n:
                found.add("unterminated")
                break
            i, word_start = j + 1, False
            continue
        if c in " \t":
            i, word_start = i + 1, True
            continue
        if c in _RULE_SYNTAX:
            found.add(c)
        elif c == "#" and word_start:
            found.add("#")
        elif c == "~" and (word_start or text[i - 1] in "=:"):
            found.add("~")
        i, word_start = i + 1, False
    return frozenset(found)


@dataclass(frozen=True)
class RuleCommandView:
    """One command the shell would run, as approval rules see it: its argv after unquoting and unwrapping, the
    wrappers peeled off around it (outermost first: `timeout 5`, `env`, `sh -c <code>`), the variables set for it,
    the redirections of it and its wrappers, whether it carries an inline program (`python -c`, an awk program: the
    caller decides whether it can judge that program), and why its words are not plain literals (empty when they are)."""

    argv: tuple[str, ...]
    layers: tuple[tuple[str, ...], ...]
    assigns: tuple[str, ...]
    redirects: tuple[tuple[str, str], ...]
    inline_code: bool
    problems: tuple[str, ...]


@dataclass(frozen=True)
class RuleAnalysis:
    """Every command a shell string would run (RuleCommandView), the syntax it uses outside quotes, and problems of
    the text as a whole (look-alike characters, obfuscation, commands that are neither of those views)."""

    commands: tuple[RuleCommandView, ...]
    syntax: frozenset[str]
    problems: tuple[str, ...]


def _peeled_layers(c) -> list:
    """The wrapper words removed at each unwrapping step (`timeout 5` of `timeout 5 git status`)."""
    out = []
    for k, whole in enumerate(c.wrapped):
        inner = c.wrapped[k + 1] if k + 1 < len(c.wrapped) else c.argv
        cut = len(whole) - len(inner)
        out.append(tuple(whole[:cut]) if cut > 0 and list(whole[cut:]) == list(inner) else tuple(whole))
    return out


def analyse_for_rules(command: str) -> RuleAnalysis:
    """Read-only view of the analysis for approval rules and the exec allowlist (never raises)."""
    if not isinstance(command, str) or not command.strip() or "\x00" in command:
        return RuleAnalysis((), frozenset(), ("an empty command or a NUL byte",))
    problems = []
    normalized, control = normalize_text(command)
    if normalized != command or control:
        problems.append("Unicode look-alike or control characters")
    syntax = unquoted_shell_syntax(command)
    try:
        analysis = analyse(command)
    except Exception:
        return RuleAnalysis((), syntax, tuple(problems + ["the command could not be analysed"]))
    if analysis.hits:
        problems.append("nesting that is too deep")
    odd = analysis.flags & {"unbalanced", "obfuscated_name", "ifs", "indirect", "ansi_c", "prompt", "control"}
    if odd:
        problems.append("obfuscated shell syntax (" + ", ".join(sorted(odd)) + ")")
    if analysis.funcs or analysis.loops:
        problems.append("functions or loops")
    parent: dict = {}
    for c in analysis.cmds:
        for inner in c.code or ():
            parent.setdefault(id(inner), c)
    used, views = set(), []
    for leaf in (c for c in analysis.cmds if c.argv and c.code is None):
        chain = [leaf]
        while id(chain[-1]) in parent:
            chain.append(parent[id(chain[-1])])
        chain.reverse()
        used.update(id(c) for c in chain)
        layers, assigns, redirects, issues, inline = [], [], [], [], False
        for c in chain:
            layers.extend(_peeled_layers(c))
            if c is not leaf:
                layers.append(tuple(c.argv))
            assigns.extend(c.assigns)
            redirects.extend(c.redirs)
            if c.subs or c.procs:
                issues.append("command or process substitution")
            if c.stdin_exec:
                issues.append("a program that runs its input")
            inline = inline or bool(c.icode)
            if c.unknown or c.globbed or c.indirect:
                issues.append("a program name computed at run time")
            if c.parent or len(c.wrappers) != len(c.wrapped):
                issues.append(f"started by another program ({c.parent or c.wrappers[-1]})")
        if any(m in a for layer in layers for a in layer for m in (UNKNOWN_VALUE, UNKNOWN_OUTPUT, PROCESS_PATH)) or any(m in a for a in leaf.argv for m in (UNKNOWN_VALUE, UNKNOWN_OUTPUT, PROCESS_PATH)):
            issues.append("a value computed at run time")
        views.append(RuleCommandView(tuple(leaf.argv), tuple(layers), tuple(assigns), tuple(redirects), inline,
                                     tuple(dict.fromkeys(issues))))
    if not views:
        problems.append("no command")
    if any(id(c) not in used for c in analysis.cmds):
        problems.append("assignments or redirections without a command")
    return RuleAnalysis(tuple(views), syntax, tuple(problems))
