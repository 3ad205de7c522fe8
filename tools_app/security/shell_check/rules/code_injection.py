"""Rule group `code_injection`: Downloaded/decoded/unknown content executed; eval of remote output; command names built
from expansions.
"""
from __future__ import annotations

import fnmatch
import re

from ..classify import executes_stdin, is_decoder, is_fetch, runs_code
from ..command import literal_text, operands, why_critical
from ..vocabulary import (
    BLOCK_DEVICE,
    C_PAYLOAD,
    COMPILERS,
    DOWNLOADERS,
    INLINE_PATTERNS,
    INTERPRETERS,
    LOLBINS,
    SHELLS,
    UNKNOWN_OUTPUT,
    UNKNOWN_VALUE,
    URL,
    WEBSHELL,
    basename,
    interpreter_name,
    shown,
    word_set,
)
from ..wrappers import shell_args
from .base import Rule, RuleGroup
from .common import data_store_abuse

GROUP = RuleGroup(
    "code_injection",
    "Downloaded/decoded/unknown content executed; eval of remote output; command names built from expansions.",
)


def _could_be(pattern: str) -> str | None:
    """A dangerous program name the glob command word could expand to (`/???/r?` -> rm)."""
    base = pattern.rsplit("/", 1)[-1]
    return next((n for n in sorted(GLOB_DANGER) if fnmatch.fnmatchcase(n, base)), None)


GLOB_DANGER = SHELLS | word_set("rm srm shred dd mkfs nc ncat netcat socat telnet curl wget python python3 perl ruby php node lua chmod chown cat base64 sudo su kill busybox env xargs awk find tar openssl ssh scp tee cp mv")


def _lolbin(c) -> list:
    """Windows living-off-the-land binaries (certutil -urlcache, bitsadmin /transfer, mshta http:, regsvr32 /i:http)."""
    w = c.name.lower().removesuffix(".exe")
    rx = LOLBINS.get(w)
    if rx and any(rx.search(x) for x in c.args):
        return [(f"{w} used to download or run a payload (LOLBin)", True)]
    return []


def _written_payload(analysis, c) -> list:
    """Web shells written to disk and inline C compiled from stdin that spawns shells or sets uid 0."""
    text = literal_text(c)
    if text is not None and any(">" in op for op, _ in c.redirs) and WEBSHELL.search(text):
        return [("writes a web shell", True)]
    if c.name in COMPILERS and "-" in c.args:
        src = [t for op, t in c.redirs if op in ("<<", "<<<")] + [literal_text(u) or "" for u in analysis.pipes.get(c.pipe, []) if u.stage < c.stage]
        if any(C_PAYLOAD.search(x) for x in src):
            return [(f"{c.name} compiles an inline payload that spawns a shell / changes uid", True)]
    return []


def executes_fetched_or_decoded_code(analysis, c):
    out = _lolbin(c) + _written_payload(analysis, c)
    if c.globbed:
        hit = _could_be(c.argv[0])
        if hit:
            out.append((f"glob command name {shown(c.argv[0])} can expand to {hit}", True))
    if c.unknown:
        danger = [x for x in c.args if why_critical(x) or BLOCK_DEVICE.match(x) or re.fullmatch(r"-[rRf]{2,}|--no-preserve-root|--recursive", x) or "/dev/tcp" in x]
        if danger or c.indirect or any(is_fetch(s) or is_decoder(s) for s in c.subs):
            out.append((f"command name built from expansion ({shown(c.argv[0])}) with dangerous arguments", True))
        else:
            out.append((f"command name built from expansion ({shown(c.argv[0])})", False))
    if runs_code(c):
        if any(is_fetch(s) or (is_decoder(s) and s.name not in ("echo", "printf")) for s in c.subs):
            out.append((f"{c.name or 'shell'} executes downloaded/decoded content from $(..)", True))
        if any(is_fetch(x) or is_decoder(x) for _, cs in c.procs for x in cs):
            out.append((f"{c.name} executes downloaded/decoded content from <(..)", True))
    if c.icode:
        if INLINE_PATTERNS["run"].search(c.icode) and INLINE_PATTERNS["decode"].search(c.icode):
            out.append((f"{c.name} decodes and executes an embedded payload", True))
        if INLINE_PATTERNS["run"].search(c.icode) and INLINE_PATTERNS["remote"].search(c.icode):
            out.append((f"{c.name} fetches and executes remote code", True))
    if c.stage > 0 and executes_stdin(c):
        ups = [u for u in analysis.pipes.get(c.pipe, []) if u.stage < c.stage]
        bad = [u for u in ups if is_fetch(u) or is_decoder(u) or u.unknown or any(UNKNOWN_VALUE in x or UNKNOWN_OUTPUT in x for x in u.args if u.name in ("echo", "printf"))]
        if bad:
            out.append((f"{bad[0].name or 'expansion'} output piped into {c.name or 'analysis interpreter'}", True))
        elif ups and not all(u.name in ("echo", "printf") for u in ups):
            out.append((f"{c.name} executes piped input", False))
    elif c.stage == 0 and is_fetch(c) and c.name in DOWNLOADERS and any(u.stage > 0 for u in analysis.pipes.get(c.pipe, [])):
        out.append((f"{c.name} output piped to another program", False))
    return out


def data_store_writes_code(analysis, c):
    return [(r, d) for g, r, d in data_store_abuse(analysis, c) if g == "code_injection"]


def downloaded_file_executed(analysis):
    got, out = set(), []
    for c in analysis.cmds:
        nm, a = c.name, c.args
        if nm in DOWNLOADERS:
            urls = [x for x in a if URL.match(x)]
            for i, x in enumerate(a):
                if x in ("-o", "--output", "-O", "--output-document") and i + 1 < len(a) and not (nm == "curl" and x == "-O"):
                    got.add(basename(a[i + 1]))
            if "-O" in a and nm == "curl" or "--remote-name" in a or (nm in ("wget", "aria2c") and not set(a) & {"-O", "--output-document", "-o"}):
                got.update(basename(u.split("?")[0].rstrip("/")) for u in urls)
            got.update(basename(t) for op, t in c.redirs if ">" in op)
            got.update(basename(t) for u in analysis.pipes.get(c.pipe, []) if u.name == "tee" for t in operands(u.args))
            continue
        if is_decoder(c) and nm not in ("echo", "printf", "tr", "rev"):  # base64 -d > a.sh && sh a.sh
            got.update(basename(t) for op, t in c.redirs if ">" in op)
        run = None
        if nm in SHELLS or interpreter_name(nm) in SHELLS:
            run = shell_args(a)[1] if c.code is None else None
        elif interpreter_name(nm) in INTERPRETERS and not c.icode:
            run = next(iter(operands(a, word_set("-W -X -m"))), None)
        elif nm in ("source", ".") and a:
            run = a[0]
        elif c.argv and "/" in c.argv[0]:
            run = c.argv[0]
        if run and got and basename(run) in got - {"-", ""}:
            out.append((f"downloaded file {run} is executed", True))
    return out


RULES = (
    Rule(
        "executes_fetched_or_decoded_code",
        GROUP.name,
        "Downloaded, decoded or unknown content executed; command names built from expansions or globs; LOLBins; web shells.",
        executes_fetched_or_decoded_code,
    ),
    Rule(
        "data_store_writes_code",
        GROUP.name,
        "Redis/SQL servers driven into writing files or loading code (CONFIG SET dir, INTO OUTFILE a web shell).",
        data_store_writes_code,
    ),
    Rule(
        "downloaded_file_executed",
        GROUP.name,
        "A file downloaded (or decoded) earlier in the line is then run.",
        downloaded_file_executed,
        whole_line=True,
    ),
)
