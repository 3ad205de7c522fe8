"""Rule group `fork_bomb`: Self-recursive background/pipe functions, background spawn loops, fork loops in
interpreters.
"""
from __future__ import annotations

import re

from ..vocabulary import INLINE_PATTERNS
from ..windows import windows_statements
from .base import Rule, RuleGroup

GROUP = RuleGroup(
    "fork_bomb",
    "Self-recursive background/pipe functions, background spawn loops, fork loops in interpreters.",
)


def spawns_processes_endlessly(analysis):
    out = []
    for name, body in analysis.funcs:
        for r in body:
            sizes = sum(1 for x in body if x.pipe == r.pipe)
            if r.words[:1] == [name] and (r.bg or sizes > 1):
                out.append((f"function {name} recursively spawns itself", True))
                break
    for cond, body in analysis.loops:
        if any(r.words[:1] in (["true"], [":"], ["1"]) or r.words == ["[", "1", "]"] for r in cond) and any(r.bg for r in body):
            out.append(("infinite loop spawning background processes", True))
    out += [(f"{c.name} fork loop", True) for c in analysis.cmds if c.icode and INLINE_PATTERNS["fork"].search(c.icode)][:1]
    return out


# An unbounded loop in an inline program: while(1)/while True/for(;;)/loop {}/`X while 1`/iter(int, 1)/count().
_UNBOUNDED_LOOP = re.compile(
    r"\bwhile\s*\(?\s*(1|true|True|\$true|!0|not\s+0|!false)\s*\)?|\bfor\s*\(\s*;\s*;\s*\)|\bloop\s*(do\b|\{)|"
    r"\biter\s*\(\s*int\s*,\s*1\s*\)|itertools\.count|\bcount\s*\(\s*\)|\buntil\s+false\b|\bwhile\s+(os\.)?fork|"
    r"\bfork\s*(\(\s*\))?\s+(while|until)\b|\bsetInterval\s*\(|\b1\.step\b|\bwhile\s*:|\bdo\s*\{.*\}\s*while\s*\(\s*(1|true)\s*\)")
# Starting a process without waiting for it: fork, Popen, spawn, popen, child_process, Start-Process.
_SPAWN = re.compile(
    r"\bfork\b|pcntl_fork|\bPopen\b|\bspawn\w*\s*\(|posix_spawn|multiprocessing|\bpopen\s*\(|IO\.popen|"
    r"child_process|Process\.spawn|\bStart-Process\b|\bStart-Job\b|\bproc_open\s*\(")


def interpreter_spawn_loop(analysis):
    """Fork/spawn loops in interpreter one-liners (python, perl, ruby, node, php ...): an unbounded loop that starts
    processes without waiting for them (`while 1: os.fork()`, `fork while fork`, `loop { fork }`,
    `for(;;) child_process.spawn(..)`, `while(1) pcntl_fork();`). A loop that runs a program and waits for it
    (`subprocess.run`, `system`) or a bounded loop is not a bomb."""
    for c in analysis.cmds:
        if c.icode and _UNBOUNDED_LOOP.search(c.icode) and _SPAWN.search(c.icode) and not INLINE_PATTERNS["fork"].search(c.icode):
            return [(f"{c.name} one-liner starts processes in an endless loop", True)]
    return []


# `for ((;;)); do X & done`: an arithmetic for loop without a condition whose body backgrounds a command.
_ENDLESS_ARITH_FOR = re.compile(r"\bfor\s*\(\(\s*[^;]*;\s*;[^)]*\)\)\s*;?\s*do\b(?:(?!\bdone\b).)*?[^&|]&(?![&>])", re.S)
_INFINITE_PRODUCERS = frozenset({"yes"})


def shell_spawn_loop_spellings(analysis):
    """Fork bombs the function/loop rule above does not see: `until false; do X & done`, `for ((;;)); do X & done`,
    the batch bomb `%0|%0`, and an endless producer feeding unlimited parallel xargs (`yes | xargs -P0 ..`)."""
    for cond, body in analysis.loops:
        if any(r.words[:1] == ["false"] for r in cond) and any(r.bg for r in body):
            return [("endless until-loop spawning background processes", True)]
    source = getattr(analysis, "source", "")
    if "((" in source and _ENDLESS_ARITH_FOR.search(source):
        return [("endless for ((;;)) loop spawning background processes", True)]
    for c in analysis.cmds:
        if c.argv[:1] == ["%0"] or (c.argv[:1] and c.argv[0].lower() == "start" and "%0" in c.argv) or any(st[:1] == ["%0"] or (st[:1] == ["start"] and "%0" in st) for st in windows_statements(c)):
            return [("batch file that starts copies of itself (%0|%0)", True)]
        xargs = next((w[1:] for w in c.wrapped if w and w[0].rsplit("/", 1)[-1] == "xargs"), None)
        if xargs and any(x in ("-P0", "--max-procs=0") or x == "-P" and xargs[i + 1:i + 2] == ["0"] for i, x in enumerate(xargs)):
            ups = [u for u in analysis.pipes.get(c.pipe, []) if u.stage < c.stage]
            if any(u.name in _INFINITE_PRODUCERS for u in ups):
                return [("endless input fed to unlimited parallel xargs", True)]
    return []


RULES = (
    Rule(
        "spawns_processes_endlessly",
        GROUP.name,
        "Self-recursive background/pipe functions, infinite background spawn loops, interpreter fork loops.",
        spawns_processes_endlessly,
        whole_line=True,
    ),
    Rule(
        "interpreter_spawn_loop",
        GROUP.name,
        "Unbounded loops that fork or spawn processes in interpreter one-liners (python, perl, ruby, node, php, "
        "PowerShell).",
        interpreter_spawn_loop,
        whole_line=True,
    ),
    Rule(
        "shell_spawn_loop_spellings",
        GROUP.name,
        "until false / for ((;;)) loops that background commands, the batch bomb %0|%0, yes | xargs -P0.",
        shell_spawn_loop_spellings,
        whole_line=True,
    ),
)
