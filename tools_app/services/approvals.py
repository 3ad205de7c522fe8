"""Human approvals (docs/approvals.md): resolve each call to allow / ask / deny / hold, durable requests bound to
the exact call, decisions (exactly one wins), expiry, running an approved call exactly once, "allow always" rules
and review-mode pending changes. Every failure path refuses: nothing runs that a person did not approve.

Widened rules and the exec allowlist judge the *analysed* command (argv after unquoting and unwrapping, and the
effects its arguments have, from the table in "what a command does") and the *normalised* path, never the text."""
from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import logging
import os
import posixpath
import re
import shlex
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from goclaw import crypto, events
from goclaw.db import pg_json, pg_text
from goclaw.errors import Conflict, Gone, NotFound, ValidationError
from tools_app.base import Tool, ToolContext
from tools_app.choices import AgentMode, ApprovalDecision, ApprovalStatus, PendingChangeStatus, PermissionScope, RuleMatch
from tools_app.models import Agent, ApprovalRequest, ApprovalRule, PendingChange, ToolPermission
from tools_app.paths import PathError, is_within, resolve_in_workspace, workspace_root
from tools_app.pipeline import echo, labels_of

logger = logging.getLogger("goclaw.approvals")

MAX_WAIT_SECONDS = 60
POLL_SECONDS = 0.25
HELD_TOOLS = frozenset({"write_file", "edit"})  # review/audit modes hold these as pending changes
PLAN_TOOL = "submit_plan"
_RANK = {"allow": 0, "ask": 1, "deny": 2}


# --- canonical form ---------------------------------------------------------------------------------
def canonical_arguments(args: Any) -> str:
    return json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def arguments_hash(tool_name: str, args: Any) -> str:
    """Binds an approval to the exact call: sha256 of the tool name and the canonical arguments."""
    return hashlib.sha256(f"{tool_name}\n{canonical_arguments(args)}".encode()).hexdigest()


def normalize_command(command: str) -> str:
    return command.strip()


def _simple_commands(command: str) -> list[list[str]]:
    from tools_app.security.shell_check import extract_simple_commands

    return extract_simple_commands(command)


def _command_of(tool: Tool, args: dict) -> str | None:
    value = args.get(tool.command_argument) if tool.command_argument else None
    return value if isinstance(value, str) else None


# --- summary ----------------------------------------------------------------------------------------
def approval_summary(tool: Tool, args: dict, workspace=None) -> tuple[str, dict]:
    """What will run and where, for the person deciding: exec shows the command, the directory and every
    simple command the shell would run (wrappers and `sh -c` unwrapped)."""
    from tools_app.security.scrub import default_scrubber

    command = _command_of(tool, args)
    if command is not None:
        where = args.get("working_dir") or "."
        if workspace is not None:
            where = str(workspace / where) if where != "." else str(workspace)
        runs = [shlex.join(argv) for argv in _simple_commands(command)]
        summary = f"{tool.name} in {where}:\n$ {command}\nruns: " + ("; ".join(runs) or "(nothing parseable)")
        details = {"command": command, "working_dir": where, "simple_commands": runs}
    elif isinstance(args.get("path"), str):
        path = args["path"]
        if tool.name == "write_file":
            summary = f"{'append to' if args.get('append') else 'write'} {path}: {len(args.get('content') or '')} characters"
        elif tool.name == "edit":
            summary = (f"edit {path}: replace {len(args.get('old_string') or '')} characters with "
                       f"{len(args.get('new_string') or '')}{' (every occurrence)' if args.get('replace_all') else ''}")
        else:
            summary = f"{tool.name} {path}"
        details = {"path": path}
        resolved = normalised_workspace_path(workspace, path)
        if resolved is not None:  # what a path rule is matched against
            details["resolved_path"] = resolved
    else:
        parts = [f"{k}={json.dumps(v, ensure_ascii=False)[:120]}" for k, v in sorted(args.items())]
        summary = f"{tool.name}({', '.join(parts)})"
        details = {}
    summary, _ = default_scrubber.scrub(summary[:4000])
    details, _ = default_scrubber.scrub_data(details)
    return summary, details


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
    from tools_app.security.shell_check import unquoted_shell_syntax

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
    from tools_app.security.shell_check import analyse_for_rules

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


# --- deciding allow / ask / deny / hold ---------------------------------------------------------------
@dataclass(frozen=True)
class Decision:
    action: str  # allow | ask | deny | hold
    reason: str = ""


def permission_for(agent: Agent, tool_name: str) -> str | None:
    """The ToolPermission verdict for this tool: a deny in any scope wins, else the most specific scope
    (agent > mode > global) that names the tool or one of its groups; None when nothing names it."""
    from tools_app.policy import cached
    from tools_app.registry import registry

    rows = cached(("permissions", agent.pk, agent.mode, registry.version), lambda: list(ToolPermission.objects.filter(
        Q(scope=PermissionScope.GLOBAL) | Q(scope=PermissionScope.AGENT, agent=agent) | Q(scope=PermissionScope.MODE, mode=agent.mode)
    ).values_list("scope", "tool", "permission")))
    matching = [(scope, perm) for scope, name, perm in rows if tool_name in registry.expand([name])]
    if any(perm == "deny" for _, perm in matching):
        return "deny"
    for scope in (PermissionScope.AGENT, PermissionScope.MODE, PermissionScope.GLOBAL):
        perms = [perm for s, perm in matching if s == scope]
        if perms:
            return max(perms, key=_RANK.__getitem__)
    return None


_ALLOWLIST_SYNTAX = frozenset({";", "&", "|", "(", ")", "\n"})  # chains and pipelines: each command is judged


def allowlist_covers(patterns: list[str], command: str, *, workspace=None, working_dir: Any = None) -> bool:
    """True when every command the shell would run is covered by an allowlist entry (so `allowed && other` does not
    pass). Entries are word patterns like rules (`git status *`, `echo *`, `make test`): literal words, then
    one-argument globs, a trailing `*` for any further arguments, which must have no effect (write, delete, run,
    …) and name nothing outside the workspace. Redirections, expansions, globs, variables and unknown wrappers miss."""
    from tools_app.security.shell_check import analyse_for_rules

    entries = []
    for text in patterns or []:
        try:
            wp = WordPattern.parse(RuleMatch.GLOB, text) if isinstance(text, str) else None
        except ValidationError:
            wp = None
        if wp is not None and wp.literal >= 1:
            entries.append(wp)
    analysis = analyse_for_rules(command)
    if not entries or analysis.problems or not analysis.commands or analysis.syntax - _ALLOWLIST_SYNTAX:
        return False
    escapes = _path_judge(workspace, working_dir)
    if escapes is None:
        return False
    for view in analysis.commands:
        if _view_problem(view) is not None:
            return False
        if not any(words_cover(wp, view.argv, escapes, literal_effects_ok=True) is None for wp in entries):
            return False
    return True


def exec_matrix(config: dict, command: str, *, workspace=None, working_dir: Any = None) -> Decision:
    """GoClaw's security (deny|allowlist|full) × ask (off|on-miss|always) matrix, without its safe-bins."""
    security, ask = config.get("exec_security", "full"), config.get("exec_ask", "off")
    if security == "deny":
        return Decision("deny", "exec is disabled for this agent (exec_security=deny)")
    if ask == "always":
        return Decision("ask", "every command needs approval (exec_ask=always)")
    hit = allowlist_covers(config.get("exec_allowlist") or [], command, workspace=workspace, working_dir=working_dir)
    if hit:
        return Decision("allow")
    if security == "allowlist":
        if ask == "on-miss":
            return Decision("ask", "the command is not covered by the exec allowlist")
        return Decision("deny", "the command is not covered by this agent's exec allowlist")
    if ask == "on-miss":
        return Decision("ask", "the command is not covered by the exec allowlist (exec_ask=on-miss)")
    return Decision("allow")


def plan_approved(agent: Agent, user_id: str, session_key: str) -> bool:
    return ApprovalRequest.objects.filter(
        agent=agent, user_id=user_id, session_key=session_key, tool_name=PLAN_TOOL,
        decision__in=[ApprovalDecision.ALLOW_ONCE, ApprovalDecision.ALLOW_ALWAYS],
    ).exists()


def approval_resolve(*, agent: Agent, tool: Tool, args: dict, config: dict, user_id: str = "", session_key: str = "",
                     workspace=None) -> Decision:
    """allow / ask / deny / hold for one call. A deny from any source wins; structural mode rules (plan,
    audit, review holds) are not relaxed by an `allow` permission; an explicit permission replaces the mode's
    default; always_require_approval and the exec matrix can only make it stricter."""
    permission = permission_for(agent, tool.name)
    if permission == "deny":
        return Decision("deny", f"tool {tool.name} is denied by a tool permission")
    mode = agent.mode
    if mode == AgentMode.PLAN and tool.mutating and not plan_approved(agent, user_id, session_key):
        return Decision("deny", f"agent {agent.key} is in plan mode: call {PLAN_TOOL} with your plan and wait for a "
                                f"person to approve it before using {tool.name} in this session")
    if mode == AgentMode.AUDIT and tool.mutating and tool.name not in HELD_TOOLS:
        return Decision("deny", f"agent {agent.key} is in audit mode: only file changes (held for review) are possible")
    command = _command_of(tool, args)
    matrix = (exec_matrix(config, command, workspace=workspace, working_dir=args.get("working_dir"))
              if command is not None else Decision("allow"))
    if matrix.action == "deny":
        return matrix
    if mode in (AgentMode.REVIEW, AgentMode.AUDIT) and tool.name in HELD_TOOLS:
        return Decision("hold", f"agent {agent.key} is in {mode} mode: file changes are held for a person's review")

    if permission is not None:
        decision = Decision(permission, f"tool {tool.name} is set to ask by a tool permission" if permission == "ask" else "")
    elif mode == AgentMode.MANUAL or (mode in (AgentMode.CAUTIOUS, AgentMode.REVIEW) and tool.mutating):
        decision = Decision("ask", f"agent {agent.key} is in {mode} mode")
    else:
        decision = Decision("allow")
    if tool.always_require_approval and decision.action == "allow":
        decision = Decision("ask", f"tool {tool.name} requires a person's approval for every call")
    if matrix.action == "ask" and decision.action == "allow":
        decision = matrix
    return decision


# --- the gate ---------------------------------------------------------------------------------------
def approval_gate(ctx: ToolContext, tool: Tool, args: dict, call) -> Any:
    """pipeline.approval_gate: allow, deny, or pending (a durable ApprovalRequest or a held PendingChange).
    Any error refuses the call (fail closed)."""
    from tools_app.pipeline import ApprovalVerdict

    try:
        labels = labels_of(ctx)  # approvals store and compare the scrubbed labels of caller-chosen ids
        decision = approval_resolve(agent=call.agent, tool=tool, args=args, config=ctx.settings,
                                    user_id=labels.user_id, session_key=labels.session_key, workspace=ctx.workspace)
        if decision.action == "allow":
            return ApprovalVerdict("allow")
        if decision.action == "deny":
            return ApprovalVerdict("deny", decision.reason)
        if decision.action == "hold":
            change = pending_change_create(agent=call.agent, tool=tool, args=args, ctx=ctx, call_context=call_context_of(call))
            return ApprovalVerdict("pending", f"{decision.reason}. Change {change.id} to {change.path} is waiting for a "
                                              "person to accept it; it has not been applied yet.",
                                   {"pending_change_id": str(change.id)})
        if not tool.always_require_approval:
            rule = approval_rule_match(agent=call.agent, tool=tool, args=args, user_id=labels.user_id,
                                       workspace=ctx.workspace)
            if rule is not None:
                return ApprovalVerdict("allow")
        request = approval_request_create(agent=call.agent, tool=tool, args=args, ctx=ctx, reason=decision.reason,
                                          call_context=call_context_of(call))
        return ApprovalVerdict(
            "pending",
            f"{decision.reason}: waiting for a person to approve this {tool.name} call until "
            f"{request.expires_at.isoformat()}. Poll GET /api/v1/approvals/{request.id}?wait=30 and, once approved, "
            f"run it with POST /api/v1/approvals/{request.id}/execute.",
            {"approval_id": str(request.id), "expires_at": request.expires_at.isoformat()},
        )
    except Exception:
        logger.exception("approval gate failed for %s:%s; refusing the call", ctx.agent_key, tool.name)
        return ApprovalVerdict("deny", "the approval check failed; the call was refused")


# --- requests ---------------------------------------------------------------------------------------
def approval_timeout(config: dict) -> timedelta:
    seconds = config.get("approval_timeout_seconds") or settings.APPROVAL_TIMEOUT_SECONDS
    return timedelta(seconds=int(seconds))


def _payload(req: ApprovalRequest) -> dict:
    return {
        "id": str(req.id), "agent": req.agent.key, "tool": req.tool_name, "status": req.status, "decision": req.decision,
        "summary": req.summary, "details": req.details, "arguments": req.arguments, "reason": req.reason,
        "user_id": req.user_id, "session_key": req.session_key, "requested_at": req.requested_at,
        "expires_at": req.expires_at, "decided_at": req.decided_at,
        "decided_by": req.decided_by.get_username() if req.decided_by_id else None,
    }


def _publish(event: str, req: ApprovalRequest) -> None:
    events.publish(event, _payload(req), ["approvals", events.agent_group(req.agent.key)])
    transaction.on_commit(_wake_waiters)


@transaction.atomic
def approval_request_create(*, agent: Agent, tool: Tool, args: dict, ctx: ToolContext, reason: str = "",
                            call_context: dict | None = None) -> ApprovalRequest:
    """A durable request for this exact call (arguments scrubbed for display, the hash binds the real ones)."""
    from tools_app.security.scrub import default_scrubber

    safe_args, _ = default_scrubber.scrub_data(args)
    summary, details = approval_summary(tool, args, ctx.workspace)
    reason, _ = default_scrubber.scrub(reason[:500])
    if tool.always_require_approval:
        details["always_require_approval"] = True  # no allow-always rule for it
    now = timezone.now()
    request_id = uuid.uuid4()
    identity, stored_context = _stored_identity(ctx, call_context or {}, request_id)
    req = ApprovalRequest.objects.create(
        id=request_id, agent=agent, **identity, call_context=pg_json(stored_context), tool_name=tool.name, arguments=pg_json(safe_args), args_hash=arguments_hash(tool.name, args), summary=pg_text(summary),
        details=pg_json(details), reason=pg_text(reason[:500]), requested_at=now, expires_at=now + approval_timeout(ctx.settings),
    )
    _publish("approval.requested", req)
    return req


def _expire(req: ApprovalRequest) -> bool:
    """Mark an overdue pending (or approved, unused) request expired; True when this call did it."""
    done = ApprovalRequest.objects.filter(
        pk=req.pk, status__in=[ApprovalStatus.PENDING, ApprovalStatus.APPROVED], consumed_at__isnull=True,
        expires_at__lte=timezone.now(),
    ).update(status=ApprovalStatus.EXPIRED)
    if done:
        req.status = ApprovalStatus.EXPIRED
        _publish("approval.resolved", req)
    return bool(done)


@transaction.atomic
def approval_expire_if_overdue(*, approval_id) -> bool:
    req = ApprovalRequest.objects.select_related("agent", "decided_by").filter(pk=approval_id).first()
    return req is not None and _expire(req)


@transaction.atomic
def approval_sweep_expired(limit: int = 500) -> int:
    """Expire every overdue request (the django-q2 schedule runs this; decisions and executions also check
    the deadline themselves, so expiry holds without a worker)."""
    overdue = list(
        ApprovalRequest.objects.select_for_update(skip_locked=True, of=("self",)).select_related("agent", "decided_by")
        .filter(status__in=[ApprovalStatus.PENDING, ApprovalStatus.APPROVED], consumed_at__isnull=True,
                expires_at__lte=timezone.now())[:limit]
    )
    return sum(_expire(req) for req in overdue)


def approval_decide(*, approval_id, decision: str, actor, note: str = "", rule_match: str = RuleMatch.EXACT,
                    rule_pattern: Any = None, rule_user_only: bool = False, rule_expires_at: datetime | None = None) -> ApprovalRequest:
    """allow_once / allow_always / deny a pending request. The row lock makes exactly one concurrent decision
    win; the others get Conflict. A request past its deadline is marked expired and the decision refused (Gone).
    allow_always also creates the ApprovalRule in the same transaction."""
    if decision not in ApprovalDecision.values:
        raise ValidationError(f"decision must be one of {', '.join(ApprovalDecision.values)}", code="invalid_decision")
    with transaction.atomic():
        req = ApprovalRequest.objects.select_for_update(of=("self",)).select_related("agent").filter(pk=approval_id).first()
        if req is None:
            raise NotFound("no such approval request", code="approval_not_found")
        expired = req.status == ApprovalStatus.PENDING and req.is_overdue and _expire(req)
        if not expired and req.status == ApprovalStatus.EXPIRED:
            expired = True
        if not expired:
            if req.status != ApprovalStatus.PENDING:
                raise Conflict(f"this request was already decided ({req.status})", code="approval_already_decided",
                               details={"status": req.status, "decision": req.decision})
            now = timezone.now()
            if decision == ApprovalDecision.ALLOW_ALWAYS:
                req.rule = _rule_create(req, actor=actor, match=rule_match, pattern=rule_pattern,
                                        user_only=rule_user_only, expires_at=rule_expires_at)
            approved = decision != ApprovalDecision.DENY
            req.status = ApprovalStatus.APPROVED if approved else ApprovalStatus.DENIED
            req.decision, req.decided_at, req.note = decision, now, echo(note, 500)
            req.decided_by = actor if getattr(actor, "pk", None) else None
            if approved:  # from now on the deadline is the one for running it
                req.expires_at = max(req.expires_at, now + approval_timeout(req.agent.other_config or {}))
            req.save(update_fields=["status", "decision", "decided_at", "note", "decided_by", "expires_at", "rule"])
            _publish("approval.resolved", req)
    if expired:
        raise Gone("this approval request expired; the call was denied", code="approval_expired")
    return req


@transaction.atomic
def approval_cancel(*, approval_id, agent: Agent | None) -> ApprovalRequest:
    """The agent (or staff, agent=None) withdraws a pending request."""
    qs = ApprovalRequest.objects.select_related("agent", "decided_by").filter(pk=approval_id)
    if agent is not None:
        qs = qs.filter(agent=agent)
    req = qs.first()
    if req is None:
        raise NotFound("no such approval request", code="approval_not_found")
    if not ApprovalRequest.objects.filter(pk=req.pk, status=ApprovalStatus.PENDING).update(status=ApprovalStatus.CANCELLED):
        raise Conflict(f"this request is {req.status}, not pending", code="approval_not_pending", details={"status": req.status})
    req.status = ApprovalStatus.CANCELLED
    _publish("approval.resolved", req)
    return req


# --- waiting ----------------------------------------------------------------------------------------
_decided = threading.Condition()


def _wake_waiters() -> None:
    with _decided:
        _decided.notify_all()


def approval_wait(*, approval_id, seconds: float) -> ApprovalRequest:
    """Long-poll until the request leaves `pending` or `seconds` (at most 60) pass. Reads one indexed row every
    0.25 s outside any transaction; a decision made in this process wakes the waiter at once."""
    deadline = time.monotonic() + max(0.0, min(float(seconds), MAX_WAIT_SECONDS))
    while True:
        row = ApprovalRequest.objects.filter(pk=approval_id).values_list("status", "expires_at").first()
        if row is None:
            raise NotFound("no such approval request", code="approval_not_found")
        status, expires_at = row
        if status != ApprovalStatus.PENDING:
            break
        if expires_at <= timezone.now():
            approval_expire_if_overdue(approval_id=approval_id)
            break
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        with _decided:
            _decided.wait(min(POLL_SECONDS, remaining))
    return ApprovalRequest.objects.select_related("agent", "decided_by").get(pk=approval_id)


# --- running an approved call -------------------------------------------------------------------------
def _refused(status: str, message: str, observations: list[str] | None = None):
    from tools_app.pipeline import Outcome

    return Outcome(status=status, for_llm=message, is_error=True, observations=observations or [])


def _vet(call, reg) -> tuple[Tool | None, ToolContext, dict, list[str], Any]:
    """Steps 1-3 again before a held or approved call runs: the tool must still be available, the arguments
    valid, the pre-hooks (shell safety check, access control) must pass and no source may now deny it."""
    from tools_app import pipeline
    from tools_app.choices import InvocationStatus as S
    from tools_app.hooks import hooks

    ctx = pipeline.build_context(call, reg)
    tool = pipeline.resolve_tool(call.tool, ctx, reg)
    if tool is None:
        return None, ctx, call.arguments, [], _refused(S.DENIED, f"tool {call.tool} is no longer available to this agent")
    problems = pipeline.validate_arguments(tool, call.arguments)
    if problems:
        return tool, ctx, call.arguments, [], _refused(S.INVALID, f"invalid arguments for {tool.name}: " + "; ".join(problems))
    pre = hooks.run_pre(ctx, tool, call.arguments)
    if pre.blocked:
        return tool, ctx, call.arguments, pre.observations, _refused(S.DENIED, pre.blocked, pre.observations)
    labels = labels_of(ctx)
    decision = approval_resolve(agent=call.agent, tool=tool, args=pre.args, config=ctx.settings,
                                user_id=labels.user_id, session_key=labels.session_key, workspace=ctx.workspace)
    if decision.action == "deny":
        return tool, ctx, pre.args, pre.observations, _refused(S.DENIED, decision.reason, pre.observations)
    return tool, ctx, pre.args, pre.observations, None


def _run_vetted(call, reg, *, expected_hash: str, claim: Callable[[], None], on_mismatch: Callable[[], None]):
    """Vet, check the hash, claim (exactly once), then run steps 6-9 with the pipeline's own functions and
    write the audit row. Refusals are recorded and returned as outcomes; nothing is claimed for them."""
    from tools_app import pipeline

    started = time.perf_counter()
    tool, ctx, args, observations, refusal = _vet(call, reg)
    if refusal is None and arguments_hash(tool.name, args) != expected_hash:
        on_mismatch()
    if refusal is not None:
        outcome, name, error = refusal, getattr(tool, "name", call.tool), refusal.for_llm
    else:
        claim()
        outcome, name, args, error = pipeline.run_approved(ctx, tool, args, observations)
    outcome.duration_ms = (time.perf_counter() - started) * 1000
    pipeline.record(ctx, call, name, args, outcome, error)
    return outcome


def call_context_of(call) -> dict:
    """What else decided the original call's catalog, so a resumed call is vetted in the same context."""
    return {"provider": call.provider, "chat_id": call.chat_id, "peer_kind": call.peer_kind,
            "subagent_depth": call.subagent_depth, "request_allow": call.request_allow}


def _identity_seal_context(row_id) -> str:
    return f"goclaw:call-identity:{row_id}"


def _stored_identity(ctx: ToolContext, call_context: dict, row_id) -> tuple[dict, dict]:
    """(columns, call_context) to store for a held call: the scrubbed labels of the caller-chosen ids (user,
    session, channel, chat), and — only when a label differs from the real value (an id that looks like a
    credential) — the real values sealed (AES-256-GCM, bound to the row) so the call resumes exactly."""
    labels = labels_of(ctx)
    real = {"user_id": ctx.user_id, "session_key": ctx.session_key, "channel": ctx.channel,
            "chat_id": str(call_context.get("chat_id") or "")}
    shown = {"user_id": labels.user_id, "session_key": labels.session_key, "channel": labels.channel,
             "chat_id": labels.chat_id}
    context = {**call_context, "chat_id": shown["chat_id"]}
    if real != shown:
        context["sealed_identity"] = crypto.encrypt_json(real, associated_data=_identity_seal_context(row_id))
    columns = {"user_id": pg_text(shown["user_id"][:255]), "session_key": pg_text(shown["session_key"][:255]),
               "channel": pg_text(shown["channel"][:64])}
    return columns, context


def call_identity(row) -> dict:
    """The real user id, session key, channel and chat id of a held call (unsealed when they were sealed)."""
    context = row.call_context or {}
    if context.get("sealed_identity"):
        return crypto.decrypt_json(context["sealed_identity"], associated_data=_identity_seal_context(row.pk))
    return {"user_id": row.user_id, "session_key": row.session_key, "channel": row.channel,
            "chat_id": context.get("chat_id", "")}


def _call_for(row, arguments: dict):
    from tools_app.pipeline import ToolCall

    context = row.call_context or {}
    real = call_identity(row)
    return ToolCall(agent=row.agent, tool=row.tool_name, arguments=arguments, user_id=real["user_id"],
                    session_key=real["session_key"], channel=real["channel"], provider=context.get("provider", ""),
                    chat_id=real["chat_id"], peer_kind=context.get("peer_kind", ""),
                    subagent_depth=context.get("subagent_depth", 0), request_allow=context.get("request_allow"))


def approval_execute(*, approval_id, agent: Agent | None, arguments: dict | None = None, reg=None):
    """Run an approved call exactly once (orchestrator: short atomic statements; the tool runs outside any
    transaction). Refuses unless the request is this agent's, approved, unused and within its deadline, and the
    arguments hash to the approved ones; the atomic approved→consumed UPDATE makes a replay a Conflict."""
    from tools_app.registry import registry

    qs = ApprovalRequest.objects.select_related("agent").filter(pk=approval_id)
    req = (qs.filter(agent=agent) if agent is not None else qs).first()
    if req is None:
        raise NotFound("no such approval request", code="approval_not_found")
    if req.status in (ApprovalStatus.PENDING, ApprovalStatus.APPROVED) and req.consumed_at is None and req.is_overdue:
        approval_expire_if_overdue(approval_id=req.pk)
        req.status = ApprovalStatus.EXPIRED
    if req.status == ApprovalStatus.EXPIRED:
        raise Gone("this approval expired; the call was denied", code="approval_expired")
    if req.status != ApprovalStatus.APPROVED:
        raise Conflict(f"this request is {req.status}, not approved", code="approval_not_approved", details={"status": req.status})
    if req.consumed_at is not None:
        raise Conflict("this approval was already used; ask again to run the call again", code="approval_already_used")

    def mismatch() -> None:
        logger.warning("approval %s: arguments do not match the approved call; refused", req.pk)
        if arguments is None:  # the stored copy is scrubbed: the agent must resend the exact arguments
            raise ValidationError("resend the exact arguments of the approved call", code="arguments_required")
        raise Conflict("these arguments are not the approved ones; the call was refused", code="arguments_mismatch")

    def claim() -> None:
        now = timezone.now()
        if not ApprovalRequest.objects.filter(pk=req.pk, status=ApprovalStatus.APPROVED, consumed_at__isnull=True,
                                              expires_at__gt=now).update(consumed_at=now):
            raise Conflict("this approval was already used or has expired", code="approval_already_used")

    outcome = _run_vetted(_call_for(req, req.arguments if arguments is None else arguments), reg or registry,
                          expected_hash=req.args_hash, claim=claim, on_mismatch=mismatch)
    if outcome.invocation_id and outcome.status != "denied":
        ApprovalRequest.objects.filter(pk=req.pk).update(invocation_id=outcome.invocation_id)
    outcome.extra = {**outcome.extra, "approval_id": str(req.pk)}
    return outcome


def tool_execute_waiting(call, wait_seconds: float = 0, reg=None):
    """pipeline.execute, then (when it asked a person and wait_seconds > 0) wait for the decision: approved →
    run it through approval_execute and return the normal result; denied or expired → a `denied` outcome;
    still pending → the pending outcome (HTTP 202)."""
    from tools_app import pipeline
    from tools_app.registry import registry

    outcome = pipeline.execute(call, reg or registry)
    approval_id = outcome.extra.get("approval_id")
    if outcome.status != "pending_approval" or not approval_id or wait_seconds <= 0:
        return outcome
    req = approval_wait(approval_id=approval_id, seconds=wait_seconds)
    if req.status == ApprovalStatus.APPROVED:
        return approval_execute(approval_id=req.pk, agent=call.agent, arguments=call.arguments, reg=reg)
    if req.status == ApprovalStatus.PENDING:
        return outcome
    outcome.status, outcome.is_error = "denied", True
    outcome.for_llm = {"denied": "a person denied this call", "expired": "nobody approved this call in time; it was denied",
                       "cancelled": "the approval request was cancelled"}.get(req.status, f"approval {req.status}")
    outcome.extra = {"approval_id": str(req.pk), "approval_status": req.status}
    return outcome


# --- allow-always rules -----------------------------------------------------------------------------
def _has_secret(value: Any) -> bool:
    from tools_app.security.scrub import REDACTED, default_scrubber

    return default_scrubber.scrub_data(value)[1] > 0 or REDACTED in json.dumps(value, ensure_ascii=False)


def _rule_workspace(req: ApprovalRequest):
    """The workspace the request's calls run in (paths of a rule are judged against it)."""
    from tools_app.pipeline import workspace_for

    try:
        return workspace_for(req.agent, call_identity(req)["user_id"])
    except Exception:  # no usable workspace: path checks fail closed
        logger.exception("approval %s: no workspace for the rule check", req.pk)
        return None


def _invalid(message: str) -> ValidationError:
    return ValidationError(message, code="invalid_rule")


def _exec_rule_scope(req: ApprovalRequest, match: str, pattern: Any, command: str) -> tuple[str, list[str]]:
    """Validate a widened exec rule against the approved command; (the pattern as kept, the effects its further
    arguments may have). Refused: fewer than two fixed words, an unclassified program, an approved command that is
    not one plain command or whose arguments run programs, change configuration, upload or reach outside."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise _invalid(f"a {match} rule needs a pattern")
    if _has_secret(pattern) or _has_secret(command):
        raise _invalid("the approved command contains a secret: only an exact rule is possible (rules are shown in clear)")
    wp = WordPattern.parse(match, pattern)
    if wp.literal < 2:
        raise _invalid("a widened rule must fix more than the program name (e.g. 'git push origin')")
    program = wp.words[0]
    if "/" in program:
        raise _invalid("name the program as a word on its own (e.g. git), not by a path")
    if program not in PROGRAMS:
        raise _invalid(f"goclaw cannot tell what the arguments of `{program}` do, so only an exact rule is possible")
    view, why = single_command_view(command)
    if view is None:
        raise _invalid(f"only an exact rule is possible for this command: {why}")
    escapes = _path_judge(_rule_workspace(req), req.arguments.get("working_dir"))
    if escapes is None:
        raise _invalid("the approved command runs outside the workspace: only an exact rule is possible")
    if not wp.matches(view.argv):
        raise _invalid(f"the pattern must cover the approved command (as it runs: {shlex.join(view.argv)})")
    problem = words_cover(wp, view.argv, escapes, allowed=INHERITABLE_EFFECTS)
    if problem:
        raise _invalid(f"only an exact rule is possible for this command: {problem}")
    free = sorted({kind for kind, i in command_effects(view.argv, escapes) if i >= wp.literal} & INHERITABLE_EFFECTS)
    return pattern, free


def _rule_fields(req: ApprovalRequest, *, match: str, pattern: Any, user_only: bool,
                 expires_at: datetime | None) -> dict:
    """The ApprovalRule an allow-always decision would create (validated, with its description); nothing is saved."""
    if req.details.get("always_require_approval"):
        raise ValidationError(f"{req.tool_name} needs a person's approval for every call: allow always is not possible",
                              code="rule_not_allowed")
    match = match or RuleMatch.EXACT
    if match not in RuleMatch.values:
        raise _invalid(f"rule match must be one of {', '.join(RuleMatch.values)}")
    command = req.details.get("command")
    args_hash, free_effects = "", []
    if match == RuleMatch.EXACT:
        if command is not None:
            if pattern not in (None, "", command, normalize_command(command)):
                raise _invalid("an exact rule covers the approved command as it is")
            pattern = command
        else:
            pattern = canonical_arguments(req.arguments)
        args_hash = req.args_hash  # binds every argument: for exec the command, working_dir and timeout
    elif command is not None:
        pattern, free_effects = _exec_rule_scope(req, match, pattern, command)
    elif match == RuleMatch.GLOB:
        try:
            globs = json.loads(pattern) if isinstance(pattern, str) else pattern
        except ValueError:
            raise _invalid("a glob rule pattern must be a JSON object") from None
        if not isinstance(globs, dict) or set(globs) != set(req.arguments):
            raise _invalid("a glob rule is a JSON object with exactly the call's argument names (string values may be "
                           "globs) that matches the approved call")
        globs = {name: clean_path_pattern(value) if isinstance(value, str) and is_path_argument(name) else value
                 for name, value in globs.items()}
        if _has_secret(globs):
            raise _invalid("the pattern contains a secret; rules are shown in clear")
        if not arguments_glob_match(globs, req.arguments, _rule_workspace(req)):
            raise _invalid("the glob rule must match the approved call (paths are compared after normalising them "
                           "inside the workspace)")
        pattern = canonical_arguments(globs)
    else:
        raise _invalid("prefix rules are for commands only")
    fields = {"agent": req.agent, "user_id": req.user_id if user_only else "", "tool_name": req.tool_name,
              "match": match, "pattern": pattern, "args_hash": args_hash, "free_effects": free_effects,
              "expires_at": expires_at}
    fields["description"] = describe_rule(**fields, command_rule=command is not None, arguments=req.arguments)
    return fields


_NOT_COVERED_SHELL = ("Also asked again: anything else in the same command (`;`, `&&`, pipes, redirections, `$…` or "
                      "backquote expansions, unquoted globs or `~`), environment variable assignments, another path to "
                      "the program (`./git`), and wrappers other than `timeout`, `nice`, `nohup`, `time`, a bare "
                      "`env` or `command`, and a plain `sh -c` / `bash -c`.")


def describe_rule(*, agent: Agent, user_id: str, tool_name: str, match: str, pattern: str, free_effects: list,
                  expires_at: datetime | None, command_rule: bool, arguments: dict | None = None, **_: Any) -> str:
    """One paragraph saying exactly what an allow-always rule covers, for the person creating it (and the admin)."""
    who = f"agent {agent.key}, " + (f"user {user_id} only" if user_id else "any of its users")
    until = f"until {timezone.localtime(expires_at):%Y-%m-%d %H:%M %Z}" if expires_at else "until revoked"
    scope = f"({who}; {until})"
    if match == RuleMatch.EXACT and command_rule:
        args = arguments or {}
        where = f"working directory `{args['working_dir']}`" if args.get("working_dir") else "the workspace root"
        timeout = f"a timeout of {args['timeout']} s" if args.get("timeout") is not None else "the default timeout"
        return (f"Covers exactly this `{tool_name}` call again: `{pattern}` in {where} with {timeout} {scope}. Any other "
                "command text (even one more space), working directory or timeout is asked again.")
    if match == RuleMatch.EXACT:
        return (f"Covers exactly this `{tool_name}` call again, with the arguments {pattern} {scope} (values shown as "
                "[REDACTED] are bound by their hash). Any other argument or value is asked again.")
    if command_rule:
        try:
            wp = WordPattern.parse(match, pattern)
        except ValidationError:
            return f"An unreadable {match} rule ({pattern!r}): it covers nothing."
        shape = f"`{shlex.join(wp.words[:wp.literal])}`"
        globs = wp.words[wp.literal:]
        if globs:
            shape += " then " + ", then ".join(f"one argument matching `{g}` (`*`/`?` stay within one path segment)"
                                               for g in globs)
        shape += ", followed by any further arguments" if wp.rest else ", with no further arguments"
        allowed = [k for k in (WRITE, DELETE) if k in (free_effects or [])]
        refused = [EFFECT_TEXT[k] for k in EFFECT_TEXT if k not in allowed]
        text = (f"Covers `{tool_name}` commands that are one call of {shape}, in any directory of the agent's workspace "
                f"and with any timeout {scope}. The arguments after the fixed words may not: " + "; ".join(refused) +
                " — such a command is asked again.")
        if allowed:
            text += (" They may " + " and ".join(EFFECT_TEXT[k].split(" (")[0] for k in allowed) +
                     " inside the workspace, as the approved command's did.")
        return text + " " + _NOT_COVERED_SHELL
    try:
        globs = json.loads(pattern)
    except ValueError:
        globs = None
    if not isinstance(globs, dict):
        return f"An unreadable glob rule ({pattern!r}): it covers nothing."
    parts = []
    for name, value in sorted(globs.items()):
        if isinstance(value, str) and is_path_argument(name):
            parts.append(f"`{name}` is a path that, normalised inside the workspace (`.`, `..` and symlinks resolved; a "
                         f"path leaving the workspace never matches), matches `{value}` (`*`, `?` and `[…]` stay within "
                         "one path segment, `**` spans whole segments)")
        elif value == "*":
            parts.append(f"`{name}` is any text")
        elif isinstance(value, str):
            parts.append(f"`{name}` matches the text glob `{value}` (wildcards stay between `/`)")
        else:
            parts.append(f"`{name}` equals {json.dumps(value, ensure_ascii=False)}")
    return (f"Covers `{tool_name}` calls {scope} with exactly these arguments: " + "; ".join(parts) +
            ". A call with other or more arguments is asked again.")


def approval_rule_description(rule: ApprovalRule) -> str:
    """The stored description, or one made now for rules created before descriptions were kept."""
    if rule.description:
        return rule.description
    source = rule.created_from
    command_rule = bool(source and source.details.get("command") is not None) or (
        rule.match != RuleMatch.EXACT and not rule.pattern.lstrip().startswith("{"))
    return describe_rule(agent=rule.agent, user_id=rule.user_id, tool_name=rule.tool_name, match=rule.match,
                         pattern=rule.pattern, free_effects=rule.free_effects, expires_at=rule.expires_at,
                         command_rule=command_rule, arguments=source.arguments if source else None)


def approval_rule_payload(rule: ApprovalRule) -> dict:
    """What the API answers about a rule: its scope and, in `covers`, exactly what it allows."""
    return {"id": rule.pk, "tool": rule.tool_name, "match": rule.match, "pattern": rule.pattern,
            "user_id": rule.user_id, "expires_at": rule.expires_at, "free_effects": list(rule.free_effects or []),
            "covers": approval_rule_description(rule)}


def approval_rule_preview(*, approval_id, match: str = RuleMatch.EXACT, pattern: Any = None, user_only: bool = False,
                          expires_at: datetime | None = None) -> dict:
    """What allow-always with this rule would cover, without deciding (the admin shows it before confirming).
    Raises the same ValidationError the decision would."""
    req = ApprovalRequest.objects.select_related("agent").filter(pk=approval_id).first()
    if req is None:
        raise NotFound("no such approval request", code="approval_not_found")
    fields = _rule_fields(req, match=match, pattern=pattern, user_only=user_only, expires_at=expires_at)
    return {"match": fields["match"], "pattern": fields["pattern"], "user_only": bool(fields["user_id"]),
            "expires_at": expires_at, "free_effects": fields["free_effects"], "covers": fields["description"]}


def _rule_create(req: ApprovalRequest, *, actor, match: str, pattern: Any, user_only: bool,
                 expires_at: datetime | None) -> ApprovalRule:
    fields = _rule_fields(req, match=match, pattern=pattern, user_only=user_only, expires_at=expires_at)
    return ApprovalRule.objects.create(**fields, created_by=actor if getattr(actor, "pk", None) else None,
                                       created_from=req)


def _rule_matches(rule: ApprovalRule, tool: Tool, args: dict, workspace=None) -> bool:
    """exact: the hash of every argument (exec: command, working_dir, timeout). prefix/glob on exec: the analysed
    command (words_cover). glob on other tools: arguments_glob_match on normalised paths. Anything unreadable: no."""
    if rule.match == RuleMatch.EXACT:
        return bool(rule.args_hash) and rule.args_hash == arguments_hash(tool.name, args)
    command = _command_of(tool, args)
    if command is not None:
        try:
            wp = WordPattern.parse(rule.match, rule.pattern)
        except ValidationError:
            return False
        if wp.literal < 2 or "/" in wp.words[0]:
            return False
        view, _ = single_command_view(command)
        escapes = _path_judge(workspace, args.get("working_dir"))
        if view is None or escapes is None:
            return False
        allowed = frozenset(rule.free_effects or ()) & INHERITABLE_EFFECTS
        return words_cover(wp, view.argv, escapes, allowed=allowed) is None
    if rule.match == RuleMatch.GLOB:
        try:
            return arguments_glob_match(json.loads(rule.pattern), args, workspace)
        except (ValueError, TypeError):
            return False
    return False


def approval_rule_match(*, agent: Agent, tool: Tool, args: dict, user_id: str, workspace=None) -> ApprovalRule | None:
    """The first active rule of this agent (and user) that covers this call; its use is counted atomically."""
    now = timezone.now()
    rules = (ApprovalRule.objects.filter(agent=agent, tool_name=tool.name, revoked_at__isnull=True)
             .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now)).filter(Q(user_id="") | Q(user_id=user_id))
             .order_by("created_at"))
    for rule in rules:
        if _rule_matches(rule, tool, args, workspace):
            ApprovalRule.objects.filter(pk=rule.pk).update(use_count=F("use_count") + 1, last_used_at=now)
            return rule
    return None


@transaction.atomic
def approval_rule_revoke(*, rule: ApprovalRule, actor) -> ApprovalRule:
    ApprovalRule.objects.filter(pk=rule.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now(), revoked_by=actor if getattr(actor, "pk", None) else None)
    rule.refresh_from_db()
    return rule


# --- review / audit: held file changes ---------------------------------------------------------------
def _change_payload(change: PendingChange) -> dict:
    return {"id": str(change.id), "agent": change.agent.key, "tool": change.tool_name, "path": change.path,
            "summary": change.summary, "status": change.status, "session_key": change.session_key}


def pending_change_seal_context(change_id) -> str:
    """Associated data of a held change's sealed arguments: they open only for this purpose and this row."""
    return f"tools_app.pendingchange.arguments:{change_id}"


@transaction.atomic
def pending_change_create(*, agent: Agent, tool: Tool, args: dict, ctx: ToolContext, call_context: dict | None = None) -> PendingChange:
    """Hold a write_file/edit call. The exact arguments (file content may hold credentials) are kept only sealed
    (AES-256-GCM, bound to this row) to apply it on accept; `arguments`, `path` and `summary` are scrubbed copies."""
    from tools_app.security.scrub import default_scrubber

    summary, _ = approval_summary(tool, args, ctx.workspace)
    display, _ = default_scrubber.scrub_data(args)
    change_id = uuid.uuid4()
    identity, stored_context = _stored_identity(ctx, call_context or {}, change_id)
    change = PendingChange.objects.create(
        id=change_id, agent=agent, **identity, call_context=pg_json(stored_context), tool_name=tool.name,
        path=echo(str(args.get("path", "")), 4096), arguments=pg_json(display),
        sealed_arguments=crypto.encrypt_json(args, associated_data=pending_change_seal_context(change_id)),
        args_hash=arguments_hash(tool.name, args), summary=pg_text(summary),
    )
    events.publish("pending_change.created", _change_payload(change), ["approvals", events.agent_group(agent.key)])
    return change


def _open_change(change: PendingChange) -> dict:
    return crypto.decrypt_json(change.sealed_arguments, associated_data=pending_change_seal_context(change.pk))


def pending_change_decide(*, change_id, accept: bool, actor, reg=None) -> PendingChange:
    """Accept (apply the held call now, through the pipeline's own steps) or reject one pending change.
    Orchestrator: the pending→accepted/rejected UPDATE claims it exactly once, then the write runs outside any
    transaction; a refusal or tool error leaves it `failed` with the message. Once decided, the sealed arguments
    are erased: only the scrubbed copy and the audit row remain."""
    from tools_app.registry import registry

    now = timezone.now()
    status = PendingChangeStatus.ACCEPTED if accept else PendingChangeStatus.REJECTED
    claim = {"status": status, "decided_at": now, "decided_by": actor if getattr(actor, "pk", None) else None}
    if not accept:
        claim["sealed_arguments"] = ""
    claimed = PendingChange.objects.filter(pk=change_id, status=PendingChangeStatus.PENDING).update(**claim)
    change = PendingChange.objects.select_related("agent").filter(pk=change_id).first()
    if change is None:
        raise NotFound("no such pending change", code="pending_change_not_found")
    if not claimed:
        raise Conflict(f"this change is already {change.status}", code="pending_change_already_decided",
                       details={"status": change.status})
    if accept:
        def mismatch() -> None:
            raise Conflict("the held change no longer matches what was recorded", code="arguments_mismatch")

        try:
            arguments = _open_change(change)
            outcome = _run_vetted(_call_for(change, arguments), reg or registry, expected_hash=change.args_hash,
                                  claim=lambda: None, on_mismatch=mismatch)
            change.result, change.invocation_id = outcome.for_llm[:10000], outcome.invocation_id or None
            change.status = PendingChangeStatus.FAILED if outcome.is_error else PendingChangeStatus.ACCEPTED
        except Conflict as exc:
            change.result, change.status = exc.message, PendingChangeStatus.FAILED
        except crypto.DecryptionError:
            logger.error("pending change %s: the sealed arguments do not open (key changed?); not applied", change.pk)
            change.result = "the held change could not be opened (the encryption key changed?); nothing was written"
            change.status = PendingChangeStatus.FAILED
        change.sealed_arguments = ""
        PendingChange.objects.filter(pk=change.pk).update(status=change.status, result=change.result,
                                                          invocation_id=change.invocation_id, sealed_arguments="")
    with transaction.atomic():
        events.publish("pending_change.resolved", _change_payload(change), ["approvals", events.agent_group(change.agent.key)])
    return change


def pending_change_decide_batch(*, agent: Agent, session_key: str, accept: bool, actor, reg=None) -> list[PendingChange]:
    """Accept or reject every pending change of one agent session, oldest first (already decided ones are skipped)."""
    ids = list(PendingChange.objects.filter(agent=agent, session_key=session_key, status=PendingChangeStatus.PENDING)
               .order_by("created_at").values_list("pk", flat=True))
    done = []
    for change_id in ids:
        try:
            done.append(pending_change_decide(change_id=change_id, accept=accept, actor=actor, reg=reg))
        except Conflict:
            continue
    return done
