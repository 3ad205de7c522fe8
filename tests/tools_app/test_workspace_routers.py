"""Routers on the Workspace (P6 §3): a path a router claims is read, written, edited, listed, globbed and searched
as the router's text instead of the disk, with the disk's checks, limits and messages; everything else still goes
to the disk, and routing never widens what a path may reach."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.factories import make_agent
from tools_app import pipeline
from tools_app.base import ToolContext, ToolError
from tools_app.builtin import fs
from tools_app.paths import normalize_denied
from tools_app.workspace import (
    Workspace,
    WorkspaceRouter,
    denied_paths,
    workspace_build,
    workspace_router_register,
    workspace_router_unregister,
    workspace_routers,
)

TOOLS = {t.name: t for t in fs.TOOLS}


class DictRouter(WorkspaceRouter):
    """Keeps SOUL.md and memory/* in a dict, and remembers every path it was asked about."""

    name = "dict"

    def __init__(self, store: dict[str, str] | None = None, claim_all: bool = False) -> None:
        self.store = dict(store or {})
        self.claim_all = claim_all
        self.asked: list[str] = []

    def claims(self, ws, rel):
        self.asked.append(rel)
        return self.claim_all or rel == "SOUL.md" or rel.startswith("memory/")

    def read(self, ws, rel):
        try:
            return self.store[rel]
        except KeyError:
            raise FileNotFoundError(rel) from None

    def write(self, ws, rel, content):
        created = rel not in self.store
        self.store[rel] = content
        return created

    def entries(self, ws, rel_dir):
        return [rel for rel in self.store if not rel_dir or rel.startswith(rel_dir + "/")]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "ws"


@pytest.fixture
def router() -> DictRouter:
    return DictRouter({"SOUL.md": "I am careful.\nI say why.\n", "memory/2024-01-01.md": "met bob\nbob likes tea\n"})


@pytest.fixture
def ctx(root, router) -> ToolContext:
    return ToolContext(agent_key="a", workspace=Workspace(root=root, routers=(router,)))


def run(ctx: ToolContext, name: str, **args) -> str:
    result = TOOLS[name].run(ctx, args)
    assert not result.is_error, result.for_llm
    return result.for_llm


def fails(ctx: ToolContext, name: str, **args) -> str:
    with pytest.raises(ToolError) as info:
        TOOLS[name].run(ctx, args)
    return str(info.value)


def on_disk(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


# --- read / write / edit --------------------------------------------------------------------------------------
def test_write_file_goes_to_the_router_and_never_to_the_disk(ctx, root, router):
    assert run(ctx, "write_file", path="memory/today.md", content="tea\n") == \
        "wrote 4 bytes to memory/today.md (created)"
    assert run(ctx, "write_file", path="SOUL.md", content="new soul") == "wrote 8 bytes to SOUL.md (replaced)"
    assert router.store["memory/today.md"] == "tea\n" and router.store["SOUL.md"] == "new soul"
    assert run(ctx, "write_file", path="memory/today.md", content="coffee\n", append=True) == \
        "appended 7 bytes to memory/today.md"
    assert run(ctx, "write_file", path="memory/new.md", content="x", append=True) == "appended 1 bytes to memory/new.md"
    assert router.store["memory/today.md"] == "tea\ncoffee\n" and router.store["memory/new.md"] == "x"
    assert not (root / "SOUL.md").exists() and not (root / "memory").exists()


def test_write_file_keeps_the_disk_limits_for_routed_paths(ctx, router, monkeypatch):
    monkeypatch.setattr(fs, "WRITE_MAX_BYTES", 10)
    assert "too large" in fails(ctx, "write_file", path="SOUL.md", content="é" * 6)
    assert router.store["SOUL.md"] == "I am careful.\nI say why.\n"


@pytest.mark.parametrize("args", [{}, {"start_line": 2}, {"start_line": 1, "end_line": 1}, {"end_line": 5}])
def test_read_file_of_a_routed_path_reads_exactly_like_the_same_text_on_disk(ctx, root, router, tmp_path, args):
    disk = tmp_path / "plain"
    (disk / "memory").mkdir(parents=True)
    (disk / "memory" / "2024-01-01.md").write_text(router.store["memory/2024-01-01.md"])
    plain = ToolContext(agent_key="a", workspace=Workspace(root=disk))
    assert run(ctx, "read_file", path="memory/2024-01-01.md", **args) == \
        run(plain, "read_file", path="memory/2024-01-01.md", **args)
    assert run(ctx, "read_file", path="SOUL.md").startswith("[SOUL.md lines 1-2 of 2]\nI am careful.")
    past_end = fails(plain, "read_file", path="memory/2024-01-01.md", start_line=9)
    assert fails(ctx, "read_file", path="SOUL.md", start_line=9) == past_end.replace("memory/2024-01-01.md", "SOUL.md")


def test_read_file_of_a_missing_or_oversized_routed_file_is_refused_like_on_disk(ctx, router, monkeypatch):
    assert fails(ctx, "read_file", path="memory/none.md") == "file not found: memory/none.md"
    monkeypatch.setattr(fs, "READ_MAX_FILE_BYTES", 10)
    assert "file is too large to read whole" in fails(ctx, "read_file", path="SOUL.md")
    assert run(ctx, "read_file", path="SOUL.md", start_line=2) == "[SOUL.md lines 2-2 of 2]\nI say why.\n"


def test_edit_changes_the_routed_text_with_the_disk_rules(ctx, root, router):
    assert run(ctx, "edit", path="SOUL.md", old_string="careful", new_string="brave") == \
        "replaced 1 occurrence in SOUL.md"
    assert router.store["SOUL.md"] == "I am brave.\nI say why.\n"
    assert "occurs 2 times" in fails(ctx, "edit", path="memory/2024-01-01.md", old_string="bob", new_string="eve")
    assert run(ctx, "edit", path="memory/2024-01-01.md", old_string="bob", new_string="eve", replace_all=True) == \
        "replaced 2 occurrences in memory/2024-01-01.md"
    assert "A match ignoring whitespace differences exists" in fails(ctx, "edit", path="SOUL.md",
                                                                     old_string="I  am brave.", new_string="x")
    assert fails(ctx, "edit", path="memory/none.md", old_string="a", new_string="b") == "file not found: memory/none.md"
    assert not root.exists() or on_disk(root) == []


def test_unclaimed_paths_still_hit_the_disk(ctx, root, router):
    before = dict(router.store)
    run(ctx, "write_file", path="notes/todo.txt", content="buy tea\n")
    run(ctx, "edit", path="notes/todo.txt", old_string="tea", new_string="milk")
    assert (root / "notes" / "todo.txt").read_text() == "buy milk\n"
    assert "buy milk" in run(ctx, "read_file", path="notes/todo.txt")
    assert router.store == before


def test_lexically_equivalent_spellings_reach_the_same_routed_file(ctx, root, router):
    run(ctx, "write_file", path="./memory//x.md", content="one")
    run(ctx, "write_file", path="notes/../memory/x.md", content="two", append=True)
    run(ctx, "write_file", path=str(root / "memory" / "x.md"), content="three", append=True)  # absolute, inside
    assert router.store["memory/x.md"] == "onetwothree"
    assert not (root / "memory").exists()


# --- confinement: routing widens nothing ---------------------------------------------------------------------
@pytest.mark.parametrize("path", ["../SOUL.md", "memory/../../SOUL.md", "../ws/../SOUL.md", "/etc/SOUL.md",
                                  "{outside}/SOUL.md", "{root}/../SOUL.md"])
def test_escapes_are_refused_and_no_router_sees_them(ctx, root, router, tmp_path, path):
    path = path.format(root=root, outside=tmp_path)
    before = dict(router.store)
    for name, args in (("read_file", {}), ("write_file", {"content": "x"}),
                       ("edit", {"old_string": "I", "new_string": "x"})):
        assert "outside the workspace" in fails(ctx, name, path=path, **args)
    assert router.store == before and router.asked == []
    assert not (tmp_path / "SOUL.md").exists()


def test_a_denied_path_is_refused_before_any_router_is_asked(root, tmp_path):
    greedy = DictRouter(claim_all=True)
    ctx = ToolContext(agent_key="a", workspace=Workspace(root=root, denied=(".goclaw/", "memory/private"),
                                                         routers=(greedy,)))
    for path in (".goclaw/token", "memory/private/x.md", "memory/../.goclaw/x", "memory/private"):
        for name, args in (("read_file", {}), ("write_file", {"content": "x"}),
                           ("edit", {"old_string": "a", "new_string": "b"})):
            assert "protected location" in fails(ctx, name, path=path, **args)
    assert greedy.asked == [] and greedy.store == {}


def test_malformed_paths_are_refused_like_disk_paths(ctx, router):
    for path in ("SOUL.md\x00", "memory/\u202eevil.md", "memory/" + "x" * 300):
        fails(ctx, "write_file", path=path, content="x")
    assert router.asked == [] and "memory/\u202eevil.md" not in router.store


def test_a_path_ending_in_a_slash_is_never_a_routed_file(ctx, router):
    assert "ends with '/'" in fails(ctx, "write_file", path="SOUL.md/", content="x")
    assert router.store["SOUL.md"] == "I am careful.\nI say why.\n"


def test_entries_a_router_lists_are_checked_like_typed_paths(root):
    hostile = DictRouter({"memory/ok.md": "fine", "../memory/up.md": "x", "/etc/passwd": "x", "memory/../SOUL.md": "x",
                          "memory//a.md": "x", ".goclaw/token": "x", "memory/./b.md": "x"}, claim_all=True)
    ws = Workspace(root=root, routers=(hostile,))
    assert list(ws.routed_files()) == ["memory/ok.md"]
    ctx = ToolContext(agent_key="a", workspace=ws)
    assert run(ctx, "list_files", recursive=True) == \
        "[workspace root: 2 entries (recursive)]\nmemory/\nmemory/ok.md (4 B)"


# --- list_files / glob / search ----------------------------------------------------------------------------
def test_list_files_shows_routed_files_among_the_disk_files(ctx, root):
    (root / "memory").mkdir(parents=True)
    (root / "memory" / "2024-01-01.md").write_text("stale disk copy, much longer than the routed one\n")
    (root / "notes.txt").write_text("hi\n")
    (root / "a").mkdir()
    (root / "a" / "z.txt").write_text("z")
    assert run(ctx, "list_files") == "[workspace root: 4 entries]\nSOUL.md (25 B)\na/\nmemory/\nnotes.txt (3 B)"
    assert run(ctx, "list_files", recursive=True) == (
        "[workspace root: 6 entries (recursive)]\nSOUL.md (25 B)\na/\na/z.txt (1 B)\nmemory/\n"
        "memory/2024-01-01.md (22 B)\nnotes.txt (3 B)")  # the routed file hides the disk file of the same path
    assert run(ctx, "list_files", path="memory") == "[memory/: 1 entries]\nmemory/2024-01-01.md (22 B)"


def test_list_files_of_a_directory_only_routers_hold(ctx, root):
    root.mkdir()
    assert run(ctx, "list_files", path="memory") == "[memory/: 1 entries]\nmemory/2024-01-01.md (22 B)"
    assert "directory not found" in fails(ctx, "list_files", path="nothing")
    assert not (root / "memory").exists()


def test_list_files_cut_at_max_entries_keeps_walk_order(ctx, root):
    root.mkdir()
    for name in ("b.txt", "c.txt", "d.txt"):
        (root / name).write_text("x")
    assert run(ctx, "list_files", max_entries=2).splitlines()[:3] == ["[workspace root: 2 entries]", "SOUL.md (25 B)",
                                                                       "b.txt (1 B)"]
    out = run(ctx, "list_files", max_entries=4)
    assert out.splitlines()[1:5] == ["SOUL.md (25 B)", "b.txt (1 B)", "c.txt (1 B)", "d.txt (1 B)"]
    assert "truncated" in out


def test_glob_matches_routed_files_and_their_directories(ctx, root):
    root.mkdir()
    (root / "README.md").write_text("r")
    assert run(ctx, "glob", pattern="*.md") == "README.md\nSOUL.md"
    assert run(ctx, "glob", pattern="**/*.md") == "README.md\nSOUL.md\nmemory/2024-01-01.md"
    assert run(ctx, "glob", pattern="memory/*.md") == "memory/2024-01-01.md"
    assert run(ctx, "glob", pattern="*") == "README.md\nSOUL.md\nmemory/"
    assert run(ctx, "glob", pattern="*.md", path="memory") == "memory/2024-01-01.md"


def test_search_reads_routed_files_in_path_order(ctx, root):
    (root / "memory").mkdir(parents=True)
    (root / "memory" / "2024-01-01.md").write_text("bob on disk, hidden\n")
    (root / "memory" / "0-first.md").write_text("bob first\n")
    (root / "zeta.txt").write_text("bob last\n")
    assert run(ctx, "search", pattern="bob") == (
        "[4 matches; 4 files scanned]\nmemory/0-first.md:1: bob first\nmemory/2024-01-01.md:1: met bob\n"
        "memory/2024-01-01.md:2: bob likes tea\nzeta.txt:1: bob last")
    assert run(ctx, "search", pattern="why", path="SOUL.md") == "[1 matches; 1 files scanned]\nSOUL.md:2: I say why."
    assert run(ctx, "search", pattern="tea", glob="2024-*.md") == \
        "[1 matches; 1 files scanned]\nmemory/2024-01-01.md:2: bob likes tea"
    assert "stopped at max_results=1" in run(ctx, "search", pattern="bob", max_results=1)


def test_search_of_a_directory_only_routers_hold(ctx, root):
    assert run(ctx, "search", pattern="tea", path="memory") == \
        "[1 matches; 1 files scanned]\nmemory/2024-01-01.md:2: bob likes tea"
    assert "not found" in fails(ctx, "search", pattern="x", path="nothing")


# --- building the workspace -------------------------------------------------------------------------------------
def test_denied_paths_is_the_one_merge_of_builtin_server_and_agent_prefixes(settings):
    settings.TOOL_DENIED_PATHS = [".git/config", ".goclaw/"]
    assert denied_paths({"denied_paths": ["secrets/", "./.git/config"]}) == (".goclaw", ".git/config", "secrets")
    assert denied_paths({}) == denied_paths({"denied_paths": None}) == (".goclaw", ".git/config")
    assert Workspace(root=Path("/x")).denied == normalize_denied([".goclaw/"])


class NotesRouter(DictRouter):
    """Paths no app's router claims (the context-file and memory routers, registered at start-up, come first)."""

    def claims(self, ws, rel):
        self.asked.append(rel)
        return rel == "NOTES.md" or rel.startswith("notes/")


def test_a_registered_router_receives_calls_made_through_the_pipeline(db, tmp_path):
    router = NotesRouter({"NOTES.md": "old"})
    agent = make_agent(workspace=str(tmp_path), other_config={"denied_paths": ["notes/private"]})
    workspace_router_register(router)
    try:
        workspace_router_register(router)  # twice: still once
        assert workspace_routers().count(router) == 1
        ws = workspace_build(agent, "", agent.other_config)
        assert ws.root == tmp_path and router in ws.routers and "notes/private" in ws.denied
        assert workspace_build(agent, "", {}, routers=()).routers == ()

        def call(tool, **arguments):
            return pipeline.execute(pipeline.ToolCall(agent=agent, tool=tool, arguments=arguments))

        outcome = call("write_file", path="notes/today.md", content="tea\n")
        assert outcome.status == "ok", outcome.for_llm
        assert call("edit", path="NOTES.md", old_string="old", new_string="new").status == "ok"
        assert "notes/today.md:1: tea" in call("search", pattern="tea").for_llm
        refused = call("write_file", path="notes/private/x.md", content="x")
        assert refused.is_error and "protected location" in refused.for_llm
        assert router.store == {"NOTES.md": "new", "notes/today.md": "tea\n"}
        assert "notes/private/x.md" not in router.asked
        assert not os.path.lexists(tmp_path / "notes") and not os.path.lexists(tmp_path / "NOTES.md")
    finally:
        workspace_router_unregister(router)
    assert router not in workspace_routers()
