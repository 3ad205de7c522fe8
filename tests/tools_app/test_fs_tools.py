"""Tests for the filesystem tools (tools_app/builtin/fs.py). Pure: no Django settings, no DB."""
from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import jsonschema
import pytest

from tools_app import paths
from tools_app.base import ToolContext, ToolError, ToolResult
from tools_app.builtin import fs
from tools_app.registry import ToolRegistry
from tools_app.workspace import Workspace

SECRET = "TOP-SECRET-OUTSIDE"
TOOLS = {t.name: t for t in fs.TOOLS}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return tmp_path / "ws"  # not created: tools create it (0o700) on first write/list


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    o = tmp_path / "outside"
    o.mkdir()
    (o / "secret.txt").write_text(SECRET)
    return o


@pytest.fixture
def ctx(ws: Path) -> ToolContext:
    return ToolContext(agent_key="agent", workspace=Workspace(root=ws))


def run(ctx: ToolContext, name: str, **args) -> str:
    tool = TOOLS.get(name) or next(t for t in fs.TOOLS if name in t.aliases)
    jsonschema.Draft202012Validator(tool.parameters).validate(args)
    result = tool.run(ctx, args)
    assert isinstance(result, ToolResult)
    assert not result.is_error, result.for_llm
    return result.for_llm


def fails(ctx: ToolContext, name: str, leak: Path | None = None, **args) -> str:
    tool = TOOLS[name]
    with pytest.raises(ToolError) as info:
        tool.run(ctx, args)
    msg = str(info.value)
    if leak is not None:
        assert str(leak) not in msg
    return msg


def make(ws: Path, rel: str, content: str | bytes = "x\n") -> Path:
    p = ws / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content)
    return p


# --- contract -------------------------------------------------------------------------------
def test_tools_list_and_contract():
    assert [t.name for t in fs.TOOLS] == [
        "read_file", "write_file", "edit", "list_files", "search", "glob", "workspace_dir"]
    for tool in fs.TOOLS:
        assert tool.group == "fs"
        assert len(tool.description) > 80
        schema = tool.parameters
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        assert set(schema.get("required", [])) <= set(schema["properties"])
        assert 5 <= tool.timeout_seconds <= 60
    ro = {t.name: t.read_only for t in fs.TOOLS}
    assert ro == {"read_file": True, "write_file": False, "edit": False, "list_files": True,
                  "search": True, "glob": True, "workspace_dir": True}
    assert TOOLS["edit"].aliases == ("edit_file",)


def test_registry_accepts_tools_and_alias():
    reg = ToolRegistry()
    for tool in fs.TOOLS:
        reg.register(tool)
    assert reg.get("edit_file") is TOOLS["edit"]
    assert reg.groups()["fs"] == set(TOOLS)


def test_module_does_not_touch_django_settings():
    src = Path(fs.__file__).read_text() + Path(paths.__file__).read_text()
    assert "django" not in src


def test_schema_rejects_extra_args_and_bad_bounds():
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"path": "a", "bogus": 1}, TOOLS["read_file"].parameters)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"max_entries": 5001}, TOOLS["list_files"].parameters)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"pattern": "x", "max_results": 0}, TOOLS["search"].parameters)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"path": "a", "start_line": 0}, TOOLS["read_file"].parameters)


def test_no_workspace_is_an_error():
    ctx = ToolContext(agent_key="a")
    for name in TOOLS:
        args = {"read_file": {"path": "a"}, "write_file": {"path": "a", "content": ""},
                "edit": {"path": "a", "old_string": "a", "new_string": "b"}, "search": {"pattern": "a"},
                "glob": {"pattern": "*"}}.get(name, {})
        with pytest.raises(ToolError, match="no workspace"):
            TOOLS[name].run(ctx, args)


# --- workspace creation / workspace_dir -----------------------------------------------------
def test_list_creates_workspace_0700(ctx, ws):
    out = run(ctx, "list_files")
    assert "empty" in out
    assert stat.S_IMODE(os.stat(ws).st_mode) == 0o700


def test_write_creates_workspace_0700(ctx, ws):
    run(ctx, "write_file", path="a.txt", content="hi")
    assert stat.S_IMODE(os.stat(ws).st_mode) == 0o700


def test_workspace_dir(ctx, ws, tmp_path):
    ws.mkdir()
    assert run(ctx, "workspace_dir") == str(ws.resolve())
    link = tmp_path / "link"
    os.symlink(ws, link)
    assert run(ctx.replace(workspace=Workspace(root=link)), "workspace_dir") == str(ws.resolve())


# --- read_file ------------------------------------------------------------------------------
def test_read_whole_file(ctx, ws):
    make(ws, "a/b.txt", "one\ntwo\nthree\n")
    out = run(ctx, "read_file", path="a/b.txt")
    assert out == "[a/b.txt lines 1-3 of 3]\none\ntwo\nthree\n"


def test_read_line_ranges(ctx, ws):
    make(ws, "f.txt", "".join(f"line{i}\n" for i in range(1, 11)))
    assert run(ctx, "read_file", path="f.txt", start_line=3, end_line=5) == "[f.txt lines 3-5 of 10]\nline3\nline4\nline5\n"
    assert run(ctx, "read_file", path="f.txt", start_line=9) == "[f.txt lines 9-10 of 10]\nline9\nline10\n"
    assert run(ctx, "read_file", path="f.txt", end_line=2) == "[f.txt lines 1-2 of 10]\nline1\nline2\n"
    assert run(ctx, "read_file", path="f.txt", start_line=8, end_line=100) == "[f.txt lines 8-10 of 10]\nline8\nline9\nline10\n"
    assert "past the end" in fails(ctx, "read_file", path="f.txt", start_line=11)
    assert "end_line" in fails(ctx, "read_file", path="f.txt", start_line=5, end_line=4)


def test_read_no_trailing_newline_and_empty(ctx, ws):
    make(ws, "n.txt", "a\nb")
    assert run(ctx, "read_file", path="n.txt") == "[n.txt lines 1-2 of 2]\na\nb"
    assert run(ctx, "read_file", path="n.txt", start_line=2) == "[n.txt lines 2-2 of 2]\nb"
    make(ws, "e.txt", "")
    assert "empty file" in run(ctx, "read_file", path="e.txt")


def test_read_errors_are_clear(ctx, ws):
    make(ws, "d/x.txt")
    assert "not found" in fails(ctx, "read_file", path="nope.txt")
    assert "is a directory" in fails(ctx, "read_file", path="d")
    make(ws, "bin.dat", b"\x89PNG\x00\x01\x02")
    assert "binary" in fails(ctx, "read_file", path="bin.dat")
    make(ws, "latin.txt", "café".encode("latin-1"))
    assert "not valid UTF-8" in fails(ctx, "read_file", path="latin.txt")


def test_read_large_file_needs_range(ctx, ws):
    line = b"y" * 99 + b"\n"
    n = (fs.READ_MAX_FILE_BYTES // len(line)) + 10
    make(ws, "big.txt", line * n)
    msg = fails(ctx, "read_file", path="big.txt")
    assert "too large" in msg and "start_line" in msg
    out = run(ctx, "read_file", path="big.txt", start_line=n - 1, end_line=n + 5)
    assert out.splitlines()[0] == f"[big.txt lines {n - 1}-{n} of {n}]"
    assert out.count("y" * 99) == 2


def test_read_output_cap_says_where_to_continue(ctx, ws):
    line = "z" * 1023 + "\n"
    make(ws, "wide.txt", line * 400)  # 400 KB > 256 KB cap
    out = run(ctx, "read_file", path="wide.txt")
    header = out.splitlines()[0]
    assert "truncated" in header and "start_line=257" in header
    assert header.startswith("[wide.txt lines 1-256 of 400")
    out2 = run(ctx, "read_file", path="wide.txt", start_line=257)
    assert out2.splitlines()[0] == "[wide.txt lines 257-400 of 400]"


def test_read_single_overlong_line(ctx, ws):
    make(ws, "one.txt", "q" * (fs.READ_MAX_OUTPUT_BYTES + 100))
    out = run(ctx, "read_file", path="one.txt")
    assert "longer than" in out.splitlines()[0]


def test_read_attacks(ctx, ws, outside):
    make(ws, "ok.txt")
    os.symlink(outside / "secret.txt", ws / "link")
    os.symlink(outside, ws / "dir")
    for p in ("../outside/secret.txt", "/etc/passwd", str(outside / "secret.txt"), "link", "dir/secret.txt",
              "ok.txt\x00", "a" * 5000):
        msg = fails(ctx, "read_file", leak=outside, path=p)
        assert SECRET not in msg


def test_read_fifo_does_not_hang(ctx, ws):
    ws.mkdir()
    os.mkfifo(ws / "pipe")
    box = {}

    def go():
        try:
            TOOLS["read_file"].run(ctx, {"path": "pipe"})
        except ToolError as exc:
            box["err"] = str(exc)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive()
    assert "FIFO" in box["err"]


def test_read_hardlink_refused(ctx, ws, outside):
    ws.mkdir()
    os.link(outside / "secret.txt", ws / "hl")
    assert "hard link" in fails(ctx, "read_file", path="hl")


# --- write_file -----------------------------------------------------------------------------
def test_write_and_overwrite(ctx, ws):
    out = run(ctx, "write_file", path="deep/er/f.txt", content="héllo\n")
    assert out == "wrote 7 bytes to deep/er/f.txt (created)"
    assert (ws / "deep/er/f.txt").read_text() == "héllo\n"
    out = run(ctx, "write_file", path="deep/er/f.txt", content="bye")
    assert "replaced" in out
    assert (ws / "deep/er/f.txt").read_text() == "bye"


def test_write_append(ctx, ws):
    run(ctx, "write_file", path="log.txt", content="a\n", append=True)
    run(ctx, "write_file", path="log.txt", content="b\n", append=True)
    assert (ws / "log.txt").read_text() == "a\nb\n"


def test_write_empty_content(ctx, ws):
    assert "wrote 0 bytes" in run(ctx, "write_file", path="empty", content="")
    assert (ws / "empty").read_bytes() == b""


def test_write_size_limit(ctx, ws, monkeypatch):
    monkeypatch.setattr(fs, "WRITE_MAX_BYTES", 10)
    assert "too large" in fails(ctx, "write_file", path="x", content="é" * 6)  # 12 bytes
    assert not (ws / "x").exists()


def test_write_is_atomic_on_failure(ctx, ws, monkeypatch):
    make(ws, "keep.txt", "original")

    def broken_replace(*a, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(paths.os, "replace", broken_replace)
    msg = fails(ctx, "write_file", path="keep.txt", content="new content")
    assert "space" in msg
    monkeypatch.undo()
    assert (ws / "keep.txt").read_text() == "original"
    assert sorted(os.listdir(ws)) == ["keep.txt"]  # no temp file left behind


def test_write_to_directory_refused(ctx, ws):
    (ws / "d").mkdir(parents=True)
    assert "is a directory" in fails(ctx, "write_file", path="d", content="x")


def test_write_attacks(ctx, ws, outside):
    ws.mkdir()
    os.symlink(outside / "secret.txt", ws / "link")
    os.symlink(outside, ws / "dir")
    os.symlink(outside / "planted.txt", ws / "dangle")
    os.link(outside / "secret.txt", ws / "hl")
    for p in ("../outside/secret.txt", "../outside/planted.txt", str(outside / "planted.txt"), "link",
              "dir/secret.txt", "dir/planted.txt", "dangle", "hl", "/etc/x", "a\nb"):
        for append in (False, True):
            fails(ctx, "write_file", leak=outside, path=p, content="pwned", append=append)
    assert (outside / "secret.txt").read_text() == SECRET
    assert sorted(os.listdir(outside)) == ["secret.txt"]


# --- edit -----------------------------------------------------------------------------------
def test_edit_unique(ctx, ws):
    make(ws, "c.py", "def f():\n    return 1\n")
    assert run(ctx, "edit", path="c.py", old_string="return 1", new_string="return 2") == "replaced 1 occurrence in c.py"
    assert (ws / "c.py").read_text() == "def f():\n    return 2\n"


def test_edit_alias_via_registry(ctx, ws):
    make(ws, "c.txt", "abc")
    reg = ToolRegistry()
    for t in fs.TOOLS:
        reg.register(t)
    res = reg.get("edit_file").run(ctx, {"path": "c.txt", "old_string": "b", "new_string": "B"})
    assert not res.is_error
    assert (ws / "c.txt").read_text() == "aBc"


def test_edit_not_found_with_whitespace_hint(ctx, ws):
    make(ws, "c.py", "def f():\n    return 1\n")
    msg = fails(ctx, "edit", path="c.py", old_string="def f():\n  return 1", new_string="x")
    assert "not found" in msg and "ignoring whitespace" in msg
    msg = fails(ctx, "edit", path="c.py", old_string="nothing like this", new_string="x")
    assert "not found" in msg and "No similar text" in msg


def test_edit_crlf_hint(ctx, ws):
    make(ws, "w.txt", b"a\r\nb\r\n")
    msg = fails(ctx, "edit", path="w.txt", old_string="a\nb", new_string="x")
    assert "CRLF" in msg


def test_edit_multiple_and_replace_all(ctx, ws):
    make(ws, "m.txt", "foo bar foo baz foo")
    msg = fails(ctx, "edit", path="m.txt", old_string="foo", new_string="qux")
    assert "3 times" in msg and "replace_all" in msg
    assert (ws / "m.txt").read_text() == "foo bar foo baz foo"
    assert run(ctx, "edit", path="m.txt", old_string="foo", new_string="qux", replace_all=True) == "replaced 3 occurrences in m.txt"
    assert (ws / "m.txt").read_text() == "qux bar qux baz qux"


def test_edit_identical_and_empty(ctx, ws):
    make(ws, "m.txt", "abc")
    assert "identical" in fails(ctx, "edit", path="m.txt", old_string="a", new_string="a")
    assert "empty" in fails(ctx, "edit", path="m.txt", old_string="", new_string="a")


def test_edit_delete_text_and_keep_mode(ctx, ws):
    p = make(ws, "m.sh", "echo hi # remove me\n")
    os.chmod(p, 0o755)
    run(ctx, "edit", path="m.sh", old_string=" # remove me", new_string="")
    assert p.read_text() == "echo hi\n"
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o755


def test_edit_errors(ctx, ws, outside):
    ws.mkdir()
    make(ws, "b.bin", b"ab\x00cd")
    assert "binary" in fails(ctx, "edit", path="b.bin", old_string="ab", new_string="x")
    assert "not found" in fails(ctx, "edit", path="missing.txt", old_string="a", new_string="b")
    os.symlink(outside / "secret.txt", ws / "link")
    fails(ctx, "edit", leak=outside, path="link", old_string="TOP", new_string="PWN")
    make(ws, "in.txt", "abc")
    os.symlink("in.txt", ws / "inlink")
    assert "symlink" in fails(ctx, "edit", path="inlink", old_string="a", new_string="b")
    assert (outside / "secret.txt").read_text() == SECRET


def test_edit_atomic_on_failure(ctx, ws, monkeypatch):
    make(ws, "k.txt", "keep me")
    monkeypatch.setattr(paths.os, "replace", lambda *a, **k: (_ for _ in ()).throw(OSError(5, "EIO")))
    fails(ctx, "edit", path="k.txt", old_string="keep", new_string="lose")
    monkeypatch.undo()
    assert (ws / "k.txt").read_text() == "keep me"
    assert os.listdir(ws) == ["k.txt"]


# --- list_files -----------------------------------------------------------------------------
def test_list_basic(ctx, ws, outside):
    make(ws, "b.txt", "12345")
    make(ws, "a/inner.txt")
    os.symlink(outside, ws / "out")
    make(ws, ".goclaw/secret", "tok")
    out = run(ctx, "list_files")
    lines = out.splitlines()
    assert lines[0].startswith("[workspace root: 3 entries")
    assert lines[1:] == ["a/", "b.txt (5 B)", "out -> (symlink)"]
    assert ".goclaw" not in out and str(outside) not in out


def test_list_recursive_never_follows_symlinks_and_hides_denied(ctx, ws, outside):
    make(ws, "src/pkg/mod.py")
    make(ws, ".goclaw/cfg/secret")
    os.symlink(outside, ws / "src" / "escape")
    out = run(ctx, "list_files", recursive=True)
    assert "src/pkg/mod.py" in out
    assert "src/escape -> (symlink)" in out
    assert "secret" not in out and ".goclaw" not in out
    sub = run(ctx, "list_files", path="src", recursive=True)
    assert sub.splitlines()[1:] == ["src/escape -> (symlink)", "src/pkg/", "src/pkg/mod.py (2 B)"]


def test_list_truncation(ctx, ws):
    for i in range(30):
        make(ws, f"f{i:02}.txt")
    out = run(ctx, "list_files", max_entries=10)
    lines = out.splitlines()
    assert len([l for l in lines if l.startswith("f")]) == 10
    assert "truncated" in lines[-1] and "max_entries" in lines[-1]
    assert "truncated" not in run(ctx, "list_files", max_entries=30)


def test_list_errors(ctx, ws, outside):
    make(ws, "f.txt")
    make(ws, ".goclaw/x")
    os.symlink(outside, ws / "out")
    assert "not a directory" in fails(ctx, "list_files", path="f.txt")
    assert "not found" in fails(ctx, "list_files", path="nope")
    assert "protected" in fails(ctx, "list_files", path=".goclaw")
    fails(ctx, "list_files", leak=outside, path="out")
    fails(ctx, "list_files", leak=outside, path="..")
    fails(ctx, "list_files", leak=outside, path=str(outside))


def test_list_weird_names_are_escaped(ctx, ws):
    ws.mkdir()
    (ws / "evil\nname").write_text("x")
    out = run(ctx, "list_files")
    assert "evil\\nname" in out
    assert len(out.splitlines()) == 2


def test_custom_denied_paths(ws):
    make(ws, "secrets/key", "k")
    make(ws, ".goclaw/ok", "fine")
    ctx = ToolContext(agent_key="a", workspace=Workspace(root=ws, denied=("secrets/",)))
    assert "secrets" not in run(ctx, "list_files", recursive=True)
    assert ".goclaw/ok" in run(ctx, "list_files", recursive=True)
    assert "protected" in fails(ctx, "read_file", path="secrets/key")
    assert "fine" in run(ctx, "read_file", path=".goclaw/ok")
    open_ctx = ToolContext(agent_key="a", workspace=Workspace(root=ws, denied=()))
    assert "k" in run(open_ctx, "read_file", path="secrets/key")


def test_default_denied_refused_for_every_tool(ctx, ws):
    make(ws, ".goclaw/secret.txt", "token-123")
    assert "protected" in fails(ctx, "read_file", path=".goclaw/secret.txt")
    assert "protected" in fails(ctx, "write_file", path=".goclaw/secret.txt", content="x")
    assert "protected" in fails(ctx, "write_file", path=".goclaw/new.txt", content="x")
    assert "protected" in fails(ctx, "edit", path=".goclaw/secret.txt", old_string="token", new_string="x")
    assert "protected" in fails(ctx, "search", pattern="token", path=".goclaw")
    assert "no matches" in run(ctx, "search", pattern="token")
    assert ".goclaw" not in run(ctx, "glob", pattern="**")
    assert ".goclaw" not in run(ctx, "glob", pattern="**/*.txt")
    assert "no paths match" in run(ctx, "glob", pattern=".goclaw/*")
    assert "no paths match" in run(ctx, "glob", pattern=".go*/*")
    assert (ws / ".goclaw/secret.txt").read_text() == "token-123"
    assert not (ws / ".goclaw/new.txt").exists()


# --- search ---------------------------------------------------------------------------------
def test_search_basic(ctx, ws):
    make(ws, "a.py", "import os\nprint('Hello')\n")
    make(ws, "sub/b.py", "hello = 1\n")
    make(ws, "sub/c.txt", "hello text\n")
    out = run(ctx, "search", pattern="hello")
    assert out.splitlines()[1:] == ["sub/b.py:1: hello = 1", "sub/c.txt:1: hello text"]
    out = run(ctx, "search", pattern="hello", ignore_case=True, glob="*.py")
    assert out.splitlines()[1:] == ["a.py:2: print('Hello')", "sub/b.py:1: hello = 1"]
    out = run(ctx, "search", pattern="hello", path="sub", glob="sub/**/*.txt")
    assert out.splitlines()[1:] == ["sub/c.txt:1: hello text"]
    assert "no matches" in run(ctx, "search", pattern="zzz")
    assert run(ctx, "search", pattern="import", path="a.py").splitlines()[1:] == ["a.py:1: import os"]


def test_search_invalid_regex(ctx, ws):
    ws.mkdir()
    msg = fails(ctx, "search", pattern="foo(bar")
    assert "invalid regular expression" in msg and "position" in msg
    assert "invalid regular expression" in fails(ctx, "search", pattern="[z-a]")
    assert "invalid regular expression" in fails(ctx, "search", pattern="*x")


@pytest.mark.parametrize("pattern", [r"(a+)+$", r"(a*)*b", r"(\w+\s*)+$", r"(?:x+y*)+z", r"((ab)*)+c", r"(a{1,50}){1,50}$", r"(?=(a+)+)", r"(?:(a+))*?b"])
def test_search_catastrophic_patterns_refused(ctx, ws, pattern):
    make(ws, "a.txt", "a" * 5000 + "!\n")
    assert "exponential" in fails(ctx, "search", pattern=pattern)


@pytest.mark.parametrize("pattern", [r"(ab)+", r"a+b+", r"(?:a+)++", r"(?>a+)+x", r"\d{2,4}-\w+", r"(foo|bar)+", r"(ab?)+", r"(\d{2})+", r"^\s*def \w+\("])
def test_search_safe_patterns_allowed(ctx, ws, pattern):
    make(ws, "a.txt", "ababab 12-abc foobar aab\n")
    run(ctx, "search", pattern=pattern)


def test_search_caps_and_skips(ctx, ws, outside, monkeypatch):
    for i in range(10):
        make(ws, f"m{i}.txt", "needle\n" * 5)
    make(ws, "long.txt", "needle" + "x" * (fs.SEARCH_MAX_LINE_CHARS + 10) + "\nneedle short\n")
    make(ws, "bin.dat", b"needle\x00\x01")
    make(ws, "huge.txt", b"needle\n" * (fs.SEARCH_MAX_FILE_BYTES // 7 + 10))
    os.symlink(outside / "secret.txt", ws / "link.txt")
    (outside / "needle.txt").write_text("needle outside")
    os.symlink(outside, ws / "outdir")
    make(ws, ".goclaw/n.txt", "needle in denied")
    os.link(outside / "needle.txt", ws / "hard.txt")

    out = run(ctx, "search", pattern="needle", max_results=7)
    lines = out.splitlines()
    assert len([l for l in lines if ":" in l and not l.startswith(("[", "("))]) == 7
    assert "max_results=7" in out

    out = run(ctx, "search", pattern="needle", max_results=2000)
    assert "long.txt:2: needle short" in out
    assert "long.txt:1" not in out
    assert "lines longer than" in out
    assert "binary" in out and "files over" in out
    assert "bin.dat" not in out and "huge.txt" not in out
    assert "outside" not in out and "denied" not in out and "hard.txt" not in out
    assert SECRET not in out

    monkeypatch.setattr(fs, "SEARCH_MAX_FILES", 3)
    assert "stopped after scanning 3 files" in run(ctx, "search", pattern="needle", max_results=2000)
    monkeypatch.setattr(fs, "SEARCH_MAX_FILES", 20000)
    monkeypatch.setattr(fs, "SEARCH_MAX_TOTAL_BYTES", 100)
    assert "stopped after scanning" in run(ctx, "search", pattern="needle", max_results=2000)


def test_search_long_line_output_trimmed(ctx, ws):
    make(ws, "w.txt", "needle " + "y" * 2000 + "\n")
    out = run(ctx, "search", pattern="needle")
    assert len(out.splitlines()[1]) < fs.SEARCH_SHOW_LINE_CHARS + 50


def test_search_path_attacks(ctx, ws, outside):
    ws.mkdir()
    os.symlink(outside, ws / "o")
    for p in ("..", "../outside", str(outside), "o", "/etc"):
        fails(ctx, "search", leak=outside, pattern="SECRET", path=p)
    make(ws, "b.bin", b"\x00\x01")
    assert "binary" in fails(ctx, "search", pattern="x", path="b.bin")


# --- glob -----------------------------------------------------------------------------------
def test_glob_patterns(ctx, ws):
    for rel in ("a.py", "b.txt", "src/x.py", "src/deep/y.py", "src/deep/z.txt", "docs/readme.md"):
        make(ws, rel)
    assert run(ctx, "glob", pattern="*.py") == "a.py"
    assert run(ctx, "glob", pattern="**/*.py").splitlines() == ["a.py", "src/deep/y.py", "src/x.py"]
    assert run(ctx, "glob", pattern="src/**/*.txt") == "src/deep/z.txt"
    assert run(ctx, "glob", pattern="src/*").splitlines() == ["src/deep/", "src/x.py"]
    assert run(ctx, "glob", pattern="*/*.md") == "docs/readme.md"
    assert run(ctx, "glob", pattern="[ab].*").splitlines() == ["a.py", "b.txt"]
    assert run(ctx, "glob", pattern="?.py") == "a.py"
    assert run(ctx, "glob", pattern="*.py", path="src") == "src/x.py"
    assert "no paths match" in run(ctx, "glob", pattern="nothing/*")


def test_glob_refuses_escapes(ctx, ws, outside):
    ws.mkdir()
    for pat in ("../*", "/etc/*", "src/../../*", "..", "a/\x00"):
        fails(ctx, "glob", leak=outside, pattern=pat)
    fails(ctx, "glob", leak=outside, pattern="*", path="..")
    fails(ctx, "glob", leak=outside, pattern="*", path=str(outside))


def test_glob_never_follows_symlinks_out(ctx, ws, outside):
    make(ws, "in.txt")
    os.symlink(outside, ws / "out")
    out = run(ctx, "glob", pattern="**")
    assert out.splitlines() == ["in.txt", "out"]
    assert "secret" not in out
    assert "no paths match" in run(ctx, "glob", pattern="out/*")
    assert "secret" not in run(ctx, "glob", pattern="**/*.txt")


def test_glob_cap(ctx, ws):
    d = ws / "many"
    d.mkdir(parents=True)
    for i in range(1100):
        (d / f"f{i:04}").touch()
    out = run(ctx, "glob", pattern="many/*")
    lines = out.splitlines()
    assert len(lines) == fs.GLOB_MAX_RESULTS + 1
    assert lines[0] == "many/f0000"
    assert "truncated" in lines[-1] and "1100" in lines[-1]


def test_glob_matcher():
    g = fs._Glob("**/*.py")
    assert g.match("a.py") and g.match("x/y/z.py") and not g.match("a.pyc") and not g.match("x/a.pyc")
    g = fs._Glob("*")
    assert g.match("abc") and not g.match("a/b")
    g = fs._Glob("[!a]?")
    assert g.match("bc") and not g.match("ac") and not g.match("b")
    g = fs._Glob("[a-c]*.[ch]")
    assert g.match("b_file.c") and g.match("a.h") and not g.match("d.c")
    g = fs._Glob("src/**/test_*.py")
    assert g.match("src/test_a.py") and g.match("src/x/y/test_b.py") and not g.match("lib/test_a.py")
    g = fs._Glob("a/**")
    assert g.match("a/b") and g.match("a/b/c")
    assert fs._Glob("[unclosed").match("[unclosed")


def test_glob_matcher_answers_inputs_that_make_backtracking_matchers_explode():
    # Their speed is measured by benchmarks/bench_glob.py; here: the answers, and `**` runs collapsed to one.
    g = fs._Glob("*a*a*a*a*a*a*a*a*a*a*a*b")
    assert not g.match("a" * 250) and g.match("a" * 250 + "b")
    g2 = fs._Glob("/".join(["**"] * 30 + ["x"] * 3))
    assert g2.segs.count("**") == 1
    assert not g2.match("/".join(["x"] * 60 + ["y"])) and g2.match("/".join(["x"] * 60))


# --- isolation between workspaces -----------------------------------------------------------
def test_two_workspaces_are_isolated(tmp_path):
    a, b = tmp_path / "ws" / "alice", tmp_path / "ws" / "bob"
    make(b, "diary.txt", "bob's secret")
    ca = ToolContext(agent_key="x", workspace=Workspace(root=a, user_id="alice"))
    make(a, "mine.txt", "alice")
    for name, args in (
        ("read_file", {"path": "../bob/diary.txt"}),
        ("read_file", {"path": str(b / "diary.txt")}),
        ("write_file", {"path": "../bob/diary.txt", "content": "x"}),
        ("write_file", {"path": "../bob/new.txt", "content": "x"}),
        ("edit", {"path": "../bob/diary.txt", "old_string": "bob", "new_string": "eve"}),
        ("list_files", {"path": "../bob"}),
        ("search", {"pattern": "secret", "path": "../bob"}),
        ("glob", {"pattern": "*", "path": "../bob"}),
    ):
        fails(ca, name, leak=b, **args)
    assert (b / "diary.txt").read_text() == "bob's secret"
    assert sorted(os.listdir(b)) == ["diary.txt"]
    assert "bob" not in run(ca, "search", pattern="secret")
