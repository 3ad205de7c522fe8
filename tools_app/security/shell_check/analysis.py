"""Analysis: parse a command line (bashlex, else the lexer) into raw simple commands, expand their words
statically (quotes, variables, `$IFS`, `$(echo ..)`), unwrap wrappers and recurse into every code string, giving a
`CommandAnalysis` that the rule groups read.
"""
from __future__ import annotations

import functools
import re
import unicodedata

from .classify import executes_stdin
from .command import SimpleCommand, literal_text, normalize_path, why_critical
from .lexer import (
    RawCommand,
    ansi_c_string,
    backtick_end,
    expand_braces,
    lex,
    match_bracket,
    unescape,
)
from .vocabulary import (
    ASSIGNMENT,
    AWKS,
    CMD_ENV,
    INLINE_PATTERNS,
    MAX_DEPTH,
    PROCESS_PATH,
    SHELLS,
    UNKNOWN_OUTPUT,
    UNKNOWN_VALUE,
    VARIABLE_NAME,
    ZERO_WIDTH,
    basename,
    interpreter_name,
    mark_unknown_name,
)
from .wrappers import (
    TOOL_SHELLS,
    commands_run_by_tool,
    git_code,
    inline_program,
    shell_args,
    unwrap,
)

# ---------------------------------------------------------------- analyser

class CommandAnalysis:
    """Parses and statically expands one command string (recursively) into SimpleCommand objects."""

    def __init__(self):
        self.vars = {"HOME": "~", "IFS": " \t\n", "0": "sh", "BASH": "/bin/bash", "PWD": ".", "PATH": "/usr/local/bin:/usr/bin:/bin", "SHELL": "/bin/sh"}
        self.cmds: list[SimpleCommand] = []
        self.hits: list[tuple[str, str, bool]] = []
        self.funcs, self.loops, self.flags = [], [], set()
        self.npipe, self.cwd = 0, None
        self.written: dict[str, str] = {}  # basename -> literal text written earlier in this command line
        self._subs, self._procs, self._ind = [], [], False

    def pipe(self) -> int:
        self.npipe += 1
        return self.npipe

    def hit(self, group: str, reason: str, deny: bool = True):
        self.hits.append((group, reason, deny))

    # ---- parsing
    def text(self, s: str, depth: int) -> list:
        if depth > MAX_DEPTH:
            self.hit("code_injection", f"nesting deeper than {MAX_DEPTH} levels")
            return []
        start = len(self.cmds)
        for r in self._parse(s):
            self._build(r, depth)
        return self.cmds[start:]

    def _parse(self, s: str) -> list:
        bashlex = _bashlex()
        if bashlex is not None and len(s) < 20000 and "\ue000" not in s:
            try:
                src = s + "\n" if "<<" in s and not s.endswith("\n") else s
                out: list = []
                for tree in bashlex.parse(src):
                    self._walk(tree, src, out, None, 0)
                return out
            except Exception:
                pass
        return self._fallback(s)

    def _walk(self, node, src, out, pipe, stage):
        k = node.kind
        if k == "command":
            r = RawCommand([], [], pipe or self.pipe(), stage)
            for p in node.parts:
                if p.kind in ("word", "assignment"):
                    r.words.append(src[p.pos[0]:p.pos[1]])
                elif p.kind == "redirect":
                    r.redirs.append(self._bl_redir(p, src))
            out.append(r)
        elif k == "pipeline":
            pid, st = self.pipe(), 0
            for p in node.parts:
                if p.kind == "pipe":
                    st += 1
                else:
                    self._walk(p, src, out, pid, st)
        elif k == "list":
            last = len(out)
            for p in node.parts:
                if p.kind == "operator":
                    if p.op == "&":
                        for r in out[last:]:
                            r.bg = True
                    continue
                last = len(out)
                self._walk(p, src, out, pipe, stage)
        elif k == "function":
            names = [p for p in node.parts if p.kind == "word"]
            start = len(out)
            for p in node.parts:
                if p.kind not in ("word", "reservedword"):
                    self._walk(p, src, out, None, 0)
            self.funcs.append((src[names[0].pos[0]:names[0].pos[1]] if names else "", out[start:]))
        elif k == "for":
            out.append(RawCommand([src[p.pos[0]:p.pos[1]] for p in node.parts if p.kind == "word"], [], self.pipe(), kind="for"))
            for p in node.parts:
                if p.kind not in ("word", "reservedword"):
                    self._walk(p, src, out, pipe, stage)
        else:
            marks = []
            for p in (getattr(node, "parts", None) or getattr(node, "list", None) or []):
                if p.kind not in ("reservedword", "operator", "pipe"):
                    s0 = len(out)
                    self._walk(p, src, out, pipe, stage)
                    marks.append(out[s0:])
            if k in ("while", "until") and len(marks) >= 2:
                self.loops.append((marks[0], marks[1]))
            for rd in getattr(node, "redirects", None) or []:
                out.append(RawCommand([], [self._bl_redir(rd, src)], pipe or self.pipe(), stage))

    @staticmethod
    def _bl_redir(p, src):
        if getattr(p, "heredoc", None) is not None:
            body = p.heredoc.value
            return ("<<", body.rsplit("\n", 1)[0] if "\n" in body else "")
        o = p.output
        return (p.type, str(o) if isinstance(o, int) else src[o.pos[0]:o.pos[1]])

    def _fallback(self, s: str) -> list:
        bad: list = []
        toks = lex(s, bad)
        if bad:
            self.flags.add("unbalanced")
        out, cur, pid, stage, blocks, func, case_pat, i = [], None, self.pipe(), 0, [], None, False, 0
        while i < len(toks):
            t = toks[i]
            nxt = toks[i + 1:i + 3]
            if t[0] == "w" and cur is None:
                w = t[1]
                if case_pat:
                    j = i
                    while j < len(toks) and (toks[j][0] == "w" or toks[j] == ("op", "|") or toks[j] == ("op", "(")):
                        j += 1
                    case_pat = False
                    if j < len(toks) and toks[j] == ("op", ")"):
                        i = j + 1
                        continue
                if w in ("if", "then", "else", "elif", "fi", "do", "!", "time", "in", "esac", "coproc"):
                    if w == "do" and blocks and blocks[-1][0] in ("while", "for"):
                        blocks[-1][3] = len(out)
                elif w in ("while", "until"):
                    blocks.append(["while", None, len(out), len(out)])
                elif w == "done" and blocks and blocks[-1][0] in ("while", "for"):
                    b = blocks.pop()
                    if b[0] == "while":
                        self.loops.append((out[b[2]:b[3]], out[b[3]:]))
                elif w == "{":
                    blocks.append(["{", func, len(out), 0])
                    func = None
                elif w == "}":
                    if blocks and blocks[-1][0] == "{":
                        b = blocks.pop()
                        if b[1] is not None:
                            self.funcs.append((b[1], out[b[2]:]))
                elif w in ("for", "select", "case"):
                    j, words = i + 1, []
                    while j < len(toks) and toks[j][0] == "w" and toks[j][1] not in ("do",):
                        words.append(toks[j][1])
                        j += 1
                        if w == "case" and words[-1] == "in":
                            break
                    if w == "case":
                        out.append(RawCommand(words, [], self.pipe(), kind="words"))
                        case_pat = True
                    else:
                        out.append(RawCommand(words[:1] + words[2:], [], self.pipe(), kind="for"))
                        blocks.append(["for", None, len(out), len(out)])
                    i = j if w != "case" else j
                    continue
                elif w == "function" and nxt and nxt[0][0] == "w":
                    func = nxt[0][1]
                    i += 2
                    if toks[i:i + 2] == [("op", "("), ("op", ")")]:
                        i += 2
                    continue
                elif w == "[[":
                    j, words = i, []
                    while j < len(toks) and toks[j] != ("w", "]]"):
                        words.append(toks[j][1] if toks[j][0] != "r" else toks[j][1] + toks[j][2])
                        j += 1
                    out.append(RawCommand(words + ["]]"], [], pid, stage))
                    i = j + 1
                    continue
                elif nxt == [("op", "("), ("op", ")")]:
                    func = w
                    i += 3
                    continue
                else:
                    cur = RawCommand([w], [], pid, stage)
                    out.append(cur)
            elif t[0] == "w":
                cur.words.append(t[1])
            elif t[0] == "r":
                if cur is None:
                    cur = RawCommand([], [], pid, stage)
                    out.append(cur)
                cur.redirs.append((t[1], t[2]))
            elif t[1] in ("|", "|&"):
                stage, cur = stage + 1, None
            elif t[1] == "(":
                blocks.append(["(", func, len(out), 0])
                func, cur = None, None
            elif t[1] == ")":
                if blocks and blocks[-1][0] == "(":
                    b = blocks.pop()
                    if b[1] is not None:
                        self.funcs.append((b[1], out[b[2]:]))
                cur = None
            else:
                if t[1] == "&":
                    for r in out:
                        if r.pipe == pid:
                            r.bg = True
                case_pat = case_pat or t[1] in (";;", ";&", ";;&")
                cur, pid, stage = None, self.pipe(), 0
            i += 1
        return out

    # ---- word expansion
    def expand(self, raw: str, depth: int) -> list:
        out = []
        for w in expand_braces(raw):
            out.extend(self._expand1(w, depth))
        return out

    def join(self, raw: str, depth: int) -> str:
        return " ".join(self._expand1(raw, depth)) if raw else ""

    def _var(self, name: str) -> str:
        return self.vars.get(name, UNKNOWN_VALUE)

    def _expand1(self, w: str, depth: int) -> list:
        pieces, lit, i, n, dq, quoted = [], [], 0, len(w), False, False

        def flush():
            if lit:
                pieces.append(("".join(lit), False))
                lit.clear()

        while i < n:
            c = w[i]
            if c == "\\":
                nx = w[i + 1:i + 2]
                if dq and nx not in ("$", "`", '"', "\\", "\n"):
                    lit.append("\\")
                    i += 1
                else:
                    lit.append("" if nx == "\n" else nx)
                    i += 2
            elif c == "'" and not dq:
                k = w.find("'", i + 1)
                k = n if k < 0 else k
                lit.append(w[i + 1:k])
                i, quoted = k + 1, True
            elif c == '"':
                dq, quoted, i = not dq, True, i + 1
            elif c == "$" and not dq and w[i + 1:i + 2] == "'":
                val, i = ansi_c_string(w, i + 2)
                if val != w[i - len(val) - 1:i - 1]:
                    self.flags.add("ansi_c")
                lit.append(val)
                quoted = True
            elif c == "$" and not dq and w[i + 1:i + 2] == '"':
                i += 1
            elif c == "$" and w.startswith("$((", i):
                k = match_bracket(w, i + 1, "(", ")", [])
                if "$(" in w[i + 3:k] or "`" in w[i + 3:k]:
                    self._expand1(w[i + 3:k - 2], depth)
                flush()
                pieces.append((UNKNOWN_VALUE, not dq))
                i = k
            elif (c == "$" and w[i + 1:i + 2] == "(") or c == "`":
                k = match_bracket(w, i + 1, "(", ")", []) if c == "$" else backtick_end(w, i + 1, [])
                inner = w[i + 2:k - 1] if c == "$" else w[i + 1:k - 1].replace("\\`", "`")
                flush()
                pieces.append((self._cmdsub(inner, depth), not dq))
                i = k
            elif c == "$" and w[i + 1:i + 2] == "{":
                k = match_bracket(w, i + 1, "{", "}", [])
                flush()
                pieces.append((self._param(w[i + 2:k - 1], depth), not dq))
                i = k
            elif c == "$" and VARIABLE_NAME.match(w, i + 1):
                m = VARIABLE_NAME.match(w, i + 1)
                flush()
                pieces.append((self._var(m.group(0)), not dq))
                if m.group(0) == "IFS":
                    self.flags.add("ifs")
                i = m.end()
            elif c in "<>" and i == 0 and w[1:2] == "(":
                k = match_bracket(w, 1, "(", ")", [])
                self._procs.append((c, self.text(w[2:k - 1], depth + 1)))
                flush()
                pieces.append((PROCESS_PATH, False))
                i = k
            else:
                lit.append(c)
                i += 1
        flush()
        fields, cur, have = [], "", quoted
        ifs = self.vars.get("IFS", " \t\n")
        ifs = ifs if ifs and UNKNOWN_VALUE not in ifs else " \t\n"
        splitter = re.compile("[" + re.escape(ifs) + "]+")
        for t, sp in pieces:
            if not sp or not t:
                cur += t
                continue
            parts = [x for x in splitter.split(t) if x]
            if t[0] in ifs and (cur or have):
                fields.append(cur)
                cur, have = "", False
            if parts:
                cur += parts[0]
                for p in parts[1:]:
                    fields.append(cur)
                    cur = p
                have = True
            if t[-1] in ifs and (cur or have):
                fields.append(cur)
                cur, have = "", False
        if cur or have:
            fields.append(cur)
        return fields

    def _cmdsub(self, inner: str, depth: int) -> str:
        cmds = self.text(inner, depth + 1)
        self._subs.extend(cmds)
        if len(cmds) == 1 and not cmds[0].subs and cmds[0].name in ("echo", "printf"):
            args = [a for a in cmds[0].args if a not in ("-n", "-e", "-E")]
            return unescape(" ".join(args)) if cmds[0].name == "printf" or "-e" in cmds[0].args else " ".join(args)
        if len(cmds) == 1 and cmds[0].name == "pwd":
            return "."
        if len(cmds) == 1 and cmds[0].name == "cat" and not cmds[0].args and cmds[0].redirs[:1] and cmds[0].redirs[0][0] in ("<<", "<<<"):
            return cmds[0].redirs[0][1]
        return UNKNOWN_OUTPUT

    def _param(self, inner: str, depth: int) -> str:
        if inner.startswith("!"):
            self._ind = True
            self.flags.add("indirect")
            return UNKNOWN_VALUE
        if re.search(r"@[PEAQaKk]$", inner):
            self._ind = True
            self.flags.add("prompt" if inner.endswith("@P") else "indirect")
            return UNKNOWN_VALUE
        if inner.startswith("#"):
            v = self.vars.get(inner[1:])
            return str(len(v)) if v is not None and UNKNOWN_VALUE not in v else UNKNOWN_VALUE
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-])(.*)$", inner, re.S)
        if not m:
            return UNKNOWN_VALUE
        name, op = m.groups()
        if name == "IFS":
            self.flags.add("ifs")
        val = self.vars.get(name)
        known = val is not None and UNKNOWN_VALUE not in val and UNKNOWN_OUTPUT not in val
        if not op:
            return val if val is not None else UNKNOWN_VALUE
        if op[:2] in (":-", ":=") or op[:1] in ("-", "="):
            word = op[2:] if op[0] == ":" else op[1:]
            return val if known and val else self.join(word, depth)
        if op[:2] == ":+" or op[:1] == "+":
            return self.join(op[2:] if op[0] == ":" else op[1:], depth) if known and val else ("" if known else UNKNOWN_VALUE)
        if op[:2] == ":?":  # `${X:?msg}` aborts when X is unset or empty: the value is unknown but never empty
            return val if known and val else UNKNOWN_VALUE + UNKNOWN_VALUE
        if not known:
            return UNKNOWN_VALUE
        sm = re.match(r":\s*(-?\d+)\s*(?::\s*(-?\d+))?$", op)
        if sm:
            a, b = int(sm.group(1)), sm.group(2)
            a = max(len(val) + a, 0) if a < 0 else a
            return val[a:] if b is None else val[a:a + int(b)] if int(b) >= 0 else val[a:int(b)]
        for pre, fn in (("//", lambda v, x, y: v.replace(x, y)), ("/", lambda v, x, y: v.replace(x, y, 1))):
            if op.startswith(pre):
                x, _, y = op[len(pre):].partition("/")
                return fn(val, x, y) if x and not any(ch in x for ch in "*?[") else UNKNOWN_VALUE
        for pre, fn in (("##", str.removeprefix), ("#", str.removeprefix), ("%%", str.removesuffix), ("%", str.removesuffix)):
            if op.startswith(pre):
                x = op[len(pre):]
                return fn(val, x) if not any(ch in x for ch in "*?[") else UNKNOWN_VALUE
        return {"^^": val.upper(), ",,": val.lower()}.get(op, UNKNOWN_VALUE)

    # ---- building and unwrapping simple commands
    def _build(self, r: RawCommand, depth: int):
        saved = (self._subs, self._procs, self._ind)
        self._subs, self._procs, self._ind = [], [], False
        try:
            if r.kind == "for":
                items = [f for w in r.words[1:] for f in self.expand(w, depth)]
                if r.words:
                    crit = [x for x in items if why_critical(x)]
                    self.vars[r.words[0]] = (crit or items or [UNKNOWN_VALUE])[0]
                return
            if r.kind == "words":
                for w in r.words:
                    self.expand(w, depth)
                return
            words, assigns = list(r.words), {}
            while words and ASSIGNMENT.match(words[0]):
                nm, val = words.pop(0).split("=", 1)
                assigns[nm.rstrip("+").split("[")[0]] = self.join(val, depth)
            argv = [f for w in words for f in self.expand(w, depth)]
            redirs = []
            for op, tgt in r.redirs:
                redirs.append((op, tgt if op == "<<" else self.join(tgt, depth)))
            if not words:
                self.vars.update(assigns)
            cmd = SimpleCommand(argv, assigns, redirs, r.pipe, r.stage, r.bg, depth, subs=self._subs, procs=self._procs)
            mark_unknown_name(cmd)
            cmd.indirect, cmd.cwd = self._ind, self.cwd
            if words and argv and argv[0] != words[0] and not cmd.unknown and not words[0].startswith(("$", '"$')):
                self.flags.add("obfuscated_name")
            self._finish(cmd, depth)
        finally:
            self._subs, self._procs, self._ind = saved

    def _finish(self, cmd: SimpleCommand, depth: int):
        for _ in range(MAX_DEPTH + 2):
            if not cmd.argv or cmd.unknown:
                break
            nm = cmd.name
            if nm in ("export", "declare", "typeset", "local", "readonly"):
                for a in cmd.args:
                    if ASSIGNMENT.match(a):
                        k, v = a.split("=", 1)
                        cmd.assigns[k] = self.vars[k] = v
                break
            res = unwrap(self, cmd)
            if res is None:
                break
            kind, val = res
            cmd.wrappers.append(nm)
            cmd.wrapped.append(list(cmd.argv))
            if len(cmd.wrappers) > MAX_DEPTH:
                self.hit("code_injection", "too many nested wrappers")
                break
            if kind == "code":
                cmd.code = self.text(val, depth + 1)
                break
            cmd.argv = val
            mark_unknown_name(cmd)
        for k, v in cmd.assigns.items():  # prefix, `env K=V` and `export K=V` values that name a program
            if k in CMD_ENV and v:
                cmd.subs.extend(self.text(v, depth + 1))
        nm = cmd.name
        tool_code = commands_run_by_tool(cmd) if nm in TOOL_SHELLS and not cmd.unknown else []
        for code in tool_code[:16]:  # sqlite3 '.shell ..', mysql '\\! ..', psql COPY .. PROGRAM '..', gdb -ex '!..'
            inner = self.text(code, depth + 1)
            for x in inner:
                x.parent = x.parent or nm
            cmd.subs.extend(inner)
        if nm == "git" and not cmd.unknown:
            for code in git_code(cmd.args):
                inner = self.text(code, depth + 1)
                for x in inner:
                    x.parent = x.parent or "git"
                cmd.subs.extend(inner)
        if nm in ("cd", "pushd"):
            t = (cmd.args or ["~"])[0]
            self.cwd = normalize_path(t) if t.startswith(("/", "~")) and not (UNKNOWN_VALUE in t or UNKNOWN_OUTPUT in t) else cmd.path(t) if self.cwd and UNKNOWN_VALUE not in t else None
        if cmd.unknown and "-c" in cmd.args[:-1] and not (nm in SHELLS or interpreter_name(nm) in SHELLS):
            cmd.subs.extend(self.text(cmd.args[cmd.args.index("-c") + 1], depth + 1))
        if nm in SHELLS or interpreter_name(nm) in SHELLS:
            code, script = shell_args(cmd.args)
            body = next((t for op, t in cmd.redirs if op in ("<<", "<<<")), None)
            if code is not None:
                cmd.code = self.text(code, depth + 1)
            elif script is None and body is not None:
                cmd.code = self.text(body, depth + 1)
            elif script is not None and basename(script) in self.written:
                cmd.subs.extend(self.text(self.written[basename(script)], depth + 1))
        elif nm in ("at", "batch"):
            body = next((t for op, t in cmd.redirs if op in ("<<", "<<<")), None)
            if body is not None:
                cmd.code = self.text(body, depth + 1)
        elif nm == "find":
            self._find_exec(cmd, depth)
        elif nm in ("eval", "source", "."):
            if nm == "eval":
                cmd.code = self.text(" ".join(cmd.args), depth + 1)
            elif cmd.args and basename(cmd.args[0]) in self.written:
                cmd.subs.extend(self.text(self.written[basename(cmd.args[0])], depth + 1))
        else:
            cmd.icode = inline_program(cmd)
            if cmd.icode:
                self._shell_outs(cmd, depth)
        if cmd.argv and "/" in cmd.argv[0] and not cmd.unknown and nm in self.written and cmd.code is None:
            cmd.subs.extend(self.text(self.written[nm], depth + 1))  # echo '..' > x.sh && ./x.sh
        if cmd.stage > 0 and executes_stdin(cmd):
            self._piped_script(cmd, depth)
        self._track_written(cmd, depth)
        self.cmds.append(cmd)

    def _track_written(self, cmd: SimpleCommand, depth: int):
        """Remember literal text written by echo/printf/cat-heredoc so a later `sh x.sh`/`./x.sh` is analysed.

        Text written into git hooks is analysed at once: git runs it later without any visible command."""
        text = literal_text(cmd)
        if text is None:
            return
        for op, t in cmd.redirs:
            if op in (">", ">>", ">|") and t and UNKNOWN_VALUE not in t and UNKNOWN_OUTPUT not in t:
                b = basename(t)
                self.written[b] = (self.written.get(b, "") + "\n" + text) if op == ">>" else text
                if re.search(r"(^|/)(\.git/hooks|\.githooks|\.husky|\.git-hooks)/", t):  # git runs these later
                    cmd.subs.extend(self.text(text, depth + 1))

    def _piped_script(self, cmd: SimpleCommand, depth: int):
        """`echo 'ls' | sh`, `cat <<EOF | bash`: analyse the literal text the interpreter will run."""
        for u in self.cmds:
            if u.pipe == cmd.pipe and u.stage < cmd.stage:
                text = literal_text(u)
                for text in ([text] if text is not None else []):
                    if cmd.name in SHELLS or interpreter_name(cmd.name) in SHELLS or cmd.unknown or cmd.name in ("at", "batch"):
                        cmd.subs.extend(self.text(text, depth + 1))
                    elif not cmd.icode:
                        cmd.icode = text
                        self._shell_outs(cmd, depth)

    def _find_exec(self, cmd: SimpleCommand, depth: int):
        args = cmd.args
        root = next((a for a in args if not a.startswith(("-", "(", "!"))), ".")
        i = 0
        while i < len(args):
            if args[i] in ("-exec", "-execdir", "-ok", "-okdir"):
                j = i + 1
                while j < len(args) and args[j] not in (";", "+", "\\;"):
                    j += 1
                inner = [root if a == "{}" else a for a in args[i + 1:j]]
                if inner:
                    self._finish(SimpleCommand(inner, {}, [], self.pipe(), 0, depth=depth + 1, wrappers=["find"]), depth + 1)
                i = j
            i += 1

    def _shell_outs(self, cmd: SimpleCommand, depth: int):
        """Recurse into literal shell commands an inline program hands to system()/exec()/backticks."""
        code, lits = cmd.icode, []
        for m in INLINE_PATTERNS["call"].finditer(code):
            lits.append(m.group(2))
        for m in INLINE_PATTERNS["calllist"].finditer(code):
            lits.append(" ".join(x.group(2) for x in INLINE_PATTERNS["lit"].finditer(m.group(1))))
        if interpreter_name(cmd.name) in ("perl", "ruby", "php") or cmd.name in AWKS:
            lits += [m.group(1) for m in INLINE_PATTERNS["tick"].finditer(code)]
        if cmd.name in AWKS:
            lits += [m.group(2) or m.group(4) for m in INLINE_PATTERNS["awkpipe"].finditer(code)]
        for lit in lits[:16]:
            if lit and lit.strip():
                inner = self.text(unescape(lit), depth + 1)
                for x in inner:
                    x.parent = x.parent or cmd.name
                cmd.subs.extend(inner)
        if re.search(r"(system|exec|eval|popen)\s*\(?\s*(\$0|\$_|<STDIN>|sys\.stdin|STDIN|gets|readline|input\()", code):
            cmd.stdin_exec = True


@functools.cache
def _bashlex():
    """bashlex, the primary parser, imported on the first parse (~0.1 s) rather than when a process starts; None
    where it cannot be imported (the lexer's fallback covers what bashlex rejects)."""
    try:
        import bashlex
    except Exception:  # pragma: no cover - optional
        return None
    return bashlex


# ---------------------------------------------------------------- public API

def normalize_text(command: str) -> tuple:
    s = unicodedata.normalize("NFKC", command).translate(ZERO_WIDTH)
    flags = set()
    out = []
    for ch in s:
        cat = unicodedata.category(ch)
        if ch in "\t\n":
            out.append(ch)
        elif cat in ("Cc", "Cf", "Co", "Cs"):
            flags.add("control")
            out.append(" ")
        else:
            out.append(ch)
    return "".join(out), flags


def analyse(command: str) -> CommandAnalysis:
    s, flags = normalize_text(command)
    analysis = CommandAnalysis()
    analysis.flags |= flags
    analysis.source = s  # the normalized text, for whole-line rules about syntax the parse does not keep (`for ((;;))`)
    analysis.text(s, 0)
    analysis.pipes = {}
    for c in analysis.cmds:
        analysis.pipes.setdefault(c.pipe, []).append(c)
    return analysis
