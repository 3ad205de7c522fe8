"""Attack tests for tools_app.paths: real files, real symlinks, real races (simulated deterministically)."""
from __future__ import annotations

import os
import socket
import stat
import threading
from pathlib import Path

import pytest

from tools_app import paths
from tools_app.base import ToolError
from tools_app.paths import (
    PathError,
    atomic_write,
    is_denied,
    is_within,
    open_dir,
    open_for_read,
    open_for_write,
    relative_display,
    resolve_in_workspace,
)

DENIED = (".goclaw/",)
SECRET = "TOP-SECRET-OUTSIDE"


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    w = tmp_path / "ws"
    w.mkdir()
    (w / "sub").mkdir()
    (w / "sub" / "file.txt").write_text("inside\n")
    (w / "hello.txt").write_text("hello\n")
    return w


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    o = tmp_path / "outside"
    o.mkdir()
    (o / "secret.txt").write_text(SECRET)
    return o


def read_fd(fd: int) -> bytes:
    with os.fdopen(fd, "rb") as f:
        return f.read()


def assert_refused(fn, *args, outside: Path | None = None, **kwargs) -> PathError:
    with pytest.raises(PathError) as info:
        fn(*args, **kwargs)
    msg = str(info.value)
    assert msg
    if outside is not None:
        assert str(outside) not in msg, f"message leaks a host path: {msg}"
    return info.value


def test_patherror_is_toolerror():
    assert issubclass(PathError, ToolError)


# --- basics ---------------------------------------------------------------------------------
def test_relative_path_resolves_to_real_path(ws):
    assert resolve_in_workspace(ws, "sub/file.txt") == ws.resolve() / "sub" / "file.txt"
    assert resolve_in_workspace(ws, ".") == ws.resolve()
    assert resolve_in_workspace(ws, "./sub/./file.txt") == ws.resolve() / "sub" / "file.txt"
    assert resolve_in_workspace(ws, "sub/../hello.txt") == ws.resolve() / "hello.txt"


def test_nonexistent_path_is_fine_for_resolution(ws):
    assert resolve_in_workspace(ws, "new/dir/x.txt") == ws.resolve() / "new" / "dir" / "x.txt"


def test_absolute_path_inside_workspace_accepted(ws):
    assert resolve_in_workspace(ws, str(ws / "hello.txt")) == ws.resolve() / "hello.txt"


# --- escapes --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "p",
    [
        "..",
        "../",
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        "./../outside/secret.txt",
        "sub/../../../../../../etc/passwd",
        "../../../../../../../../etc/passwd",
        "sub/./../..",
        "../ws/../outside/secret.txt",
    ],
)
def test_dotdot_escapes_refused(ws, outside, p):
    assert_refused(resolve_in_workspace, ws, p, outside=outside)
    assert_refused(open_for_read, ws, p, outside=outside)
    assert_refused(open_for_write, ws, p + ("x" if p.endswith("/") else ""), outside=outside)
    assert (outside / "secret.txt").read_text() == SECRET


@pytest.mark.parametrize("p", ["/etc/passwd", "/etc/shadow", "/", "/tmp", "//etc/passwd", "/proc/self/environ"])
def test_absolute_paths_outside_refused(ws, p):
    err = assert_refused(resolve_in_workspace, ws, p)
    assert p not in str(err) or p == "/"
    assert_refused(open_for_read, ws, p)


def test_absolute_outside_path_to_other_dir(ws, outside):
    assert_refused(resolve_in_workspace, ws, str(outside / "secret.txt"), outside=outside)
    assert_refused(open_for_write, ws, str(outside / "new.txt"), outside=outside)
    assert not (outside / "new.txt").exists()


def test_absolute_path_with_dotdot_out_of_workspace(ws, outside):
    assert_refused(resolve_in_workspace, ws, f"{ws}/../outside/secret.txt", outside=outside)


def test_prefix_lookalike_workspace(tmp_path):
    ws = tmp_path / "ws"
    evil = tmp_path / "ws-evil"
    ws.mkdir()
    evil.mkdir()
    (evil / "loot.txt").write_text("loot")
    assert not is_within(str(ws), str(evil / "loot.txt"))
    assert not is_within(str(ws), str(evil))
    assert is_within(str(ws), str(ws / "a"))
    assert_refused(resolve_in_workspace, ws, str(evil / "loot.txt"), outside=evil)
    assert_refused(resolve_in_workspace, ws, str(evil), outside=evil)
    assert_refused(resolve_in_workspace, ws, "../ws-evil/loot.txt", outside=evil)
    assert_refused(open_for_write, ws, str(evil / "new.txt"), outside=evil)
    assert not (evil / "new.txt").exists()
    # a symlink inside ws pointing at the look-alike is refused too
    os.symlink(str(evil), ws / "e")
    assert_refused(resolve_in_workspace, ws, "e/loot.txt", outside=evil)


def test_workspace_itself_a_symlink(tmp_path):
    real = tmp_path / "real-ws"
    real.mkdir()
    (real / "f.txt").write_text("x")
    link = tmp_path / "link-ws"
    os.symlink(real, link)
    assert resolve_in_workspace(link, "f.txt") == real.resolve() / "f.txt"
    assert resolve_in_workspace(link, str(link / "f.txt")) == real.resolve() / "f.txt"
    assert resolve_in_workspace(link, str(real / "f.txt")) == real.resolve() / "f.txt"
    assert read_fd(open_for_read(link, "f.txt")) == b"x"
    os.close(open_for_write(link, "g.txt"))
    assert (real / "g.txt").exists()
    assert_refused(resolve_in_workspace, link, "../real-ws-sibling/x")


def test_per_workspace_isolation(tmp_path):
    a = tmp_path / "agents" / "a"
    b = tmp_path / "agents" / "b"
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    (b / "private.txt").write_text("b-private")
    for p in ("../b/private.txt", str(b / "private.txt"), "../b", "./../b/private.txt"):
        assert_refused(resolve_in_workspace, a, p, outside=b)
        assert_refused(open_for_read, a, p, outside=b)
    assert_refused(open_for_write, a, "../b/private.txt", outside=b)
    assert_refused(open_for_write, a, "../b/new.txt", outside=b)
    assert (b / "private.txt").read_text() == "b-private"
    assert not (b / "new.txt").exists()


# --- malformed input ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "p",
    [
        "",
        "a\x00b",
        "\x00",
        "hello.txt\x00.png",
        "a\nb",
        "a\rb",
        "a\tb",
        "\x1b[31m",
        "a\x7fb",
        "a\x85b",
        "evil\u202etxt.exe",
        "a\u2028b",
        "x" * 4097,
        "a/" * 2100 + "b",
        "y" * 256,
        "sub/" + "z" * 256 + "/f",
        "é" * 128,  # 256 bytes in UTF-8
        "bad\udcff",
    ],
)
def test_malformed_paths_refused(ws, p):
    assert_refused(resolve_in_workspace, ws, p)
    assert_refused(open_for_read, ws, p)
    assert_refused(open_for_write, ws, p)


@pytest.mark.parametrize("p", [None, 5, b"hello.txt", ["a"]])
def test_non_string_paths_refused(ws, p):
    assert_refused(resolve_in_workspace, ws, p)


def test_max_component_length_ok(ws):
    name = "n" * 255
    assert resolve_in_workspace(ws, name) == ws.resolve() / name


# --- symlinks -------------------------------------------------------------------------------
def test_symlink_file_to_outside(ws, outside):
    os.symlink(outside / "secret.txt", ws / "link.txt")
    assert_refused(resolve_in_workspace, ws, "link.txt", outside=outside)
    assert_refused(open_for_read, ws, "link.txt", outside=outside)
    assert_refused(open_for_write, ws, "link.txt", outside=outside)
    assert_refused(open_for_write, ws, "link.txt", outside=outside, append=True)
    assert_refused(atomic_write, ws, "link.txt", b"pwned", outside=outside)
    assert (outside / "secret.txt").read_text() == SECRET
    assert os.path.islink(ws / "link.txt")


def test_relative_symlink_to_outside(ws, outside):
    os.symlink("../outside/secret.txt", ws / "rel.txt")
    assert_refused(open_for_read, ws, "rel.txt", outside=outside)
    assert_refused(open_for_write, ws, "rel.txt", outside=outside)
    assert (outside / "secret.txt").read_text() == SECRET


def test_symlink_to_etc_passwd(ws):
    os.symlink("/etc/passwd", ws / "pw")
    err = assert_refused(open_for_read, ws, "pw")
    assert "/etc" not in str(err)


def test_symlinked_parent_dir_to_outside(ws, outside):
    os.symlink(outside, ws / "d")
    assert_refused(resolve_in_workspace, ws, "d/secret.txt", outside=outside)
    assert_refused(open_for_read, ws, "d/secret.txt", outside=outside)
    assert_refused(open_for_write, ws, "d/secret.txt", outside=outside)
    assert_refused(open_for_write, ws, "d/new.txt", outside=outside)
    assert_refused(open_for_write, ws, "d/deeper/new.txt", outside=outside)
    assert_refused(atomic_write, ws, "d/new.txt", b"x", outside=outside)
    assert_refused(open_dir, ws, "d", outside=outside)
    assert sorted(os.listdir(outside)) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == SECRET


def test_symlinked_grandparent_dir_to_outside(ws, outside):
    (outside / "inner").mkdir()
    os.symlink(outside, ws / "sub" / "up")
    assert_refused(open_for_write, ws, "sub/up/inner/new.txt", outside=outside)
    assert not (outside / "inner" / "new.txt").exists()


def test_dangling_symlink_to_outside(ws, outside):
    target = outside / "created-by-attack.txt"
    os.symlink(target, ws / "dangle")
    assert_refused(resolve_in_workspace, ws, "dangle", outside=outside)
    assert_refused(open_for_read, ws, "dangle", outside=outside)
    assert_refused(open_for_write, ws, "dangle", outside=outside)
    assert_refused(open_for_write, ws, "dangle", outside=outside, append=True)
    assert_refused(atomic_write, ws, "dangle", b"x", outside=outside)
    assert not target.exists()


def test_dangling_symlink_dir_to_outside(ws, outside):
    os.symlink(outside / "nope" / "deeper", ws / "dd")
    assert_refused(resolve_in_workspace, ws, "dd/x.txt", outside=outside)
    assert_refused(open_for_write, ws, "dd/x.txt", outside=outside)
    assert not (outside / "nope").exists()


def test_dangling_symlink_inside(ws):
    os.symlink("missing.txt", ws / "dangle-in")
    assert resolve_in_workspace(ws, "dangle-in") == ws.resolve() / "missing.txt"
    err = assert_refused(open_for_read, ws, "dangle-in")
    assert "not found" in str(err)
    # even an inside symlink is never written through
    assert_refused(open_for_write, ws, "dangle-in")
    assert not (ws / "missing.txt").exists()


def test_symlink_inside_readable_but_not_writable(ws):
    os.symlink("hello.txt", ws / "alias.txt")
    assert read_fd(open_for_read(ws, "alias.txt")) == b"hello\n"
    err = assert_refused(open_for_write, ws, "alias.txt")
    assert "symlink" in str(err)
    assert (ws / "hello.txt").read_text() == "hello\n"


def test_symlinked_dir_inside_is_followed_for_parents(ws):
    os.symlink("sub", ws / "s")
    assert resolve_in_workspace(ws, "s/file.txt") == ws.resolve() / "sub" / "file.txt"
    os.close(open_for_write(ws, "s/new.txt"))
    assert (ws / "sub" / "new.txt").is_file()


def test_symlink_chain(ws, outside):
    os.symlink(outside / "secret.txt", ws / "c3")
    os.symlink("c3", ws / "c2")
    os.symlink("c2", ws / "c1")
    assert_refused(open_for_read, ws, "c1", outside=outside)
    os.symlink("hello.txt", ws / "i3")
    os.symlink("i3", ws / "i2")
    os.symlink("i2", ws / "i1")
    assert resolve_in_workspace(ws, "i1") == ws.resolve() / "hello.txt"


def test_chain_that_goes_out_and_back_in_is_resolved_by_final_location(ws, outside):
    # outside/back -> ws/hello.txt ; ws/out -> outside/back : final target is inside.
    os.symlink(ws / "hello.txt", outside / "back")
    os.symlink(outside / "back", ws / "out")
    assert resolve_in_workspace(ws, "out") == ws.resolve() / "hello.txt"


@pytest.mark.parametrize("setup", ["self", "pair", "dir-loop"])
def test_symlink_loops_refused_cleanly(ws, setup):
    if setup == "self":
        os.symlink("loop", ws / "loop")
        p = "loop"
    elif setup == "pair":
        os.symlink("b", ws / "a")
        os.symlink("a", ws / "b")
        p = "a/x"
    else:
        os.symlink(".", ws / "dot")
        os.symlink("dot/dot/dot/dot/dot/dot/dot/dot/dot/loopd", ws / "loopd")
        p = "loopd/f"
    err = assert_refused(resolve_in_workspace, ws, p)
    assert "symbolic links" in str(err)
    assert_refused(open_for_read, ws, p)
    assert_refused(open_for_write, ws, p)


def test_long_symlink_chain_refused(ws):
    prev = "hello.txt"
    for i in range(paths.MAX_SYMLINKS + 5):
        os.symlink(prev, ws / f"l{i}")
        prev = f"l{i}"
    assert_refused(resolve_in_workspace, ws, prev)


def test_dotdot_after_symlink_follows_kernel_semantics(ws, outside):
    (ws / "sub" / "deep").mkdir()
    os.symlink("sub/deep", ws / "sd")
    # kernel: sd/.. == sub, not the workspace root
    assert resolve_in_workspace(ws, "sd/../file.txt") == ws.resolve() / "sub" / "file.txt"
    # a symlink to a dir outside, then .. back "into" ws lexically, is still outside for the kernel
    (outside / "o1").mkdir()
    os.symlink(outside / "o1", ws / "o")
    assert_refused(resolve_in_workspace, ws, "o/../secret.txt", outside=outside)


# --- TOCTOU ---------------------------------------------------------------------------------
def _swap_after_check(monkeypatch, action):
    """Make the confinement check pass on the honest tree, then run `action` before the open."""
    original = paths._resolve

    def racing(*a, **kw):
        result = original(*a, **kw)
        action()
        return result

    monkeypatch.setattr(paths, "_resolve", racing)


def test_parent_swapped_for_symlink_after_check_write(ws, outside, monkeypatch):
    def swap():
        os.rename(ws / "sub", ws / "sub-moved")
        os.symlink(outside, ws / "sub")

    _swap_after_check(monkeypatch, swap)
    assert_refused(open_for_write, ws, "sub/secret.txt", outside=outside)
    assert (outside / "secret.txt").read_text() == SECRET


def test_parent_swapped_for_symlink_after_check_new_file(ws, outside, monkeypatch):
    def swap():
        os.rename(ws / "sub", ws / "sub-moved")
        os.symlink(outside, ws / "sub")

    _swap_after_check(monkeypatch, swap)
    assert_refused(open_for_write, ws, "sub/planted.txt", outside=outside)
    assert not (outside / "planted.txt").exists()


def test_parent_swapped_after_check_atomic_write(ws, outside, monkeypatch):
    def swap():
        if not os.path.islink(ws / "sub"):
            os.rename(ws / "sub", ws / "sub-moved")
            os.symlink(outside, ws / "sub")

    _swap_after_check(monkeypatch, swap)
    assert_refused(atomic_write, ws, "sub/secret.txt", b"pwned", outside=outside)
    assert (outside / "secret.txt").read_text() == SECRET
    assert sorted(os.listdir(outside)) == ["secret.txt"]


def test_parent_swapped_for_symlink_after_check_read(ws, outside, monkeypatch):
    (outside / "file.txt").write_text(SECRET)

    def swap():
        os.rename(ws / "sub", ws / "sub-moved")
        os.symlink(outside, ws / "sub")

    _swap_after_check(monkeypatch, swap)
    assert_refused(open_for_read, ws, "sub/file.txt", outside=outside)


def test_final_component_swapped_for_symlink_after_check(ws, outside, monkeypatch):
    def swap():
        os.unlink(ws / "hello.txt")
        os.symlink(outside / "secret.txt", ws / "hello.txt")

    _swap_after_check(monkeypatch, swap)
    assert_refused(open_for_read, ws, "hello.txt", outside=outside)


def test_final_component_swapped_before_write_open(ws, outside, monkeypatch):
    def swap():
        if not os.path.islink(ws / "hello.txt"):
            os.unlink(ws / "hello.txt")
            os.symlink(outside / "secret.txt", ws / "hello.txt")

    _swap_after_check(monkeypatch, swap)
    assert_refused(open_for_write, ws, "hello.txt", outside=outside)
    assert_refused(open_for_write, ws, "hello.txt", outside=outside, append=True)
    assert (outside / "secret.txt").read_text() == SECRET


def test_walk_dirs_refuses_symlinked_component(ws, outside):
    os.symlink(outside, ws / "evil")
    with pytest.raises(PathError):
        paths._walk_dirs(str(ws.resolve()), ["evil"], "evil", create=False)
    with pytest.raises(PathError):
        paths._walk_dirs(str(ws.resolve()), ["evil", "x"], "evil/x", create=True)
    assert sorted(os.listdir(outside)) == ["secret.txt"]


# --- hard links and special files -----------------------------------------------------------
def test_hardlink_to_outside_file_refused(ws, outside):
    try:
        os.link(outside / "secret.txt", ws / "hl.txt")
    except OSError:
        pytest.skip("hard links not supported here")
    err = assert_refused(open_for_read, ws, "hl.txt", outside=outside)
    assert "hard link" in str(err)
    assert_refused(open_for_write, ws, "hl.txt", outside=outside)
    assert_refused(open_for_write, ws, "hl.txt", outside=outside, append=True)
    assert_refused(atomic_write, ws, "hl.txt", b"pwned", outside=outside)
    assert (outside / "secret.txt").read_text() == SECRET


def _no_hang(fn, *args, **kwargs):
    box: dict = {}

    def target():
        try:
            box["result"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "call hung"
    return box


def test_fifo_refused_without_hanging(ws):
    os.mkfifo(ws / "pipe")
    for fn, kw in ((open_for_read, {}), (open_for_write, {}), (open_for_write, {"append": True})):
        box = _no_hang(fn, ws, "pipe", **kw)
        assert isinstance(box.get("error"), PathError), box
        assert "FIFO" in str(box["error"])
    box = _no_hang(atomic_write, ws, "pipe", b"x")
    assert isinstance(box.get("error"), PathError)
    assert stat.S_ISFIFO(os.lstat(ws / "pipe").st_mode)


def test_symlink_to_fifo_refused(ws):
    os.mkfifo(ws / "pipe")
    os.symlink("pipe", ws / "pipelink")
    box = _no_hang(open_for_read, ws, "pipelink")
    assert isinstance(box.get("error"), PathError)


def test_socket_refused(tmp_path):
    ws = Path("/tmp") / f"gcw-sock-{os.getpid()}"  # AF_UNIX paths must be short
    ws.mkdir(exist_ok=True)
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(str(ws / "sock"))
        assert_refused(open_for_read, ws, "sock")
        assert_refused(open_for_write, ws, "sock")
    finally:
        s.close()
        (ws / "sock").unlink(missing_ok=True)
        ws.rmdir()


def test_device_node_refused(ws):
    try:
        os.mknod(ws / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError):
        pytest.skip("cannot create device nodes here")
    err = assert_refused(open_for_read, ws, "null")
    assert "device" in str(err)
    assert_refused(open_for_write, ws, "null")


def test_symlink_to_dev_refused(ws):
    os.symlink("/dev/zero", ws / "zero")
    assert_refused(open_for_read, ws, "zero")


def test_directory_refused_for_file_open(ws):
    assert "is a directory" in str(assert_refused(open_for_read, ws, "sub"))
    assert "is a directory" in str(assert_refused(open_for_write, ws, "sub"))
    assert_refused(open_for_read, ws, ".")


# --- denied paths ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "rel,expected",
    [
        (".goclaw", True),
        (".goclaw/x", True),
        (".goclaw/a/b", True),
        (".goclawx", False),
        (".goclaw-other/x", False),
        (".GOCLAW/x", False),
        ("a/.goclaw/x", False),
        (".", False),
        ("x", False),
    ],
)
def test_is_denied(rel, expected):
    assert is_denied(rel, DENIED) is expected


def test_is_denied_without_trailing_slash_and_normalisation():
    assert is_denied("secrets", ["secrets"])
    assert is_denied("secrets/k", ["./secrets"])
    assert is_denied("a/b", ["/a/"])
    assert not is_denied("secretsx", ["secrets"])
    assert not is_denied("x", ["", None, 5])


@pytest.mark.parametrize("p", [".goclaw", ".goclaw/", ".goclaw/cfg", "./.goclaw/cfg", "sub/../.goclaw/cfg", ".goclaw/../.goclaw/cfg", str("{ws}/.goclaw/cfg")])
def test_denied_paths_refused(ws, p):
    (ws / ".goclaw").mkdir()
    (ws / ".goclaw" / "cfg").write_text("token")
    p = p.replace("{ws}", str(ws))
    err = assert_refused(resolve_in_workspace, ws, p, denied=DENIED)
    assert "protected" in str(err)
    assert_refused(open_for_read, ws, p, denied=DENIED)
    if not p.endswith("/"):
        assert_refused(open_for_write, ws, p, denied=DENIED)
    assert (ws / ".goclaw" / "cfg").read_text() == "token"


def test_denied_via_symlink_and_via_symlinked_denied_name(ws):
    (ws / ".goclaw").mkdir()
    (ws / ".goclaw" / "cfg").write_text("token")
    os.symlink(".goclaw", ws / "innocent")
    assert_refused(open_for_read, ws, "innocent/cfg", denied=DENIED)
    assert_refused(open_for_write, ws, "innocent/new", denied=DENIED)
    os.symlink(".goclaw/cfg", ws / "cfglink")
    assert_refused(open_for_read, ws, "cfglink", denied=DENIED)
    assert not (ws / ".goclaw" / "new").exists()


def test_denied_name_that_is_a_symlink(tmp_path):
    ws = tmp_path / "ws"
    (ws / "data").mkdir(parents=True)
    (ws / "data" / "x").write_text("x")
    os.symlink("data", ws / ".goclaw")
    assert_refused(open_for_read, ws, ".goclaw/x", denied=DENIED)


def test_open_dir_denied(ws):
    (ws / ".goclaw").mkdir()
    assert_refused(open_dir, ws, ".goclaw", denied=DENIED)


# --- writes ---------------------------------------------------------------------------------
def test_open_for_write_creates_workspace_and_parents_0700(tmp_path):
    ws = tmp_path / "fresh"
    fd = open_for_write(ws, "a/b/c.txt")
    os.write(fd, b"data")
    os.close(fd)
    assert (ws / "a" / "b" / "c.txt").read_bytes() == b"data"
    assert stat.S_IMODE(os.stat(ws).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(ws / "a").st_mode) == 0o700 & ~_umask()
    assert stat.S_IMODE(os.stat(ws / "a" / "b").st_mode) == 0o700 & ~_umask()


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def test_open_for_write_truncates_and_appends(ws):
    fd = open_for_write(ws, "hello.txt")
    os.write(fd, b"new")
    os.close(fd)
    assert (ws / "hello.txt").read_bytes() == b"new"
    fd = open_for_write(ws, "hello.txt", append=True)
    os.write(fd, b"+more")
    os.close(fd)
    assert (ws / "hello.txt").read_bytes() == b"new+more"


@pytest.mark.parametrize("p", [".", "./", "sub/..", "sub/", "sub/.", "hello.txt/x"])
def test_write_needs_a_file_path(ws, p):
    assert_refused(open_for_write, ws, p)
    assert_refused(atomic_write, ws, p, b"x")


def test_write_through_file_as_directory_refused(ws):
    assert_refused(open_for_write, ws, "hello.txt/child.txt")


def test_atomic_write_replaces_and_keeps_mode(ws):
    os.chmod(ws / "hello.txt", 0o640)
    assert atomic_write(ws, "hello.txt", b"replaced") is False
    assert (ws / "hello.txt").read_bytes() == b"replaced"
    assert stat.S_IMODE(os.stat(ws / "hello.txt").st_mode) == 0o640
    assert atomic_write(ws, "n/e/w.txt", b"new") is True
    assert not [n for n in os.listdir(ws) if n.startswith(".goclaw-tmp")]


def test_atomic_write_failure_leaves_original_and_no_temp(ws, monkeypatch):
    def boom(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(paths.os, "fsync", boom)
    with pytest.raises(PathError):
        atomic_write(ws, "hello.txt", b"partial")
    monkeypatch.undo()
    assert (ws / "hello.txt").read_text() == "hello\n"
    assert sorted(os.listdir(ws)) == ["hello.txt", "sub"]


def test_atomic_write_over_symlink_refused_even_inside(ws):
    os.symlink("hello.txt", ws / "alias")
    assert_refused(atomic_write, ws, "alias", b"x")
    assert (ws / "hello.txt").read_text() == "hello\n"


# --- reads ----------------------------------------------------------------------------------
def test_open_for_read_ok(ws):
    assert read_fd(open_for_read(ws, "sub/file.txt")) == b"inside\n"
    assert read_fd(open_for_read(ws, str(ws / "hello.txt"))) == b"hello\n"


def test_open_for_read_missing(ws):
    assert "not found" in str(assert_refused(open_for_read, ws, "nope.txt"))
    assert_refused(open_for_read, ws, "nodir/nope.txt")


def test_open_dir(ws, tmp_path):
    fd = open_dir(ws, "sub")
    try:
        assert os.listdir(fd) == ["file.txt"]
    finally:
        os.close(fd)
    assert_refused(open_dir, ws, "hello.txt")
    assert_refused(open_dir, ws, "missing")
    fresh = tmp_path / "fresh"
    os.close(open_dir(fresh, ".", create=True))
    assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o700


# --- display --------------------------------------------------------------------------------
def test_relative_display(ws, outside, tmp_path):
    assert relative_display(ws, ws / "sub" / "file.txt") == "sub/file.txt"
    assert relative_display(ws, ws) == "."
    assert relative_display(ws, outside / "secret.txt") == "(outside workspace)"
    link = tmp_path / "wslink"
    os.symlink(ws, link)
    assert relative_display(link, ws.resolve() / "hello.txt") == "hello.txt"
    assert relative_display(link, link / "hello.txt") == "hello.txt"


# --- no probing of the host through error messages ------------------------------------------
def test_errors_outside_do_not_reveal_what_exists(ws, outside):
    (outside / "loop").symlink_to("loop")
    messages = set()
    for p in (
        "../outside/secret.txt/x",      # a file used as a directory
        "../outside/missing/x",         # nothing there
        "../outside/loop/x",            # a symlink loop outside
        "../outside/secret.txt",
        "../outside",
    ):
        err = assert_refused(resolve_in_workspace, ws, p, outside=outside)
        messages.add(str(err).replace(p, "<p>"))
        err_w = assert_refused(resolve_in_workspace, ws, p, for_write=True, outside=outside)
        messages.add(str(err_w).replace(p, "<p>"))
    assert messages == {"access denied: <p> is outside the workspace"}


# --- seeded fuzz: random symlink farms never let anything out -------------------------------
def _snapshot(root: Path) -> dict:
    snap = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            st = os.lstat(p)
            snap[str(p)] = (st.st_mode, st.st_size, st.st_mtime_ns, os.readlink(p) if os.path.islink(p) else None)
    return snap


def test_fuzz_symlink_farm_confinement(tmp_path):
    import random

    rng = random.Random(1234)
    ws = tmp_path / "ws"
    out = tmp_path / "out"
    for d in (ws / "a" / "b", ws / "c", out / "o"):
        d.mkdir(parents=True)
    (ws / "a" / "f.txt").write_text("in")
    (out / "o" / "secret").write_text(SECRET)
    targets = [str(out), str(out / "o"), str(out / "o" / "secret"), "../out", "../../out/o", "..", "../..",
               "a", "a/b", "c/../a", "f.txt", "nope", "/etc", "/", str(ws), str(ws / "a"), "x1", "x2", "x3",
               str(out / "o" / "new")]
    dirs = [ws, ws / "a", ws / "a" / "b", ws / "c"]
    for i in range(12):
        d = rng.choice(dirs)
        os.symlink(rng.choice(targets), d / f"x{i % 4}" if not (d / f"x{i % 4}").exists() and not os.path.islink(d / f"x{i % 4}") else d / f"y{i}")
    before = _snapshot(out)
    comps = ["..", ".", "a", "b", "c", "x0", "x1", "x2", "x3", "y5", "f.txt", "secret", "o", "out", "ws", "new"]
    root = str(ws.resolve())
    inside_inodes = None
    for _ in range(3000):
        p = "/".join(rng.choice(comps) for _ in range(rng.randint(1, 6)))
        if rng.random() < 0.1:
            p = str(ws) + "/" + p
        try:
            real = resolve_in_workspace(ws, p)
            assert is_within(root, str(real)), (p, real)
        except PathError:
            pass
        try:
            fd = open_for_read(ws, p)
            with os.fdopen(fd, "rb") as f:
                assert f.read() != SECRET.encode(), p
        except PathError:
            pass
        try:
            fd = open_for_write(ws, p, append=True)
            os.close(fd)
        except PathError:
            pass
    assert _snapshot(out) == before
    assert (out / "o" / "secret").read_text() == SECRET
