"""Filesystem tools (group "fs"): read_file, write_file, edit, list_files, search, glob, workspace_dir.

Every path goes through the call's `Workspace` (`ctx.workspace`, see `tools_app.workspace`), which confines it to
the workspace with `tools_app.paths` (real-path resolution, no symlink escapes, O_NOFOLLOW descriptor walks, no
hard links or special files) and applies the denied prefixes. Directory walks (list/search/glob) go through
directory descriptors opened with O_NOFOLLOW and never descend into symlinks; denied entries are simply invisible.

A path the workspace routes elsewhere (a router claims it: context files, memory) is read, written and edited as
the router's text, through the same argument checks, limits and messages as a disk file; list_files, glob and
search show routed files alongside the disk's (a routed file hides a disk file of the same path).

Nothing here reads Django settings: all configuration comes from the ToolContext.
"""
from __future__ import annotations

import io
import os
import re
import stat
import time
import unicodedata
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Iterator

from tools_app.base import Tool, ToolContext, ToolError, ToolResult
from tools_app.paths import PathError, check_regular, is_denied
from tools_app.workspace import Workspace, WorkspaceRouter, workspace_required

KB = 1024
MB = 1024 * 1024

READ_MAX_FILE_BYTES = 10 * MB        # larger files need a line range
READ_MAX_OUTPUT_BYTES = 256 * KB     # per call, whatever the range
WRITE_MAX_BYTES = 5 * MB
EDIT_MAX_FILE_BYTES = 10 * MB
LIST_DEFAULT_ENTRIES, LIST_MAX_ENTRIES = 500, 5000
SEARCH_DEFAULT_RESULTS, SEARCH_MAX_RESULTS = 200, 2000
SEARCH_MAX_FILE_BYTES = 2 * MB
SEARCH_MAX_TOTAL_BYTES = 50 * MB
SEARCH_MAX_FILES = 20_000
SEARCH_MAX_LINE_CHARS = 10_000
SEARCH_SHOW_LINE_CHARS = 300
SEARCH_TIME_BUDGET = 20.0
SEARCH_MAX_PATTERN = 1000
GLOB_MAX_RESULTS = 1000
GLOB_MAX_PATTERN = 1000
WALK_MAX_DEPTH = 64
WALK_MAX_VISITED = 200_000
WALK_MAX_DIR_ENTRIES = 100_000
BINARY_SNIFF_BYTES = 8 * KB

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


# --------------------------------------------------------------------------------------------
# shared helpers
# --------------------------------------------------------------------------------------------
def _display(text: str) -> str:
    """Make a file name safe to print on one line (escape control chars and undecodable bytes)."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if 0xDC80 <= ord(ch) <= 0xDCFF:  # surrogateescape'd byte
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        elif 0xD800 <= ord(ch) <= 0xDFFF or unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp"):
            out.append(ch.encode("unicode_escape", "backslashreplace").decode("ascii"))
        else:
            out.append(ch)
    return "".join(out)


def _str_arg(args: dict[str, Any], key: str, default: str | None = None, *, required: bool = False) -> str:
    value = args.get(key, default)
    if value is None:
        if required:
            raise ToolError(f"missing required argument: {key}")
        return default or ""
    if not isinstance(value, str):
        raise ToolError(f"argument {key} must be a string")
    return value


def _int_arg(args: dict[str, Any], key: str, default: int | None, lo: int, hi: int | None = None) -> int | None:
    value = args.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ToolError(f"argument {key} must be an integer")
    if value < lo:
        raise ToolError(f"argument {key} must be >= {lo}")
    if hi is not None and value > hi:
        raise ToolError(f"argument {key} must be <= {hi}")
    return value


def _bool_arg(args: dict[str, Any], key: str, default: bool = False) -> bool:
    value = args.get(key, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ToolError(f"argument {key} must be true or false")
    return value


def _routed_bytes(ws: Workspace, router: WorkspaceRouter, rel: str) -> bytes:
    """A routed file's text as the UTF-8 bytes a disk file would hold (so the disk code path runs on it)."""
    try:
        text = router.read(ws, rel)
    except FileNotFoundError:
        raise ToolError(f"file not found: {_display(rel)}") from None
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError(f"not valid UTF-8 text: {_display(rel)}") from None


def _routed_tree(ws: Workspace, rel_dir: str) -> dict[str, WorkspaceRouter | None]:
    """The routed files below `rel_dir` and the directories holding them (value None), by workspace-relative path.
    Empty when the workspace has no routers."""
    if not ws.routers:
        return {}
    depth = 0 if rel_dir in ("", ".") else rel_dir.count("/") + 1
    tree: dict[str, WorkspaceRouter | None] = {}
    for rel, router in ws.routed_files(rel_dir).items():
        parts = rel.split("/")
        for i in range(depth + 1, len(parts)):
            tree.setdefault("/".join(parts[:i]), None)
        tree[rel] = router
    return tree


def _order(rel: str) -> list[str]:
    """Sort key matching the directory walks' order (pre-order, names sorted in each directory)."""
    return rel.split("/")


def _size(n: int) -> str:
    if n < KB:
        return f"{n} B"
    if n < MB:
        return f"{n / KB:.1f} KB"
    return f"{n / MB:.1f} MB"


@dataclass
class _Entry:
    rel: str
    name: str
    kind: str  # "dir" | "file" | "symlink" | "other"
    size: int
    nlink: int
    dir_fd: int  # descriptor of the containing directory, valid while the walk is paused here


@dataclass
class WalkState:
    visited: int = 0
    capped: bool = False
    errors: int = 0
    depth_limited: bool = False
    notes: list[str] = field(default_factory=list)


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISREG(mode):
        return "file"
    return "other"


def walk_tree(
    dfd: int, rel: str, *, denied: tuple[str, ...], recursive: bool, max_depth: int, state: WalkState, depth: int = 0
) -> Iterator[_Entry]:
    """Pre-order walk below an open directory descriptor; never follows symlinks, hides denied."""
    try:
        names: list[str] = []
        with os.scandir(dfd) as it:
            for e in it:
                names.append(e.name)
                if len(names) >= WALK_MAX_DIR_ENTRIES:
                    state.capped = True
                    break
    except OSError:
        state.errors += 1
        return
    for name in sorted(names):
        child = name if rel in ("", ".") else f"{rel}/{name}"
        if is_denied(child, denied):
            continue
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except OSError:
            state.errors += 1
            continue
        state.visited += 1
        if state.visited > WALK_MAX_VISITED:
            state.capped = True
            return
        kind = _kind(st.st_mode)
        yield _Entry(child, name, kind, st.st_size, st.st_nlink, dfd)
        if kind == "dir" and recursive:
            if depth + 1 >= max_depth:
                state.depth_limited = True
                continue
            try:
                cfd = os.open(name, _DIR_FLAGS, dir_fd=dfd)
            except OSError:  # swapped for a symlink, permission denied, vanished: skip it
                state.errors += 1
                continue
            try:
                yield from walk_tree(cfd, child, denied=denied, recursive=True, max_depth=max_depth, state=state, depth=depth + 1)
            finally:
                os.close(cfd)
            if state.capped:
                return


def open_entry(entry: _Entry) -> int:
    """Open a regular, singly-linked file found by a walk (O_NOFOLLOW|O_NONBLOCK); raise OSError/PathError."""
    fd = os.open(entry.name, _FILE_FLAGS, dir_fd=entry.dir_fd)
    try:
        check_regular(os.fstat(fd), entry.rel)
    except BaseException:
        os.close(fd)
        raise
    return fd


class _Glob:
    """A glob matcher without regexes (so no pathological backtracking).

    `*` matches any run of characters within one path segment, `?` one character, `[abc]`/`[a-z]`
    /`[!abc]` a character set, and a whole segment `**` any number (including zero) of segments.
    Segment matching is the classic two-pointer wildcard algorithm (O(len(pattern) * len(name)));
    `**` is handled by dynamic programming over segments.
    """

    def __init__(self, pattern: str) -> None:
        segs: list[object] = []
        for seg in pattern.split("/"):
            if seg == "**":
                if segs and segs[-1] == "**":
                    continue  # **/** == **
                segs.append("**")
            else:
                segs.append(self._tokens(seg))
        self.segs = segs

    @staticmethod
    def _tokens(seg: str) -> list[tuple]:
        toks: list[tuple] = []
        i, n = 0, len(seg)
        while i < n:
            c = seg[i]
            i += 1
            if c == "*":
                if not toks or toks[-1] != ("*",):
                    toks.append(("*",))
            elif c == "?":
                toks.append(("?",))
            elif c == "[":
                j = i
                negate = j < n and seg[j] in "!^"
                if negate:
                    j += 1
                k = j + 1 if j < n and seg[j] == "]" else j
                while k < n and seg[k] != "]":
                    k += 1
                if k >= n:
                    toks.append(("lit", "["))
                    continue
                body, items = seg[j:k], []
                m = 0
                while m < len(body):
                    if m + 2 < len(body) and body[m + 1] == "-":
                        items.append((body[m], body[m + 2]))
                        m += 3
                    else:
                        items.append((body[m], body[m]))
                        m += 1
                toks.append(("set", negate, tuple(items)))
                i = k + 1
            else:
                toks.append(("lit", c))
        return toks

    @staticmethod
    def _one(tok: tuple, ch: str) -> bool:
        kind = tok[0]
        if kind == "lit":
            return tok[1] == ch
        if kind == "?":
            return True
        hit = any(lo <= ch <= hi for lo, hi in tok[2])
        return hit != tok[1]

    @classmethod
    def match_segment(cls, toks: list[tuple], name: str) -> bool:
        p = s = 0
        star_p, star_s = -1, 0
        while s < len(name):
            if p < len(toks) and toks[p] != ("*",) and cls._one(toks[p], name[s]):
                p += 1
                s += 1
            elif p < len(toks) and toks[p] == ("*",):
                star_p, star_s = p, s
                p += 1
            elif star_p >= 0:
                p = star_p + 1
                star_s += 1
                s = star_s
            else:
                return False
        while p < len(toks) and toks[p] == ("*",):
            p += 1
        return p == len(toks)

    def match(self, path: str) -> bool:
        parts = path.split("/")
        segs = self.segs
        P, S = len(segs), len(parts)
        # ok[j] == True: segs[:i] can match parts[:j]
        ok = [True] + [False] * S
        for i in range(P):
            seg = segs[i]
            nxt = [False] * (S + 1)
            if seg == "**":
                seen = False
                for j in range(S + 1):
                    seen = seen or ok[j]
                    nxt[j] = seen
            else:
                for j in range(S):
                    if ok[j] and self.match_segment(seg, parts[j]):
                        nxt[j + 1] = True
            ok = nxt
            if not any(ok):
                return False
        return ok[S]


def _has_magic(seg: str) -> bool:
    return any(c in seg for c in "*?[")


# --------------------------------------------------------------------------------------------
# read_file
# --------------------------------------------------------------------------------------------
class ReadFileTool(Tool):
    name = "read_file"
    description = (
        "Read a UTF-8 text file from the agent's workspace. `path` is relative to the workspace "
        "(absolute paths are accepted only if they point inside it). Optionally pass `start_line` "
        "and/or `end_line` (1-based, inclusive) to read only part of a file. The output starts with a "
        "header line like `[src/app.py lines 1-120 of 120]` followed by the file's exact text (no line "
        "numbers added). Output is capped at 256 KB per call; when it is cut, the header says so and "
        "tells you the `start_line` to continue from. Files over 10 MB can only be read with a line "
        "range. Binary files, directories, special files, symlinks leading outside the workspace and "
        "protected paths are refused with an error."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "maxLength": 4096,
                     "description": "File path relative to the workspace."},
            "start_line": {"type": "integer", "minimum": 1,
                           "description": "First line to return (1-based). Default 1."},
            "end_line": {"type": "integer", "minimum": 1,
                         "description": "Last line to return (inclusive). Default: end of file."},
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    group = "fs"
    read_only = True
    timeout_seconds = 30.0

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        ws = workspace_required(ctx)
        path = _str_arg(args, "path", required=True)
        start = _int_arg(args, "start_line", None, 1)
        end = _int_arg(args, "end_line", None, 1)
        if start is not None and end is not None and end < start:
            raise ToolError(f"end_line ({end}) must be >= start_line ({start})")
        routed = ws.router_for(path)
        if routed is not None:
            data = _routed_bytes(ws, *routed)
            return self._read_file(io.BytesIO(data), len(data), _display(routed[1]), start, end)
        rel = _display(ws.rel_of(path))
        fd = ws.open_for_read(path)
        with os.fdopen(fd, "rb") as f:
            return self._read_file(f, os.fstat(f.fileno()).st_size, rel, start, end)

    def _read_file(self, f: BinaryIO, size: int, rel: str, start: int | None, end: int | None) -> ToolResult:
        """The size limit, the binary sniff and the ranged read, on a disk file or a routed file's bytes."""
        ranged = start is not None or end is not None
        if size > READ_MAX_FILE_BYTES and not ranged:
            raise ToolError(
                f"file is too large to read whole ({_size(size)}; limit {_size(READ_MAX_FILE_BYTES)}): {rel}. "
                "Pass start_line/end_line to read a range."
            )
        try:
            head = f.read(BINARY_SNIFF_BYTES)
            f.seek(0)
        except OSError:
            raise ToolError(f"could not read {rel}") from None
        if b"\x00" in head:
            raise ToolError(f"not valid UTF-8 text (binary file?): {rel}")
        try:
            return self._read(f, rel, start or 1, end)
        except OSError:
            raise ToolError(f"could not read {rel}: I/O error") from None

    @staticmethod
    def _read(f, rel: str, start: int, end: int | None) -> ToolResult:
        want_end = end if end is not None else float("inf")
        lineno = 0                 # lines started so far
        at_line_start = True
        last_byte = b""
        collected: list[bytes] = []
        cur_line: list[bytes] = []
        size = 0
        last_full = 0
        truncated = overlong_first = False
        while not (at_line_start and lineno >= want_end):
            piece = f.readline(MB)
            if not piece:
                break
            last_byte = piece[-1:]
            if at_line_start:
                lineno += 1
                cur_line = []
            at_line_start = piece.endswith(b"\n")
            if lineno < start:
                continue
            if size + len(piece) > READ_MAX_OUTPUT_BYTES:
                truncated = True
                if last_full == 0:  # the first requested line alone exceeds the cap: show its head
                    cur_line.append(piece[: READ_MAX_OUTPUT_BYTES - size])
                    collected.extend(cur_line)
                    overlong_first = True
                break
            cur_line.append(piece)
            size += len(piece)
            if at_line_start:
                collected.extend(cur_line)
                cur_line = []
                last_full = lineno
        if cur_line and not truncated:  # final line without a newline
            collected.extend(cur_line)
            last_full = lineno
        # Count the remaining lines cheaply.
        total = lineno if at_line_start else lineno - 1
        while True:
            chunk = f.read(MB)
            if not chunk:
                break
            total += chunk.count(b"\n")
            last_byte = chunk[-1:]
        if last_byte and last_byte != b"\n":
            total += 1
        if total == 0:
            return ToolResult(for_llm=f"[{rel}: empty file (0 lines)]")
        if start > total:
            raise ToolError(f"start_line {start} is past the end of {rel} ({total} lines)")
        data = b"".join(collected)
        if b"\x00" in data:
            raise ToolError(f"not valid UTF-8 text (binary file?): {rel}")
        try:
            text = data.decode("utf-8", errors="ignore" if overlong_first else "strict")
        except UnicodeDecodeError:
            raise ToolError(f"not valid UTF-8 text (binary file?): {rel}") from None
        if overlong_first:
            header = (f"[{rel} line {start} of {total}: the line is longer than {_size(READ_MAX_OUTPUT_BYTES)}; "
                      f"showing only its beginning]")
        elif truncated:
            header = (f"[{rel} lines {start}-{last_full} of {total}; output truncated at "
                      f"{_size(READ_MAX_OUTPUT_BYTES)}, continue with start_line={last_full + 1}]")
        else:
            header = f"[{rel} lines {start}-{last_full} of {total}]"
        return ToolResult(for_llm=f"{header}\n{text}")


# --------------------------------------------------------------------------------------------
# write_file
# --------------------------------------------------------------------------------------------
class WriteFileTool(Tool):
    name = "write_file"
    description = (
        "Create or overwrite a UTF-8 text file in the agent's workspace (`path` relative to the "
        "workspace; missing parent directories are created). The whole `content` replaces the file "
        "atomically (readers never see a half-written file), unless `append` is true, in which case "
        "`content` is added to the end of the file (creating it if needed). Content is limited to "
        "5 MB. Writing through symlinks, to directories, special files, hard-linked files or "
        "protected paths is refused. Returns the number of bytes written. To change part of an "
        "existing file, prefer the `edit` tool."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "maxLength": 4096,
                     "description": "File path relative to the workspace."},
            "content": {"type": "string", "maxLength": WRITE_MAX_BYTES,
                        "description": "The full text to write (or to append)."},
            "append": {"type": "boolean", "default": False,
                       "description": "Append to the file instead of replacing it."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }
    group = "fs"
    read_only = False
    held_for_review = True
    timeout_seconds = 30.0

    def summarize(self, args, root=None):
        path = args.get("path")
        if not isinstance(path, str):
            return super().summarize(args, root)
        return (f"{'append to' if args.get('append') else 'write'} {path}: {len(args.get('content') or '')} characters",
                {"path": path})

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        ws = workspace_required(ctx)
        path = _str_arg(args, "path", required=True)
        if "content" not in args or args["content"] is None:
            raise ToolError("missing required argument: content")
        content = _str_arg(args, "content", required=True)
        append = _bool_arg(args, "append", False)
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolError("content is not valid UTF-8 text (lone surrogate characters)") from None
        if len(data) > WRITE_MAX_BYTES:
            raise ToolError(f"content is too large ({_size(len(data))}; limit {_size(WRITE_MAX_BYTES)})")
        routed = ws.router_for(path)
        rel = _display(routed[1]) if routed is not None else _display(ws.rel_of(path, for_write=True))
        if append:
            if routed is not None:
                router, routed_rel = routed
                try:
                    before = router.read(ws, routed_rel)
                except FileNotFoundError:
                    before = ""
                router.write(ws, routed_rel, before + content)
            else:
                fd = ws.open_for_write(path, append=True)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                except OSError as exc:
                    raise ToolError(f"could not write {rel}: {os.strerror(exc.errno) if exc.errno else 'I/O error'}") from None
                finally:
                    os.close(fd)
            return ToolResult(for_llm=f"appended {len(data)} bytes to {rel}")
        if routed is not None:
            created = routed[0].write(ws, routed[1], content)
        else:
            created = ws.atomic_write(path, data)
        return ToolResult(for_llm=f"wrote {len(data)} bytes to {rel} ({'created' if created else 'replaced'})")


# --------------------------------------------------------------------------------------------
# edit
# --------------------------------------------------------------------------------------------
def _squash_ws(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()


class EditTool(Tool):
    name = "edit"
    aliases = ("edit_file",)
    description = (
        "Replace an exact piece of text in an existing UTF-8 file in the workspace. `old_string` "
        "must match the file's text exactly, including whitespace, indentation and line breaks; by "
        "default it must occur exactly once (include enough surrounding lines to make it unique), or "
        "set `replace_all` to true to replace every occurrence. `new_string` is the replacement (it "
        "may be empty to delete text) and must differ from `old_string`. The file is rewritten "
        "atomically. Returns the number of replacements; if the text is not found the error says "
        "whether a match that ignores whitespace differences exists. Read the file first."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "maxLength": 4096,
                     "description": "File path relative to the workspace."},
            "old_string": {"type": "string", "minLength": 1, "maxLength": WRITE_MAX_BYTES,
                           "description": "Exact text to find."},
            "new_string": {"type": "string", "maxLength": WRITE_MAX_BYTES,
                           "description": "Replacement text."},
            "replace_all": {"type": "boolean", "default": False,
                            "description": "Replace every occurrence instead of requiring exactly one."},
        },
        "required": ["path", "old_string", "new_string"],
        "additionalProperties": False,
    }
    group = "fs"
    read_only = False
    held_for_review = True
    timeout_seconds = 30.0

    def summarize(self, args, root=None):
        path = args.get("path")
        if not isinstance(path, str):
            return super().summarize(args, root)
        every = " (every occurrence)" if args.get("replace_all") else ""
        return (f"edit {path}: replace {len(args.get('old_string') or '')} characters with "
                f"{len(args.get('new_string') or '')}{every}", {"path": path})

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        ws = workspace_required(ctx)
        path = _str_arg(args, "path", required=True)
        old = _str_arg(args, "old_string", required=True)
        if "new_string" not in args or args["new_string"] is None:
            raise ToolError("missing required argument: new_string")
        new = _str_arg(args, "new_string", required=True)
        replace_all = _bool_arg(args, "replace_all", False)
        if old == "":
            raise ToolError("old_string must not be empty")
        if old == new:
            raise ToolError("old_string and new_string are identical; nothing to change")
        routed = ws.router_for(path)
        if routed is not None:
            rel = _display(routed[1])
            data = _routed_bytes(ws, *routed)
            if len(data) > EDIT_MAX_FILE_BYTES:
                raise self._too_large(len(data), rel)
            new_text, out, n = self._edited(data, old, new, replace_all, rel)
            routed[0].write(ws, routed[1], new_text)
        else:
            rel = _display(ws.rel_of(path, for_write=True))
            fd = ws.open_for_read(path)
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                if st.st_size > EDIT_MAX_FILE_BYTES:
                    raise self._too_large(st.st_size, rel)
                try:
                    data = f.read(EDIT_MAX_FILE_BYTES + 1)
                except OSError:
                    raise ToolError(f"could not read {rel}: I/O error") from None
            new_text, out, n = self._edited(data, old, new, replace_all, rel)
            ws.atomic_write(path, out, create_parents=False, expect=st)
        return ToolResult(for_llm=f"replaced {n} occurrence{'s' if n != 1 else ''} in {rel}")

    @staticmethod
    def _too_large(size: int, rel: str) -> ToolError:
        return ToolError(f"file is too large to edit ({_size(size)}; limit {_size(EDIT_MAX_FILE_BYTES)}): {rel}")

    @staticmethod
    def _edited(data: bytes, old: str, new: str, replace_all: bool, rel: str) -> tuple[str, bytes, int]:
        """(new text, its UTF-8, replacements) for a disk file's or a routed file's bytes; ToolError if the edit
        cannot be made."""
        if len(data) > EDIT_MAX_FILE_BYTES:
            raise ToolError(f"file is too large to edit: {rel}")
        if b"\x00" in data:
            raise ToolError(f"not valid UTF-8 text (binary file?): {rel}")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"not valid UTF-8 text (binary file?): {rel}") from None
        count = text.count(old)
        if count == 0:
            hint = ""
            if "\r\n" in text and "\n" in old and "\r\n" not in old and old.replace("\n", "\r\n") in text:
                hint = " The file uses CRLF (\\r\\n) line endings; include them in old_string."
            else:
                sq = _squash_ws(old)
                if sq and sq in _squash_ws(text):
                    hint = (" A match ignoring whitespace differences exists: check indentation, "
                            "spaces vs tabs and line breaks, and copy the text exactly.")
                else:
                    hint = " No similar text (ignoring whitespace) exists either; read the file again."
            raise ToolError(f"old_string not found in {rel}.{hint}")
        if count > 1 and not replace_all:
            raise ToolError(
                f"old_string occurs {count} times in {rel}; add surrounding context to make it unique, "
                "or set replace_all to true to replace every occurrence."
            )
        new_text = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        try:
            out = new_text.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolError("new_string is not valid UTF-8 text (lone surrogate characters)") from None
        if len(out) > EDIT_MAX_FILE_BYTES:
            raise ToolError(f"the edited file would be too large ({_size(len(out))}; limit {_size(EDIT_MAX_FILE_BYTES)})")
        return new_text, out, count if replace_all else 1


# --------------------------------------------------------------------------------------------
# list_files
# --------------------------------------------------------------------------------------------
class ListFilesTool(Tool):
    name = "list_files"
    description = (
        "List the contents of a directory in the agent's workspace (default: the workspace root). "
        "One entry per line, as a workspace-relative path: directories end with `/`, files show "
        "their size, symlinks are shown as `name -> (symlink)` and are never followed. With "
        "`recursive` true, subdirectories are listed too (depth-first, sorted by name). At most "
        "`max_entries` entries are returned (default 500, max 5000); the output says when it was "
        "truncated. Protected paths are not shown."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "maxLength": 4096, "default": ".",
                     "description": "Directory relative to the workspace. Default '.'."},
            "recursive": {"type": "boolean", "default": False,
                          "description": "Also list subdirectories."},
            "max_entries": {"type": "integer", "minimum": 1, "maximum": LIST_MAX_ENTRIES,
                            "default": LIST_DEFAULT_ENTRIES,
                            "description": "Maximum number of entries to return."},
        },
        "required": [],
        "additionalProperties": False,
    }
    group = "fs"
    read_only = True
    timeout_seconds = 30.0

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        ws = workspace_required(ctx)
        path = _str_arg(args, "path", ".") or "."
        recursive = _bool_arg(args, "recursive", False)
        max_entries = _int_arg(args, "max_entries", LIST_DEFAULT_ENTRIES, 1, LIST_MAX_ENTRIES)
        real = ws.resolve(path)
        rel = ws.relative(real)
        if rel == ".":
            ws.ensure()
        routed = _routed_tree(ws, rel)
        if not recursive:
            routed = {r: v for r, v in routed.items() if "/" not in (r if rel == "." else r[len(rel) + 1:])}
        listed: dict[str, str] = {}
        truncated = False
        state = WalkState()
        if not routed or os.path.lexists(real):  # a directory only routers hold has nothing on disk to walk
            dfd = ws.open_dir(path)
            try:
                with closing(walk_tree(dfd, rel, denied=ws.denied, recursive=recursive,
                                        max_depth=WALK_MAX_DEPTH, state=state)) as walk:
                    for e in walk:
                        if len(listed) >= max_entries:
                            truncated = True
                            break
                        shown = _display(e.rel)
                        if e.kind == "dir":
                            listed[e.rel] = shown + "/"
                        elif e.kind == "symlink":
                            listed[e.rel] = f"{shown} -> (symlink)"
                        elif e.kind == "file":
                            listed[e.rel] = f"{shown} ({_size(e.size)})"
                        else:
                            listed[e.rel] = f"{shown} (special file)"
            finally:
                os.close(dfd)
        if routed:
            truncated = self._merge_routed(ws, listed, routed, max_entries, truncated)
        lines = list(listed.values())
        shown_rel = _display(rel)
        if not lines:
            return ToolResult(for_llm=f"[{shown_rel}/: empty directory]" if rel != "." else "[workspace root: empty directory]")
        header = f"[{'workspace root' if rel == '.' else shown_rel + '/'}: {len(lines)} entries{' (recursive)' if recursive else ''}]"
        body = "\n".join(lines)
        notes = []
        if truncated or state.capped:
            notes.append(f"... truncated at {len(lines)} entries; list a subdirectory or raise max_entries (max {LIST_MAX_ENTRIES}).")
        if state.depth_limited:
            notes.append(f"(directories deeper than {WALK_MAX_DEPTH} levels were not expanded)")
        if state.errors:
            notes.append(f"({state.errors} entries could not be read and were skipped)")
        return ToolResult(for_llm="\n".join([header, body, *notes]))

    @staticmethod
    def _merge_routed(ws: Workspace, listed: dict[str, str], routed: dict[str, WorkspaceRouter | None],
                      max_entries: int, truncated: bool) -> bool:
        """Put the routed entries into the disk listing `listed` (in walk order; a routed file replaces a disk
        entry of the same path) and cut it at `max_entries`; return whether the listing is truncated. When the
        disk walk was cut, routed entries past its last entry stay out (the disk entries before them are missing)."""
        last = _order(next(reversed(listed))) if truncated and listed else None
        merged: dict[str, str | WorkspaceRouter] = dict(listed)
        for rel, router in routed.items():
            if last is not None and _order(rel) > last:
                continue
            if router is not None:
                merged[rel] = router
            else:
                merged.setdefault(rel, _display(rel) + "/")
        order = sorted(merged, key=_order)
        if len(order) > max_entries:
            order, truncated = order[:max_entries], True
        listed.clear()
        for rel in order:
            entry = merged[rel]
            if isinstance(entry, WorkspaceRouter):
                try:
                    entry = f"{_display(rel)} ({_size(len(_routed_bytes(ws, entry, rel)))})"
                except ToolError:  # gone since the router listed it
                    continue
            listed[rel] = entry
        return truncated


# --------------------------------------------------------------------------------------------
# search
# --------------------------------------------------------------------------------------------
def _nested_unbounded_repeat(pattern: str, flags: int) -> bool:
    """Heuristic guard against catastrophic backtracking: a variable-count repeat nested inside
    another variable-count repeat, e.g. (a+)+, (\\w*\\s*)*, (a{1,50}){1,50}. Possessive repeats and
    atomic groups do not backtrack and are allowed. (Alternation-based blow-ups such as (a|a)+
    are not detected; long lines are skipped and the scan has a time budget.)"""
    try:
        from re import _constants as C, _parser as P  # Python 3.11+
    except ImportError:  # pragma: no cover
        return False
    try:
        parsed = P.parse(pattern, flags)
    except Exception:
        return False
    repeats = {C.MAX_REPEAT, C.MIN_REPEAT}
    possessive = getattr(C, "POSSESSIVE_REPEAT", None)
    atomic = getattr(C, "ATOMIC_GROUP", None)

    def variable(lo: int, hi: int) -> bool:
        return hi == C.MAXREPEAT or (hi > 1 and hi != lo)

    def walk(items, inside: bool) -> bool:
        for op, av in items:
            if op in repeats:
                lo, hi, sub = av
                if inside and variable(lo, hi):
                    return True
                if walk(sub, inside or variable(lo, hi) or hi > 1):
                    return True
            elif op == possessive or op == atomic:
                continue
            elif op == C.SUBPATTERN:
                if walk(av[-1], inside):
                    return True
            elif op == C.BRANCH:
                if any(walk(alt, inside) for alt in av[1]):
                    return True
            elif op in (C.ASSERT, C.ASSERT_NOT):
                if walk(av[1], inside):
                    return True
            elif op == C.GROUPREF_EXISTS:
                if any(alt is not None and walk(alt, inside) for alt in av[1:]):
                    return True
        return False

    return walk(parsed, False)


class SearchTool(Tool):
    name = "search"
    description = (
        "Search file contents in the agent's workspace with a Python regular expression (`re` "
        "syntax). Searches `path` (a directory, recursively, or a single file; default the whole "
        "workspace), optionally only files whose name matches `glob` (e.g. `*.py`; a glob containing "
        "`/` is matched against the workspace-relative path and supports `**`). Returns one line per "
        "match as `relative/path:LINE: text`, sorted by path and line, at most `max_results` "
        "(default 200, max 2000). Binary files, files over 2 MB, symlinks and protected paths are "
        "skipped, lines longer than 10,000 characters are not searched, and the scan stops after "
        "50 MB or 20,000 files; the output notes anything skipped. Patterns with nested unbounded "
        "quantifiers such as `(a+)+` are refused because they can take exponential time."
    )
    parameters = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "maxLength": SEARCH_MAX_PATTERN,
                        "description": "Python regular expression to search for."},
            "path": {"type": "string", "minLength": 1, "maxLength": 4096, "default": ".",
                     "description": "Directory or file to search, relative to the workspace."},
            "glob": {"type": "string", "minLength": 1, "maxLength": GLOB_MAX_PATTERN,
                     "description": "Only search files matching this glob, e.g. '*.py' or 'src/**/*.ts'."},
            "ignore_case": {"type": "boolean", "default": False,
                            "description": "Case-insensitive matching."},
            "max_results": {"type": "integer", "minimum": 1, "maximum": SEARCH_MAX_RESULTS,
                            "default": SEARCH_DEFAULT_RESULTS,
                            "description": "Maximum number of matching lines to return."},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    group = "fs"
    read_only = True
    timeout_seconds = 30.0

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        ws = workspace_required(ctx)
        pattern = _str_arg(args, "pattern", required=True)
        path = _str_arg(args, "path", ".") or "."
        glob = args.get("glob")
        if glob is not None and not isinstance(glob, str):
            raise ToolError("argument glob must be a string")
        ignore_case = _bool_arg(args, "ignore_case", False)
        max_results = _int_arg(args, "max_results", SEARCH_DEFAULT_RESULTS, 1, SEARCH_MAX_RESULTS)
        if not pattern:
            raise ToolError("pattern must not be empty")
        if len(pattern) > SEARCH_MAX_PATTERN:
            raise ToolError(f"pattern is too long (limit {SEARCH_MAX_PATTERN} characters)")
        flags = re.IGNORECASE if ignore_case else 0
        try:
            rx = re.compile(pattern, flags)
        except re.error as exc:
            where = f" at position {exc.pos}" if exc.pos is not None else ""
            raise ToolError(f"invalid regular expression: {exc.msg}{where}") from None
        except (OverflowError, RecursionError, ValueError) as exc:
            raise ToolError(f"invalid regular expression: {type(exc).__name__}") from None
        if _nested_unbounded_repeat(pattern, flags):
            raise ToolError(
                "pattern has nested unbounded quantifiers (like (a+)+ or (\\w*\\s*)*) that can take "
                "exponential time; rewrite it, e.g. make the outer repeat possessive ((?:a+)++) or use an atomic "
                "group ((?>...)), or avoid repeating a group that itself contains + or *"
            )
        name_glob = path_glob = None
        if glob:
            _check_glob(glob)
            if "/" in glob:
                path_glob = _Glob(glob)
            else:
                name_glob = _Glob(glob)

        routed_file = ws.router_for(path)
        routed: dict[str, WorkspaceRouter] = {}
        if routed_file is not None:
            rel = routed_file[1]
        else:
            real = ws.resolve(path)
            rel = ws.relative(real)
            if rel == ".":
                ws.ensure()
            routed = ws.routed_files(rel)

        results: list[str] = []
        stats = {"files": 0, "bytes": 0, "big": 0, "binary": 0, "long_lines": 0, "unreadable": 0}
        stop_reason = ""
        deadline = time.monotonic() + SEARCH_TIME_BUDGET
        state = WalkState()

        def scan(data: bytes, entry_rel: str) -> str:
            """Scan one file's bytes; return a stop reason or ''."""
            if len(data) > SEARCH_MAX_FILE_BYTES:
                stats["big"] += 1
                return ""
            if b"\x00" in data:
                stats["binary"] += 1
                return ""
            stats["files"] += 1
            stats["bytes"] += len(data)
            text = data.decode("utf-8", errors="replace")
            shown = _display(entry_rel)
            for i, line in enumerate(text.split("\n"), 1):
                if len(line) > SEARCH_MAX_LINE_CHARS:
                    stats["long_lines"] += 1
                    continue
                if rx.search(line):
                    line = line.rstrip("\r")
                    if len(line) > SEARCH_SHOW_LINE_CHARS:
                        line = line[:SEARCH_SHOW_LINE_CHARS] + "…"
                    results.append(f"{shown}:{i}: {line}")
                    if len(results) >= max_results:
                        return "max_results"
                if i % 2000 == 0 and time.monotonic() > deadline:
                    return "time"
            return ""

        def wanted(entry_rel: str) -> bool:
            if name_glob is not None and not name_glob.match(entry_rel.rsplit("/", 1)[-1]):
                return False
            return path_glob is None or path_glob.match(entry_rel)

        def budget(size: int) -> str:
            """Why the scan stops before a file of `size` bytes, or ''."""
            if stats["files"] >= SEARCH_MAX_FILES:
                return "files"
            if stats["bytes"] + size > SEARCH_MAX_TOTAL_BYTES:
                return "bytes"
            if time.monotonic() > deadline:
                return "time"
            return ""

        pending = [(r, router) for r, router in routed.items() if wanted(r)]

        def scan_routed(before: list[str] | None) -> str:
            """Scan the routed files that sort before `before` (all of them for None), in walk order."""
            while pending and (before is None or _order(pending[0][0]) < before):
                entry_rel, router = pending.pop(0)
                try:
                    data = _routed_bytes(ws, router, entry_rel)
                except ToolError:
                    stats["unreadable"] += 1
                    continue
                if len(data) > SEARCH_MAX_FILE_BYTES:
                    stats["big"] += 1
                    continue
                reason = budget(len(data)) or scan(data, entry_rel)
                if reason:
                    return reason
            return ""

        def too_big(size: int) -> ToolError:
            return ToolError(f"file is too large to search ({_size(size)}; limit "
                             f"{_size(SEARCH_MAX_FILE_BYTES)}); use read_file with a line range")

        if routed_file is not None:
            data = _routed_bytes(ws, *routed_file)
            if len(data) > SEARCH_MAX_FILE_BYTES:
                raise too_big(len(data))
            stop_reason = scan(data, rel)
            if stats["binary"]:
                raise ToolError(f"not valid UTF-8 text (binary file?): {_display(rel)}")
        else:
            try:
                st = os.lstat(real)
            except OSError:
                if not routed:
                    raise ToolError(f"not found: {_display(rel)}") from None
                st = None  # a directory only routers hold
            if st is None or stat.S_ISDIR(st.st_mode):
                if st is not None:
                    dfd = ws.open_dir(path)
                    try:
                        with closing(walk_tree(dfd, rel, denied=ws.denied, recursive=True,
                                                max_depth=WALK_MAX_DEPTH, state=state)) as walk:
                            for e in walk:
                                if e.kind != "file" or not wanted(e.rel):
                                    continue
                                stop_reason = scan_routed(_order(e.rel))
                                if stop_reason:
                                    break
                                if e.rel in routed:  # the routed file of the same path hides this one
                                    continue
                                if e.nlink > 1:
                                    stats["unreadable"] += 1
                                    continue
                                if e.size > SEARCH_MAX_FILE_BYTES:
                                    stats["big"] += 1
                                    continue
                                stop_reason = budget(e.size)
                                if stop_reason:
                                    break
                                try:
                                    fd = open_entry(e)
                                except (OSError, PathError):
                                    stats["unreadable"] += 1
                                    continue
                                try:
                                    with os.fdopen(fd, "rb") as f:
                                        data = f.read(SEARCH_MAX_FILE_BYTES + 1)
                                    stop_reason = scan(data, e.rel)
                                except OSError:
                                    stats["unreadable"] += 1
                                    stop_reason = ""
                                if stop_reason:
                                    break
                    finally:
                        os.close(dfd)
                if not stop_reason:
                    stop_reason = scan_routed(None)
            else:
                fd = ws.open_for_read(path)
                with os.fdopen(fd, "rb") as f:
                    if os.fstat(f.fileno()).st_size > SEARCH_MAX_FILE_BYTES:
                        raise too_big(st.st_size)
                    try:
                        data = f.read(SEARCH_MAX_FILE_BYTES + 1)
                    except OSError:
                        raise ToolError(f"could not read {_display(rel)}") from None
                stop_reason = scan(data, rel)
                if stats["binary"]:
                    raise ToolError(f"not valid UTF-8 text (binary file?): {_display(rel)}")

        notes: list[str] = []
        if stop_reason == "max_results":
            notes.append(f"(stopped at max_results={max_results}; narrow the pattern, path or glob for more)")
        elif stop_reason == "files":
            notes.append(f"(stopped after scanning {SEARCH_MAX_FILES} files; narrow the path or glob)")
        elif stop_reason == "bytes":
            notes.append(f"(stopped after scanning {_size(SEARCH_MAX_TOTAL_BYTES)}; narrow the path or glob)")
        elif stop_reason == "time":
            notes.append(f"(stopped after {int(SEARCH_TIME_BUDGET)}s; narrow the path or glob)")
        if state.capped:
            notes.append("(directory walk limit reached; some files were not scanned)")
        skipped = []
        if stats["big"]:
            skipped.append(f"{stats['big']} files over {_size(SEARCH_MAX_FILE_BYTES)}")
        if stats["binary"]:
            skipped.append(f"{stats['binary']} binary files")
        if stats["unreadable"]:
            skipped.append(f"{stats['unreadable']} unreadable or hard-linked files")
        if stats["long_lines"]:
            skipped.append(f"{stats['long_lines']} lines longer than {SEARCH_MAX_LINE_CHARS} characters")
        if skipped:
            notes.append("(skipped: " + ", ".join(skipped) + ")")
        if not results:
            msg = f"no matches for /{pattern}/ in {_display(rel)} ({stats['files']} files scanned)"
            return ToolResult(for_llm="\n".join([msg, *notes]))
        header = f"[{len(results)} matches; {stats['files']} files scanned]"
        return ToolResult(for_llm="\n".join([header, *results, *notes]))


# --------------------------------------------------------------------------------------------
# glob
# --------------------------------------------------------------------------------------------
def _check_glob(pattern: str) -> None:
    if not pattern:
        raise ToolError("glob pattern must not be empty")
    if len(pattern) > GLOB_MAX_PATTERN:
        raise ToolError(f"glob pattern is too long (limit {GLOB_MAX_PATTERN} characters)")
    if "\x00" in pattern or any(unicodedata.category(c) == "Cc" for c in pattern):
        raise ToolError("glob pattern contains a control character")
    if pattern.startswith("/") or pattern.startswith("~"):
        raise ToolError("glob pattern must be relative to the workspace (no absolute paths)")
    if any(seg == ".." for seg in pattern.split("/")):
        raise ToolError("glob pattern must not contain '..'")


class GlobTool(Tool):
    name = "glob"
    description = (
        "Find files and directories in the agent's workspace whose paths match a glob pattern, "
        "relative to `path` (default the workspace root). `*` matches within one path segment, `?` "
        "one character, `[abc]` a character set, and `**` any number of directories (e.g. "
        "`**/*.py`, `src/**/test_*.py`, `*.md`). Returns sorted workspace-relative paths, one per "
        "line, directories ending with `/`, at most 1000. Symlinks are listed but never followed; "
        "protected paths are never shown; absolute patterns and `..` are refused."
    )
    parameters = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "maxLength": GLOB_MAX_PATTERN,
                        "description": "Glob pattern, e.g. '**/*.py'."},
            "path": {"type": "string", "minLength": 1, "maxLength": 4096, "default": ".",
                     "description": "Directory to search from, relative to the workspace."},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    group = "fs"
    read_only = True
    timeout_seconds = 30.0

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        ws = workspace_required(ctx)
        pattern = _str_arg(args, "pattern", required=True)
        path = _str_arg(args, "path", ".") or "."
        _check_glob(pattern)
        pattern = "/".join(seg for seg in pattern.split("/") if seg not in ("", "."))
        if not pattern:
            raise ToolError("glob pattern must name something (e.g. '*' or '**/*.py')")

        segs = pattern.split("/")
        prefix: list[str] = []
        while len(segs) > 1 and not _has_magic(segs[0]):
            prefix.append(segs.pop(0))
        rest = "/".join(segs)
        base_path = path if not prefix else path.rstrip("/") + "/" + "/".join(prefix)
        if len(base_path.encode("utf-8", "surrogatepass")) > 4096:
            raise ToolError("path plus pattern is too long")

        real_root = ws.resolve(path)  # validates `path` itself
        root_rel = ws.relative(real_root)
        if root_rel == ".":
            ws.ensure()
        routed = _routed_tree(ws, root_rel)
        if not os.path.isdir(real_root) and (os.path.lexists(real_root) or not routed):
            what = "not a directory" if os.path.lexists(real_root) else "directory not found"
            raise ToolError(f"{what}: {_display(root_rel)}")
        state = WalkState()
        found = self._disk_matches(ws, base_path, rest, state) if os.path.isdir(real_root) else {}
        if routed:
            whole = _Glob(pattern)
            for rel, router in routed.items():
                if whole.match(rel if root_rel == "." else rel[len(root_rel) + 1:]):
                    if router is not None:  # a routed file hides a disk entry of the same path
                        found[rel] = _display(rel)
                    else:
                        found.setdefault(rel, _display(rel) + "/")
        matches = sorted(found.values())
        total = len(matches)
        if not matches:
            return ToolResult(for_llm=f"no paths match {pattern!r}")
        out = matches[:GLOB_MAX_RESULTS]
        notes = []
        if total > GLOB_MAX_RESULTS:
            notes.append(f"... truncated: showing {GLOB_MAX_RESULTS} of {total} matches; use a narrower pattern")
        if state.capped:
            notes.append("(directory walk limit reached; results may be incomplete)")
        return ToolResult(for_llm="\n".join([*out, *notes]))

    @staticmethod
    def _disk_matches(ws: Workspace, base_path: str, rest: str, state: WalkState) -> dict[str, str]:
        """Disk paths below `base_path` (the search root plus the pattern's literal prefix) matching `rest`:
        workspace-relative path → how it is shown."""
        try:
            real = ws.resolve(base_path)
        except PathError:
            return {}  # the literal prefix is missing, denied or leads outside: nothing visible
        if not os.path.isdir(real):
            return {}
        base_rel = ws.relative(real)

        matcher = _Glob(rest)
        recursive = "**" in rest.split("/") or len(rest.split("/")) > 1
        max_depth = WALK_MAX_DEPTH if "**" in rest.split("/") else len(rest.split("/"))
        found: dict[str, str] = {}
        dfd = ws.open_dir(base_path)
        try:
            with closing(walk_tree(dfd, base_rel, denied=ws.denied, recursive=recursive,
                                    max_depth=max_depth, state=state)) as walk:
                for e in walk:
                    sub = e.rel if base_rel == "." else e.rel[len(base_rel) + 1:]
                    if matcher.match(sub):
                        found[e.rel] = _display(e.rel) + ("/" if e.kind == "dir" else "")
        finally:
            os.close(dfd)
        return found


# --------------------------------------------------------------------------------------------
# workspace_dir
# --------------------------------------------------------------------------------------------
class WorkspaceDirTool(Tool):
    name = "workspace_dir"
    description = (
        "Return the absolute path of the agent's workspace directory: the directory that all "
        "relative paths given to the file tools (read_file, write_file, edit, list_files, search, "
        "glob) are resolved against. File tools cannot reach outside it."
    )
    parameters = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    group = "fs"
    read_only = True
    timeout_seconds = 10.0

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        return ToolResult(for_llm=workspace_required(ctx).real_root())


TOOLS = [ReadFileTool(), WriteFileTool(), EditTool(), ListFilesTool(), SearchTool(), GlobTool(), WorkspaceDirTool()]
