"""Lexical layer: the tolerant tokenizer used when bashlex rejects a command (quotes, `$(..)`, heredocs,
operators), plus the word-level decoders (brace lists, ANSI-C `$'..'` strings, printf escapes).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# ---------------------------------------------------------------- tokenizer (fallback parser)

@dataclass(eq=False)
class RawCommand:
    words: list
    redirs: list
    pipe: int
    stage: int = 0
    bg: bool = False
    kind: str = "cmd"  # cmd | for (words[0]=var) | words (expand only, e.g. case subject)


def match_bracket(s: str, i: int, op: str, cl: str, bad: list) -> int:
    """Index just past the bracket closing s[i]; quote aware; len(s) (and bad flag) if unbalanced."""
    depth, j, n = 0, i, len(s)
    while j < n:
        c = s[j]
        if c == "\\":
            j += 2
            continue
        if c == "'" and op != "{":
            k = s.find("'", j + 1)
            j = n if k < 0 else k + 1
            continue
        if c == '"':
            j = double_quote_end(s, j + 1, bad)
            continue
        if c == "`":
            j = backtick_end(s, j + 1, bad)
            continue
        if c == op:
            depth += 1
        elif c == cl:
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    bad.append(s[i:])
    return n


def double_quote_end(s: str, j: int, bad: list) -> int:
    n = len(s)
    while j < n:
        c = s[j]
        if c == "\\":
            j += 2
        elif c == '"':
            return j + 1
        elif c == "$" and s[j + 1:j + 2] in ("(", "{"):
            j = match_bracket(s, j + 1, s[j + 1], ")" if s[j + 1] == "(" else "}", bad)
        elif c == "`":
            j = backtick_end(s, j + 1, bad)
        else:
            j += 1
    bad.append("dq")
    return n


def backtick_end(s: str, j: int, bad: list) -> int:
    n = len(s)
    while j < n:
        if s[j] == "\\":
            j += 2
        elif s[j] == "`":
            return j + 1
        else:
            j += 1
    bad.append("bt")
    return n


OPERATOR = re.compile(r"(\d*)(<<<|<<-|<<|&>>|&>|>>|>&|<&|<>|>\||>|<)|(;;&|;;|;&|&&|\|\||\|&|[;&|()\n])")


def scan_word(s: str, i: int, bad: list) -> int:
    n, j = len(s), i
    if s.startswith(("<(", ">("), j):
        j = match_bracket(s, j + 1, "(", ")", bad)
    while j < n:
        c = s[j]
        if c in " \t\n;&|()<>":
            break
        if c == "\\":
            j += 2
        elif c == "'":
            k = s.find("'", j + 1)
            if k < 0:
                bad.append("sq")
            j = n if k < 0 else k + 1
        elif c == '"':
            j = double_quote_end(s, j + 1, bad)
        elif c == "`":
            j = backtick_end(s, j + 1, bad)
        elif c == "$" and s[j + 1:j + 2] in ("(", "{"):
            j = match_bracket(s, j + 1, s[j + 1], ")" if s[j + 1] == "(" else "}", bad)
        elif c == "$" and s[j + 1:j + 2] == "'":
            j += 2
            while j < n and s[j] != "'":
                j += 2 if s[j] == "\\" else 1
            j += 1
        else:
            j += 1
    return min(j, n)


def lex(s: str, bad: list) -> list:
    """Tokens: ('w', raw) | ('op', op) | ['r', op, target]; heredoc bodies replace the target."""
    toks, pend, i, n = [], [], 0, len(s)
    while i < n:
        c = s[i]
        if c in " \t\r":
            i += 1
            continue
        if c == "\\" and s[i + 1:i + 2] == "\n":
            i += 2
            continue
        if c == "#" and (i == 0 or s[i - 1] in " \t\n;&|("):
            k = s.find("\n", i)
            i = n if k < 0 else k
            continue
        m = None if s.startswith(("<(", ">("), i) else OPERATOR.match(s, i)
        if m and m.group(3) == "\n":
            toks.append(("op", "\n"))
            i += 1
            for tok, delim, strip in pend:  # read heredoc bodies
                lines = []
                while i < n:
                    k = s.find("\n", i)
                    line = s[i:n if k < 0 else k]
                    i = n if k < 0 else k + 1
                    if (line.lstrip("\t") if strip else line) == delim:
                        break
                    lines.append(line)
                tok[2] = "\n".join(lines)
            pend = []
        elif m and m.group(3):
            toks.append(("op", m.group(3)))
            i = m.end()
        elif m:
            op = m.group(2)
            i = m.end()
            while i < n and s[i] in " \t":
                i += 1
            j = scan_word(s, i, bad)
            tok = ["r", op, s[i:j]]
            if op in ("<<", "<<-"):
                pend.append((tok, re.sub(r"[\"'\\]", "", s[i:j]), op == "<<-"))
                tok[1], tok[2] = "<<", ""
            toks.append(tok)
            i = j
        else:
            j = scan_word(s, i, bad)
            if j == i:
                j = i + 1
            toks.append(("w", s[i:j]))
            i = j
    return toks


def expand_braces(raw: str, limit: int = 64) -> list:
    """Unquoted brace lists: {rm,-rf,/} -> three words, r{m,} -> rm r."""
    if "{" not in raw or "," not in raw or len(raw) > 2000:
        return [raw]
    i, n, q = 0, len(raw), None
    while i < n:
        c = raw[i]
        if q:
            q = None if c == q else q
        elif c == "\\":
            i += 1
        elif c in "'\"":
            q = c
        elif c == "{" and (i == 0 or raw[i - 1] != "$"):
            depth, j, commas = 0, i, []
            while j < n:
                if raw[j] == "{":
                    depth += 1
                elif raw[j] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                elif raw[j] == "," and depth == 1:
                    commas.append(j)
                elif raw[j] in " '\"\t":
                    break
                j += 1
            if j < n and raw[j] == "}" and commas:
                cuts = [i] + commas + [j]
                alts = [raw[cuts[k] + 1:cuts[k + 1]] for k in range(len(cuts) - 1)]
                res = []
                for a in alts:
                    res.extend(expand_braces(raw[:i] + a + raw[j + 1:], limit))
                    if len(res) >= limit:
                        break
                return [" ".join(res)] if len(res) > limit else res
        i += 1
    return [raw]


ANSI_C_ESCAPES = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
        "\\": "\\", "'": "'", '"': '"', "?": "?"}


def ansi_c_string(w: str, i: int) -> tuple:
    out, n = [], len(w)
    while i < n and w[i] != "'":
        if w[i] == "\\" and i + 1 < n:
            m = re.compile(r"x([0-9a-fA-F]{1,2})|u([0-9a-fA-F]{1,4})|U([0-9a-fA-F]{1,8})|([0-7]{1,3})|c(.)").match(w, i + 1)
            if m:
                h = m.group(1) or m.group(2) or m.group(3)
                out.append(chr(int(h, 16)) if h else chr(int(m.group(4), 8)) if m.group(4) else chr(ord(m.group(5)) & 31))
                i = m.end()
                continue
            out.append(ANSI_C_ESCAPES.get(w[i + 1], "\\" + w[i + 1]))
            i += 2
        else:
            out.append(w[i])
            i += 1
    return "".join(out), i + 1


def unescape(s: str) -> str:
    """printf / echo -e / string-literal escapes (\\x72, \\162, \\u0072, \\n)."""
    if "\\" not in s:
        return s
    return ansi_c_string(s.replace("'", "\\'") + "'", 0)[0]
