"""What a command does, as data: per program, which arguments write, delete, run other programs, … (widened exec
rules and the exec allowlist judge the *analysed* command, never its text), and segment-wise globs on normalised
workspace paths (glob rules on path arguments)."""
from __future__ import annotations

import fnmatch
import functools
import logging
import os
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Callable


from goclaw.errors import ValidationError
from tools_app.choices import RuleMatch
from tools_app.paths import PathError, is_within, resolve_in_workspace, workspace_root
from tools_app.security.shell_check import analyse_for_rules, unquoted_shell_syntax

logger = logging.getLogger("goclaw.approvals")


# --- what a command does: the effects of its arguments ---------------------------------------------------
# A widened exec rule (prefix / glob) and the exec allowlist cover a command only when goclaw can tell what its
# arguments do. Effects are data: per program, which arguments write, delete, run other programs, … A program or
# subcommand missing from this table is not classified, and a command that uses it is only ever covered exactly.
WRITE, DELETE, RUN, CONFIG, SEND, NETWORK, OUTSIDE, UNKNOWN = (
    "write", "delete", "run", "config", "send", "network", "outside", "unknown")
TEXT = "text"  # not an effect: marks an argument that is program text (a sed script), judged by its parser, not a path
EFFECT_TEXT = {
    WRITE: "write or create files (or update refs)",
    DELETE: "delete files or history (including forced pushes)",
    RUN: "run other programs or code (-exec, hooks, pagers, editors, system(), …)",
    CONFIG: "change the program's configuration (git -c, --exec-path, --git-dir, date --set, …)",
    SEND: "upload local files (curl -T, -d @file, …)",
    NETWORK: "reach another host or URL scheme than an http(s) URL",
    OUTSIDE: "name a path outside the workspace (absolute, ~, or a .. that leaves it)",
    UNKNOWN: "do something goclaw cannot classify (program or subcommand not in its table, script files, …)",
}
# Effects the further arguments of a widened rule may have, and only when the approved command's did too.
INHERITABLE_EFFECTS = frozenset({WRITE, DELETE})
# A command with one of these anywhere is never covered by a widened rule (only by an exact one).
NEVER_WIDENED = frozenset({RUN, CONFIG, SEND, OUTSIDE, UNKNOWN})


@dataclass(frozen=True)
class _Program:
    """How one program's arguments act. `effects`: of running it at all; `long`: --options (an abbreviation of one
    counts as it, as getopt_long accepts unambiguous prefixes); `short`: option letters, also inside combined flags
    (`-ni`); `words`: whole arguments (find's `-delete`); `check`: program-specific parsing (scripts, subcommands)."""

    effects: tuple[str, ...] = ()
    long: dict = field(default_factory=dict)
    short: dict = field(default_factory=dict)
    words: dict = field(default_factory=dict)
    check: Callable | None = None


def _operands(args: list[str]) -> list[tuple[int, str]]:
    return [(i, a) for i, a in enumerate(args) if a == "-" or not a.startswith("-")]


def _uniq_check(argv: list[str], at: int, escapes) -> list:
    """`uniq [options] [input [output]]`: a second operand is a file it writes (values of -f/-s/-w skipped)."""
    rest, out, skip, operands = argv[at + 1:], [], False, []
    for i, a in enumerate(rest):
        if skip:
            skip = False
        elif a in ("-f", "-s", "-w", "--skip-fields", "--skip-chars", "--check-chars"):
            skip = True
        elif a == "-" or not a.startswith("-"):
            operands.append(at + 1 + i)
    if len(operands) >= 2:
        out.append((WRITE, operands[1]))
    return out


def _sed_script(script: str) -> list[tuple[str, str | None]]:
    """Effects of a GNU sed script: `e` and the `e` flag of `s` run commands, `w`/`W` and the `w` flag write files,
    `r`/`R` read them. Anything this small parser does not understand is UNKNOWN."""
    out: list[tuple[str, str | None]] = []
    s, i, n = script, 0, len(script)

    def regex_end(j: int, delim: str) -> int:
        while j < n and s[j] != delim:
            if s[j] == "\\":
                j += 1
            elif s[j] == "\n":
                return -1
            j += 1
        return j if j < n else -1

    def address(j: int) -> int:
        if j < n and s[j].isdigit():
            while j < n and (s[j].isdigit() or s[j] == "~"):
                j += 1
        elif j < n and s[j] == "$":
            j += 1
        elif j < n and s[j] in "/\\":
            delim = "/" if s[j] == "/" else (s[j + 1] if j + 1 < n else "")
            j = regex_end(j + (1 if s[j] == "/" else 2), delim) if delim and delim != "\n" else -1
            if j < 0:
                return -1
            j += 1
            while j < n and s[j] in "IM":
                j += 1
        return j

    def line_rest(j: int) -> tuple[str, int]:
        k = s.find("\n", j)
        k = n if k < 0 else k
        return s[j:k].strip(), k

    while i < n:
        while i < n and s[i] in " \t\n;":
            i += 1
        if i >= n:
            break
        i = address(i)
        if i < 0:
            return [(UNKNOWN, None)]
        while i < n and s[i] in " \t":
            i += 1
        if i < n and s[i] == ",":
            i += 1
            if i < n and s[i] in "+~":
                i += 1
            i = address(i)
            if i < 0:
                return [(UNKNOWN, None)]
        while i < n and s[i] in " \t!":
            i += 1
        if i >= n:
            return [(UNKNOWN, None)]
        c, i = s[i], i + 1
        if c in "{}=dDgGhHnNpPxzF":
            continue
        if c == "#":
            _, i = line_rest(i)
        elif c in "qQlL":
            while i < n and (s[i].isdigit() or s[i] in " \t"):
                i += 1
        elif c in ":btTv":
            while i < n and s[i] not in ";\n":
                i += 1
        elif c in "aic":
            while True:  # text to the end of the line; a trailing backslash continues it
                _, k = line_rest(i)
                if k > i and s[k - 1] == "\\" and k < n:
                    i = k + 1
                    continue
                i = k
                break
        elif c in "rRwW":
            target, i = line_rest(i)
            out.append((WRITE if c in "wW" else "read", target))
        elif c == "e":
            _, i = line_rest(i)
            out.append((RUN, None))
        elif c in "sy":
            if i >= n or s[i] in "\n\\":
                return [(UNKNOWN, None)]
            delim = s[i]
            j = regex_end(i + 1, delim)
            k = regex_end(j + 1, delim) if j >= 0 else -1
            if k < 0:
                return [(UNKNOWN, None)]
            i = k + 1
            if c == "s":
                while i < n and s[i] not in ";\n}":
                    f = s[i]
                    if f == "w":
                        target, i = line_rest(i + 1)
                        out.append((WRITE, target))
                        break
                    if f == "e":
                        out.append((RUN, None))
                    elif not (f in "gpiImM" or f.isdigit() or f in " \t"):
                        return [(UNKNOWN, None)]
                    i += 1
        else:
            return [(UNKNOWN, None)]
    return out


def _sed_check(argv: list[str], at: int, escapes) -> list:
    """Scripts given with -e/--expression (or the first operand) are parsed; -f/--file scripts are UNKNOWN."""
    out, scripts, explicit, i = [], [], False, at + 1
    while i < len(argv):
        a = argv[i]
        name = a.split("=", 1)[0]
        if a.startswith("--") and len(name) > 2:
            value = a.split("=", 1)[1] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else "")
            takes = "=" not in a
            if "--expression".startswith(name):
                scripts.append((value, i + (1 if takes else 0)))
                explicit, i = True, i + (2 if takes else 1)
                continue
            if "--file".startswith(name):
                out.append((UNKNOWN, i))
                explicit, i = True, i + (2 if takes else 1)
                continue
            if "--line-length".startswith(name) and takes:
                i += 2
                continue
        elif a.startswith("-") and len(a) > 1:
            for j, ch in enumerate(a[1:], start=2):
                if ch in "ef":
                    value, extra = (a[j:], 0) if a[j:] else (argv[i + 1] if i + 1 < len(argv) else "", 1)
                    if ch == "e":
                        scripts.append((value, i + extra))
                    else:
                        out.append((UNKNOWN, i))
                    explicit, i = True, i + extra
                    break
                if ch == "l":
                    i += 0 if a[j:] else 1
                    break
                if ch == "i":
                    break  # the rest is the backup suffix; -i itself is in the short table
        elif not explicit:
            scripts.append((a, i))
            explicit = True
        i += 1
    for script, index in scripts:
        out.append((TEXT, index))
        for kind, target in _sed_script(script):
            if target is not None and target not in ("/dev/stdout", "/dev/stderr") and escapes(target):
                out.append((OUTSIDE, index))
            if kind != "read":
                out.append((kind, index))
    if not explicit:
        out.append((UNKNOWN, at))
    return out


_AWK_STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')


def _awk_check(argv: list[str], at: int, escapes) -> list:
    """The program text (first operand, or -e/--source) is scanned: system(), pipes, `@load` run code; output
    redirection (`>`) is UNKNOWN (the file is named inside the program). -f/-i/-E/-l/--load load code from files."""
    out, programs, i = [], [], at + 1
    while i < len(argv):
        a = argv[i]
        name = a.split("=", 1)[0]
        if a == "--":
            if i + 1 < len(argv) and not programs:
                programs.append((argv[i + 1], i + 1))
            break
        if a.startswith("--") and len(name) > 2:
            takes = "=" not in a
            if any(o.startswith(name) for o in ("--file", "--include", "--exec")):
                out.append((UNKNOWN, i))
            elif "--load".startswith(name):
                out.append((RUN, i))
            elif "--source".startswith(name):
                programs.append((a.split("=", 1)[1] if not takes else (argv[i + 1] if i + 1 < len(argv) else ""), i))
            elif any(o.startswith(name) for o in ("--pretty-print", "--profile", "--dump-variables")):
                out.append((WRITE, i))
                takes = False
            if takes and any(o.startswith(name) for o in ("--file", "--include", "--exec", "--load", "--source",
                                                           "--field-separator", "--assign")):
                i += 1
        elif a.startswith("-") and len(a) > 1:
            ch, attached = a[1], a[2:]
            if ch in "fiEW":
                out.append((UNKNOWN, i))
            elif ch == "l":
                out.append((RUN, i))
            elif ch == "e":
                programs.append((attached or (argv[i + 1] if i + 1 < len(argv) else ""), i))
            elif ch in "opd":
                out.append((WRITE, i))
            if ch in "fiEWleFv" and not attached:
                i += 1
        elif not programs:
            programs.append((a, i))
        i += 1
    if not programs:
        out.append((UNKNOWN, at))
    for text, index in programs:
        out.append((TEXT, index))
        code = _AWK_STRING.sub('""', text)  # an unterminated string stays code: flagged rather than missed
        if "system" in code or "|" in code.replace("||", "") or "@" in code:
            out.append((RUN, index))
        if ">" in code:
            out.append((UNKNOWN, index))
    return out


def _tar_check(argv: list[str], at: int, escapes) -> list:
    """Old-style first argument (`tar xzf a.tgz`) is a cluster of option letters."""
    if len(argv) > at + 1 and argv[at + 1] and not argv[at + 1].startswith("-"):
        return [(_TAR_SHORT[ch], at + 1) for ch in argv[at + 1] if ch in _TAR_SHORT]
    return []


def _remote_operand(a: str) -> bool:
    return "://" in a or "::" in a or ("@" in a and ":" in a) or a.startswith(("/", ".", "~"))


def _rsync_check(argv: list[str], at: int, escapes) -> list:
    """Operands on another host (`host:path`, rsync://) reach the network."""
    return [(NETWORK, at + 1 + i) for i, a in _operands(argv[at + 1:]) if ":" in a]


def _curl_check(argv: list[str], at: int, escapes) -> list:
    """Request bodies read from files (`-d @file`, `-F x=@file`, `-F x=<file`) upload them; URL schemes other than
    http(s) (file:, dict:, gopher:, …) are UNKNOWN."""
    out, i = [], at + 1
    data_long = ("--data", "--data-binary", "--data-urlencode", "--data-ascii", "--json", "--form")
    while i < len(argv):
        a = argv[i]
        value = None
        name = a.split("=", 1)[0]
        if a.startswith("--") and len(name) > 2 and any(o.startswith(name) for o in data_long):
            value = a.split("=", 1)[1] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else "")
        elif a.startswith("-") and not a.startswith("--"):
            for j, ch in enumerate(a[1:], start=2):
                if ch in "dF":
                    value = a[j:] or (argv[i + 1] if i + 1 < len(argv) else "")
                    break
        elif "://" in a and not a.lower().startswith(("http://", "https://")):
            out.append((UNKNOWN, i))
        if value is not None and ("@" in value or "<" in value):
            out.append((SEND, i))
        i += 1
    return out


def _git_push_check(argv: list[str], at: int, escapes) -> list:
    out = []
    for i, a in _operands(argv[at + 1:]):
        if _remote_operand(a):
            out.append((NETWORK, at + 1 + i))
        elif a.startswith(("+", ":")) or ":+" in a:
            out.append((DELETE, at + 1 + i))  # forced update or deleting a remote ref
    return out


def _git_fetch_check(argv: list[str], at: int, escapes) -> list:
    return [(NETWORK, at + 1 + i) for i, a in _operands(argv[at + 1:]) if _remote_operand(a)]


def _git_operands_write(argv: list[str], at: int, escapes) -> list:
    """`git branch NAME` / `git tag NAME` create refs (a listing pattern is over-approximated as one)."""
    return [(WRITE, at + 1 + i) for i, _ in _operands(argv[at + 1:])]


_GIT_READ_LONG = {"--output": WRITE, "--output-directory": WRITE, "--ext-diff": RUN, "--textconv": RUN,
                  "--open-files-in-pager": RUN, "--upload-pack": RUN, "--exec": RUN, "--filters": RUN}
_GIT_GLOBAL = {"-c": CONFIG, "--config-env": CONFIG, "--exec-path": CONFIG, "--git-dir": CONFIG, "--work-tree": CONFIG,
               "--namespace": CONFIG, "--super-prefix": CONFIG, "-p": RUN, "--paginate": RUN}
_GIT_GLOBAL_VALUE = frozenset({"-C", "-c", "--config-env", "--git-dir", "--work-tree", "--namespace", "--super-prefix"})
_GIT_SUBCOMMANDS = {
    **{sub: _Program(long=_GIT_READ_LONG) for sub in (
        "status log show diff blame annotate shortlog rev-parse ls-files ls-tree cat-file describe rev-list "
        "whatchanged name-rev merge-base show-ref for-each-ref count-objects check-ignore check-attr diff-tree "
        "diff-files diff-index cherry").split()},
    "grep": _Program(long=_GIT_READ_LONG, short={"O": RUN}),
    "branch": _Program(long={"--delete": DELETE, "--move": WRITE, "--copy": WRITE, "--force": WRITE,
                             "--set-upstream-to": WRITE, "--unset-upstream": WRITE, "--edit-description": RUN,
                             "--track": WRITE, "--create-reflog": WRITE, "--recurse-submodules": WRITE},
                       short={"d": DELETE, "D": DELETE, "m": WRITE, "M": WRITE, "c": WRITE, "C": WRITE, "f": WRITE,
                              "u": WRITE, "t": WRITE}, check=_git_operands_write),
    "tag": _Program(long={"--delete": DELETE, "--force": WRITE, "--annotate": WRITE, "--sign": WRITE,
                          "--local-user": WRITE, "--message": WRITE, "--file": WRITE, "--edit": RUN},
                    short={"d": DELETE, "f": WRITE, "a": WRITE, "s": WRITE, "u": WRITE, "m": WRITE, "F": WRITE, "e": RUN},
                    check=_git_operands_write),
    "add": _Program(effects=(WRITE,), long={"--edit": RUN, "--interactive": RUN, "--patch": RUN},
                    short={"e": RUN, "i": RUN, "p": RUN}),
    "commit": _Program(effects=(WRITE,), long={"--edit": RUN, "--reedit-message": RUN, "--interactive": RUN,
                                               "--patch": RUN},
                       short={"e": RUN, "c": RUN, "p": RUN}),
    "fetch": _Program(effects=(NETWORK, WRITE), long={"--upload-pack": RUN, "--prune": DELETE, "--prune-tags": DELETE,
                                                      "--recurse-submodules": NETWORK},
                      short={"p": DELETE, "P": DELETE}, check=_git_fetch_check),
    "pull": _Program(effects=(NETWORK, WRITE), long={"--upload-pack": RUN, "--prune": DELETE, "--edit": RUN,
                                                     "--recurse-submodules": NETWORK},
                     short={"e": RUN, "p": DELETE}, check=_git_fetch_check),
    "push": _Program(effects=(NETWORK,), long={"--force": DELETE, "--force-with-lease": DELETE,
                                               "--force-if-includes": DELETE, "--delete": DELETE, "--mirror": DELETE,
                                               "--prune": DELETE, "--receive-pack": RUN, "--exec": RUN, "--all": WRITE,
                                               "--tags": WRITE, "--recurse-submodules": NETWORK},
                     short={"f": DELETE, "d": DELETE}, check=_git_push_check),
}


def _git_check(argv: list[str], at: int, escapes) -> list:
    """Global options before the subcommand (-c, --exec-path, -p …), then the subcommand's own table; a subcommand
    (or alias) not in the table is UNKNOWN."""
    out, i = [], at + 1
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
        a = argv[i]
        name = a.split("=", 1)[0]
        for opt, kind in _GIT_GLOBAL.items():
            if opt == name or (name.startswith("--") and len(name) > 2 and opt.startswith(name)):
                out.append((kind, i))
        i += 2 if a in _GIT_GLOBAL_VALUE else 1
    if i >= len(argv):
        return out
    spec = _GIT_SUBCOMMANDS.get(argv[i])
    if spec is None:
        return out + [(UNKNOWN, i)]
    return out + _program_effects(spec, argv, i, escapes)


_TAR_SHORT = {"x": WRITE, "c": WRITE, "r": WRITE, "u": WRITE, "A": WRITE, "g": WRITE, "I": RUN, "F": RUN, "P": OUTSIDE}
_READ_ONLY = _Program()
PROGRAMS: dict[str, _Program] = {
    **{name: _READ_ONLY for name in (
        "echo printf pwd true false ls cat head tail wc nl grep egrep fgrep stat du df diff cmp comm cut tr basename "
        "dirname realpath readlink whoami id uname which jq sleep seq rev fold column").split()},
    "rg": _Program(long={"--pre": RUN, "--pre-glob": RUN, "--hostname-bin": RUN}),
    "file": _Program(long={"--compile": WRITE}, short={"C": WRITE}),
    "tree": _Program(short={"o": WRITE, "R": WRITE}),
    "date": _Program(long={"--set": CONFIG}, short={"s": CONFIG}),
    "sort": _Program(long={"--output": WRITE, "--temporary-directory": WRITE, "--compress-program": RUN},
                     short={"o": WRITE, "T": WRITE}),
    "uniq": _Program(check=_uniq_check),
    **{name: _Program(effects=(WRITE,)) for name in ("touch", "mkdir", "cp", "ln", "tee")},
    "mv": _Program(effects=(WRITE, DELETE)),
    "rm": _Program(effects=(DELETE,), long={"--no-preserve-root": OUTSIDE}),
    "rmdir": _Program(effects=(DELETE,)),
    "find": _Program(words={"-delete": DELETE, "-exec": RUN, "-execdir": RUN, "-ok": RUN, "-okdir": RUN,
                            "-fprint": WRITE, "-fprint0": WRITE, "-fprintf": WRITE, "-fls": WRITE}),
    "xargs": _Program(effects=(RUN,)),
    "sed": _Program(long={"--in-place": WRITE}, short={"i": WRITE}, check=_sed_check),
    **{name: _Program(check=_awk_check) for name in ("awk", "gawk", "mawk", "nawk")},
    "tar": _Program(long={"--extract": WRITE, "--get": WRITE, "--create": WRITE, "--append": WRITE, "--update": WRITE,
                          "--catenate": WRITE, "--concatenate": WRITE, "--delete": WRITE, "--overwrite": WRITE,
                          "--listed-incremental": WRITE, "--index-file": WRITE, "--backup": WRITE,
                          "--unlink-first": DELETE, "--recursive-unlink": DELETE, "--remove-files": DELETE,
                          "--to-command": RUN, "--use-compress-program": RUN, "--checkpoint-action": RUN,
                          "--info-script": RUN, "--new-volume-script": RUN, "--rsh-command": RUN, "--rmt-command": RUN,
                          "--absolute-names": OUTSIDE},
                    short=_TAR_SHORT, check=_tar_check),
    "rsync": _Program(effects=(WRITE,),
                      long={"--rsh": RUN, "--rsync-path": RUN, "--remote-option": UNKNOWN, "--daemon": UNKNOWN,
                            "--config": UNKNOWN, "--server": UNKNOWN, "--sender": UNKNOWN, "--read-batch": UNKNOWN,
                            "--delete": DELETE, "--del": DELETE, "--delete-before": DELETE, "--delete-during": DELETE,
                            "--delete-delay": DELETE, "--delete-after": DELETE, "--delete-excluded": DELETE,
                            "--delete-missing-args": DELETE, "--remove-source-files": DELETE,
                            "--remove-sent-files": DELETE, "--force": DELETE, "--write-batch": WRITE,
                            "--only-write-batch": WRITE, "--log-file": WRITE, "--backup-dir": WRITE,
                            "--temp-dir": WRITE, "--partial-dir": WRITE, "--early-input": SEND,
                            "--copy-links": OUTSIDE, "--copy-unsafe-links": OUTSIDE, "--copy-dirlinks": OUTSIDE,
                            "--keep-dirlinks": OUTSIDE},
                      short={"e": RUN, "M": UNKNOWN, "L": OUTSIDE, "k": OUTSIDE, "K": OUTSIDE},
                      check=_rsync_check),
    "curl": _Program(effects=(NETWORK,),
                     long={"--output": WRITE, "--remote-name": WRITE, "--remote-name-all": WRITE, "--output-dir": WRITE,
                           "--create-dirs": WRITE, "--cookie-jar": WRITE, "--dump-header": WRITE, "--trace": WRITE,
                           "--trace-ascii": WRITE, "--stderr": WRITE, "--libcurl": WRITE, "--etag-save": WRITE,
                           "--hsts": WRITE, "--alt-svc": WRITE, "--upload-file": SEND, "--netrc-file": SEND,
                           "--config": UNKNOWN, "--write-out": UNKNOWN, "--unix-socket": UNKNOWN,
                           "--abstract-unix-socket": UNKNOWN, "--engine": UNKNOWN},
                     short={"o": WRITE, "O": WRITE, "c": WRITE, "D": WRITE, "T": SEND, "K": UNKNOWN, "w": UNKNOWN},
                     check=_curl_check),
    "git": _Program(check=_git_check),
}


def _program_effects(prog: _Program, argv: list[str], at: int, escapes) -> list[tuple[str, int]]:
    """(effect, index of the argument that causes it) for argv[at] run with argv[at + 1:]."""
    out = [(kind, at) for kind in prog.effects]
    for i in range(at + 1, len(argv)):
        a = argv[i]
        if a in prog.words:
            out.append((prog.words[a], i))
        elif a.startswith("--") and len(a) > 2:
            name = a.split("=", 1)[0]
            out.extend((kind, i) for opt, kind in prog.long.items() if opt.startswith(name))
        elif a.startswith("-") and len(a) > 1 and prog.short:
            out.extend((prog.short[ch], i) for ch in a[1:] if ch in prog.short)
    if prog.check is not None:
        out.extend(prog.check(argv, at, escapes))
    return out


def command_effects(argv: list[str] | tuple[str, ...], escapes: Callable[[str], bool] = lambda _: False) -> list[tuple[str, int]]:
    """What running argv does, as (effect, argument index), plus (TEXT, index) for arguments that are program text;
    a program not in PROGRAMS is UNKNOWN at index 0."""
    argv = list(argv)
    prog = PROGRAMS.get(argv[0]) if argv else None
    if prog is None:
        return [(UNKNOWN, 0)]
    return _program_effects(prog, argv, 0, escapes)


# Wrappers a widened rule or the allowlist looks through, with the only forms allowed: they change nothing the
# wrapped program does. Any other wrapper (sudo, xargs, env with options or assignments, bash -l, …) is not covered.
_PLAIN_SHELLS = frozenset({"sh", "bash", "dash"})


def _wrapper_problem(layer: tuple[str, ...]) -> str | None:
    name, args = (layer[0] if layer else ""), list(layer[1:])
    if name in _PLAIN_SHELLS:
        if len(args) == 2 and args[0] == "-c":
            syntax = unquoted_shell_syntax(args[1])
            return f"shell syntax inside {name} -c ({' '.join(sorted(syntax))})" if syntax else None
        return f"`{name}` with options other than one -c (login or interactive shells read start-up files)"
    if name == "timeout":
        i = 0
        while i < len(args) and args[i].startswith("-"):
            if args[i] in ("-s", "-k"):
                i += 2
            elif args[i] in ("--preserve-status", "--foreground", "-v", "--verbose") or \
                    args[i].startswith(("--signal=", "--kill-after=")):
                i += 1
            else:
                return f"the timeout option {args[i]}"
        if len(args) == i + 1 and args[i].replace(".", "", 1).rstrip("smhd").isdigit():
            return None
        return "an unusual timeout"
    if name == "nice" and (args == [] or (len(args) == 2 and args[0] == "-n" and args[1].lstrip("-+").isdigit())
                           or (len(args) == 1 and args[0][:1] == "-" and args[0][1:].lstrip("-").isdigit())):
        return None
    if name in ("nohup", "env", "command", "time") and args == []:
        return None
    return f"the wrapper `{shlex.join(layer)}`"


def _view_problem(view) -> str | None:
    """Why one analysed command cannot be covered by a widened rule or the allowlist, or None."""
    if view.problems:
        return view.problems[0]
    if view.inline_code and getattr(PROGRAMS.get(view.argv[0] if view.argv else ""), "check", None) is not _awk_check:
        return "it runs an inline program goclaw does not read"  # python -c …; awk programs are parsed by _awk_check
    if view.assigns:
        return "it sets environment variables (" + ", ".join(sorted(set(view.assigns))) + ")"
    if view.redirects:
        return "it redirects input or output"
    for layer in view.layers:
        problem = _wrapper_problem(layer)
        if problem:
            return problem
    return None


def _path_candidates(arg: str) -> list[str]:
    """The places an argument may name: itself, an option's value (`--out=x`, `-ox`), a `key=value` value and the
    parts of a colon list (not of a URL)."""
    out = [arg]
    if arg.startswith("-"):
        if "=" in arg:
            out.append(arg.split("=", 1)[1])
        elif not arg.startswith("--") and len(arg) > 2:
            out.append(arg[2:])
    elif "=" in arg:
        out.append(arg.split("=", 1)[1])
    for value in list(out):
        if ":" in value and "://" not in value:
            out.extend(value.split(":")[1:])
    return [c for c in out if c]


def _path_judge(workspace, working_dir: Any) -> Callable[[str], bool] | None:
    """A test "does this argument name a place outside the workspace?" for a command run in `working_dir`
    (absolute paths, `~`, and paths that leave the workspace lexically or through a symlink); None when the working
    directory itself is not inside the workspace."""
    wd = working_dir if working_dir is not None else "."
    if not isinstance(wd, str) or not wd:
        return None
    lexical_wd = posixpath.normpath(wd)
    if lexical_wd.startswith("/") and workspace is None or lexical_wd == ".." or lexical_wd.startswith("../"):
        return None
    root = real_wd = None
    if workspace is not None:
        try:
            root = workspace_root(workspace)
            real_wd = str(resolve_in_workspace(workspace, wd))
        except PathError:
            return None

    def escapes(arg: str) -> bool:
        for cand in _path_candidates(arg):
            if cand.startswith(("/", "~")):
                return True
            if ".." in cand.split("/"):
                joined = posixpath.normpath(posixpath.join(lexical_wd, cand))
                if joined == ".." or joined.startswith("../"):
                    return True
            if root is not None and not is_within(root, os.path.realpath(os.path.join(real_wd, cand))):
                return True
        return False

    return escapes


@dataclass(frozen=True)
class WordPattern:
    """An exec rule or allowlist entry as words: `literal` leading words must equal argv's first words; the next
    words are globs for one argument each (`*`/`?` never cross `/`); `rest`: any further arguments may follow."""

    words: tuple[str, ...]
    literal: int
    rest: bool

    @classmethod
    def parse(cls, match: str, pattern: str) -> "WordPattern":
        try:
            words = shlex.split(pattern)
        except ValueError:
            raise ValidationError("the pattern is not a valid list of shell words (check its quotes)", code="invalid_rule") from None
        if not words:
            raise ValidationError("the pattern is empty", code="invalid_rule")
        if match == RuleMatch.PREFIX:
            return cls(tuple(words), len(words), True)
        rest = len(words) > 1 and words[-1] == "*"
        words = words[:-1] if rest else words
        literal = next((k for k, w in enumerate(words) if any(ch in w for ch in "*?[")), len(words))
        return cls(tuple(words), literal, rest)

    def matches(self, argv: tuple[str, ...] | list[str]) -> bool:
        if len(argv) < len(self.words) or (not self.rest and len(argv) != len(self.words)):
            return False
        return all(argv[k] == w if k < self.literal else glob_match(w, argv[k]) for k, w in enumerate(self.words))

    def show(self) -> str:
        return shlex.join(self.words) + (" …" if self.rest else "")


def words_cover(wp: WordPattern, argv, escapes: Callable[[str], bool], *, allowed: frozenset = frozenset(),
                literal_effects_ok: bool = False) -> str | None:
    """None when argv is covered by the word pattern: it matches, and the arguments after the literal words have no
    effect outside `allowed` and name no place outside the workspace; else why not. Widened rules also refuse a
    NEVER_WIDENED effect in the literal words (`literal_effects_ok` is for admin-typed allowlist entries)."""
    if not wp.matches(argv):
        return f"it is not {wp.show()}"
    if literal_effects_ok and len(argv) == wp.literal and not wp.rest:
        return None  # an allowlist entry typed out in full: exactly that command
    effects = command_effects(argv, escapes)
    texts = {i for kind, i in effects if kind == TEXT}
    effects = [(kind, i) for kind, i in effects if kind != TEXT]
    if any(kind == UNKNOWN for kind, _ in effects):
        return f"goclaw cannot tell what the arguments of `{argv[0]}` do: {EFFECT_TEXT[UNKNOWN]}"
    if not literal_effects_ok:
        never = sorted({kind for kind, _ in effects if kind in NEVER_WIDENED})
        if never:
            return "it would " + "; ".join(EFFECT_TEXT[k] for k in never)
    free = {kind for kind, i in effects if i >= wp.literal}
    if any(escapes(a) for i, a in enumerate(argv) if i >= wp.literal and i not in texts):
        free.add(OUTSIDE)
    extra = sorted(free - set(allowed))
    if extra:
        return "its further arguments would " + "; ".join(EFFECT_TEXT[k] for k in extra)
    return None


@functools.lru_cache(maxsize=512)
def single_command_view(command: str):
    """(the one command a shell string runs, None) or (None, why it is not one plain command). Memoized: the
    result depends only on the text, and every rule of a tool checks the same command."""
    analysis = analyse_for_rules(command)
    if analysis.problems:
        return None, analysis.problems[0]
    if analysis.syntax:
        return None, "it uses shell syntax beyond plain words (" + " ".join(sorted(analysis.syntax)).replace("\n", "newline") + ")"
    if len(analysis.commands) != 1:
        return None, "it runs more than one command"
    view = analysis.commands[0]
    problem = _view_problem(view)
    return (None, problem) if problem else (view, None)


# --- path patterns: segment-wise globs on normalised workspace paths --------------------------------------
_WILD = frozenset("*?[")
PATH_ARGUMENT_NAMES = frozenset({"path", "file", "filename", "file_path", "filepath", "dir", "directory", "folder",
                                 "working_dir", "cwd"})


def is_path_argument(name: str) -> bool:
    return name in PATH_ARGUMENT_NAMES or name.endswith(("_path", "_dir", "_file"))


def _segment_ok(pattern: str, value: str) -> bool:
    if not any(ch in _WILD for ch in pattern):
        return pattern == value
    return value not in ("", ".", "..") and fnmatch.fnmatchcase(value, pattern)


def glob_match(pattern: str, value: str) -> bool:
    """Segment-wise glob: `*`, `?` and `[…]` match within one `/`-separated segment, `**` (a whole segment) matches
    any number of whole segments; wildcards never match an empty, `.` or `..` segment."""
    pat, val = pattern.split("/"), value.split("/")
    if len(pat) > 64 or pat.count("**") > 4:
        return False
    seen: dict[tuple[int, int], bool] = {}

    def go(i: int, j: int) -> bool:
        key = (i, j)
        if key not in seen:
            if i == len(pat):
                seen[key] = j == len(val)
            elif pat[i] == "**":
                k, ok = j, go(i + 1, j)
                while not ok and k < len(val) and val[k] not in ("", ".", ".."):
                    k += 1
                    ok = go(i + 1, k)
                seen[key] = ok
            else:
                seen[key] = j < len(val) and _segment_ok(pat[i], val[j]) and go(i + 1, j + 1)
        return seen[key]

    return go(0, 0)


def clean_path_pattern(pattern: Any) -> str:
    """A path glob as a rule keeps it: relative to the workspace, `.` and empty segments dropped, no `..`."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise ValidationError("a path pattern must be a non-empty string", code="invalid_rule")
    text = pattern.strip()
    if text.startswith(("/", "~")) or "\x00" in text or any(ord(ch) < 32 for ch in text):
        raise ValidationError("a path pattern is relative to the workspace (no leading / or ~)", code="invalid_rule")
    segments = [s for s in text.split("/") if s not in ("", ".")]
    if not segments or ".." in segments:
        raise ValidationError("a path pattern may not contain '..' segments", code="invalid_rule")
    if any("**" in s and s != "**" for s in segments):
        raise ValidationError("'**' must be a whole path segment (docs/**/x.md)", code="invalid_rule")
    return "/".join(segments)


def normalised_workspace_path(workspace, value: Any) -> str | None:
    """The workspace-relative real path a tool's path argument names (`.`/`..`/symlinks resolved), or None when it
    is malformed or leaves the workspace."""
    if workspace is None or not isinstance(value, str):
        return None
    try:
        root = workspace_root(workspace)
        real = str(resolve_in_workspace(workspace, value))
    except PathError:
        return None
    return "." if real == root else os.path.relpath(real, root).replace(os.sep, "/")


def arguments_glob_match(globs: dict, args: dict, workspace) -> bool:
    """Same argument names. Path arguments: their normalised workspace path matches the segment-wise glob. Other
    strings: `*` is any value, else a segment-wise glob on the text. Other values must be equal."""
    if not isinstance(globs, dict) or set(globs) != set(args):
        return False
    for name, expected in globs.items():
        value = args[name]
        if isinstance(expected, str) and isinstance(value, str):
            if is_path_argument(name):
                rel = normalised_workspace_path(workspace, value)
                if rel is None or not glob_match(expected, rel):
                    return False
            elif expected != "*" and not glob_match(expected, value):
                return False
        elif expected != value or type(expected) is not type(value):
            return False
    return True


