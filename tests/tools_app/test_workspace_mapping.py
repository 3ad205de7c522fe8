"""Per-user workspace directories of open agents: no two distinct user ids ever share one, names are safe on
case-insensitive and normalising file systems, and directories made under the old names are adopted (P5 §3)."""
import hashlib
import os
import random
import unicodedata

import pytest

from tests.factories import make_agent
from tools_app import pipeline
from tools_app.choices import AgentType
from tools_app.workspace import EMPTY_USER_DIRNAME, legacy_workspace_dirname, user_workspace_dirname, workspace_for

GITHUB = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"


def hashed(user_id):
    return "_h-" + hashlib.sha256(user_id.encode("utf-8", "surrogatepass")).hexdigest()


def tricky_ids():
    """Ids chosen to collide under naive mappings, plus a seeded random sample."""
    ids = ["", "_default", "_anonymous", "default", "alice", "Alice", "ALICE", "aLiCe", "bob@example.com",
           "user-42", "42", "a.b", "a..b", "a.", ".", "..", "../x", "a/b", "a\\b", "a b", " alice", "alice ",
           "é", "e\u0301", "É", "straße", "STRASSE", "ǅ", "ﬁ", "fi", "\u212a", "k", "K", "\x00", "a\x00", "\ud800",
           "x" * 100, "x" * 101, "y" * 10_000, "y" * 10_001, GITHUB, GITHUB.lower(), "glpat-" + "a1" * 12]
    # Ids shaped like the names other ids get, old and new: they must not take those directories.
    for victim in ["", "_default", "Alice Smith", "alice", "é"]:
        ids += [legacy_workspace_dirname(victim), user_workspace_dirname(victim), hashed(victim),
                hashed(victim).upper(), "u-" + hashlib.sha256(victim.encode("utf-8", "surrogatepass")).hexdigest()]
    rnd = random.Random(20261122)
    alphabet = "abcAB_-.@/ \x00é\u0301ß0123456789~+"
    ids += ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 12))) for _ in range(3000)]
    return list(dict.fromkeys(ids))


def test_the_mapping_is_injective_over_many_tricky_ids():
    ids = tricky_ids()
    names = [user_workspace_dirname(uid) for uid in ids]
    assert len(set(names)) == len(ids)


def test_names_stay_distinct_on_case_insensitive_and_normalising_file_systems():
    ids = tricky_ids()
    folded = {unicodedata.normalize("NFD", user_workspace_dirname(uid)).casefold() for uid in ids}
    assert len(folded) == len(ids)


def test_every_name_is_a_single_safe_path_component():
    for uid in tricky_ids():
        name = user_workspace_dirname(uid)
        assert name not in ("", ".", "..") and "/" not in name and "\\" not in name and "\x00" not in name
        assert name.isascii() and name.isprintable() and len(name.encode()) <= 255


def test_ordinary_ids_keep_readable_names_and_the_rest_are_hashed_or_reserved():
    for uid in ["alice", "bob@example.com", "user-42", "42", "a.b"]:
        assert user_workspace_dirname(uid) == uid
    assert user_workspace_dirname("") == EMPTY_USER_DIRNAME != user_workspace_dirname("_default")
    for uid in ["Alice", "_default", "a b", "é", "a..b", "a.", "x" * 101, GITHUB.lower(), "glpat-" + "a1" * 12]:
        assert user_workspace_dirname(uid) == hashed(uid)
    # Reserved names start with "_", which the readable form never does.
    assert all(not user_workspace_dirname(uid).startswith("_") for uid in ["alice", "u-1234", "h-x"])


def test_ids_shaped_like_hashed_names_do_not_alias_them():
    victim_name = user_workspace_dirname("Alice Smith")
    for impostor in [victim_name, victim_name[1:], legacy_workspace_dirname("Alice Smith")]:
        assert user_workspace_dirname(impostor) != victim_name


def test_empty_and_default_user_ids_get_separate_workspaces_through_the_pipeline(db, tmp_path):
    agent = make_agent(agent_type=AgentType.OPEN, workspace=str(tmp_path))
    for user_id, text in [("", "anonymous"), ("_default", "default")]:
        outcome = pipeline.execute(pipeline.ToolCall(agent=agent, tool="write_file", user_id=user_id,
                                                     arguments={"path": "who.txt", "content": text}))
        assert outcome.status == "ok", outcome.for_llm
    assert (tmp_path / EMPTY_USER_DIRNAME / "who.txt").read_text() == "anonymous"
    assert (tmp_path / hashed("_default") / "who.txt").read_text() == "default"


def test_a_credential_shaped_user_id_never_names_a_directory(db, tmp_path):
    token = "glpat-" + "a1" * 12  # lower-case, readable characters only: still not a directory name
    agent = make_agent(agent_type=AgentType.OPEN, workspace=str(tmp_path))
    outcome = pipeline.execute(pipeline.ToolCall(agent=agent, tool="write_file", user_id=token,
                                                 arguments={"path": "x.txt", "content": "x"}))
    assert outcome.status == "ok"
    assert os.listdir(tmp_path) == [hashed(token)]


# --- directories made under the old names ------------------------------------------------------------------
@pytest.fixture
def open_agent(db, tmp_path):
    return make_agent(agent_type=AgentType.OPEN, workspace=str(tmp_path))


def old_workspace(base, user_id, text="mine"):
    path = base / legacy_workspace_dirname(user_id)
    path.mkdir()
    (path / "notes.txt").write_text(text)
    return path


def test_an_ordinary_id_keeps_its_old_directory(open_agent, tmp_path):
    old = old_workspace(tmp_path, "alice")
    assert workspace_for(open_agent, "alice") == old and (old / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("user_id", ["Alice", "Alice Smith", "é", GITHUB.lower()])
def test_an_id_whose_name_changed_finds_its_files_moved_on_first_use(open_agent, tmp_path, user_id):
    old = old_workspace(tmp_path, user_id)
    new = workspace_for(open_agent, user_id)
    assert new == tmp_path / user_workspace_dirname(user_id) != old
    assert (new / "notes.txt").read_text() == "mine" and not old.exists()
    assert workspace_for(open_agent, user_id) == new  # idempotent


def test_the_old_shared_default_directory_goes_to_the_empty_user_id(open_agent, tmp_path):
    old = old_workspace(tmp_path, "")
    assert legacy_workspace_dirname("_default") == old.name  # the old aliasing
    assert not (workspace_for(open_agent, "_default") / "notes.txt").exists()
    assert (workspace_for(open_agent, "") / "notes.txt").read_text() == "mine"


def test_a_hashed_id_takes_its_old_directory_back_from_an_impostor_id(open_agent, tmp_path):
    old = old_workspace(tmp_path, "Alice Smith")
    impostor = old.name  # "u-<24 hex>" was a readable id, mapped to the same directory before
    assert workspace_for(open_agent, impostor) == old  # before the owner's first use: unchanged, nothing moved
    assert (workspace_for(open_agent, "Alice Smith") / "notes.txt").read_text() == "mine"
    assert not (workspace_for(open_agent, impostor) / "notes.txt").exists()


def test_an_old_directory_that_is_not_a_directory_is_left_alone(open_agent, tmp_path):
    target = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    target.mkdir()
    (tmp_path / "Alice").symlink_to(target)
    new = workspace_for(open_agent, "Alice")
    assert not new.exists() and (tmp_path / "Alice").is_symlink()


def test_a_mixed_case_old_directory_shared_on_a_case_insensitive_file_system_is_not_moved(open_agent, tmp_path):
    old = old_workspace(tmp_path, "Alice")
    (tmp_path / "alice").symlink_to(old)  # what a case-insensitive file system shows: one directory, both names
    new = workspace_for(open_agent, "Alice")
    assert not new.exists() and (old / "notes.txt").exists()


def test_an_existing_new_directory_wins_over_an_old_one(open_agent, tmp_path):
    old = old_workspace(tmp_path, "Alice", text="old")
    new = tmp_path / user_workspace_dirname("Alice")
    new.mkdir()
    assert workspace_for(open_agent, "Alice") == new and (old / "notes.txt").read_text() == "old"
