"""Context files in PostgreSQL (P10): read_file, write_file, edit and list_files route SOUL.md, IDENTITY.md, AGENTS.md,
TOOLS.md, HEARTBEAT.md, USER.md and BOOTSTRAP.md at the workspace root to the database, case by case per the routing
table (open / predefined agent × file × with / without a user), through the real tools and the real pipeline; every
write is versioned and can be restored; the disk is never touched for a routed name."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.factories import make_agent
from tools_app import pipeline
from tools_app.calls import ToolCall
from tools_app.context_files import (ContextFileRefused, context_file_provider_register,
                                     context_file_router)
from tools_app.models import Agent
from tools_app.models.context_files import (CONTEXT_FILE_NAMES, AgentContextFile, ContextFileVersion,
                                            UserContextFile)
from tools_app.services.context_files import (ContextActor, context_file_delete, context_file_restore,
                                              context_file_write)
from tools_app.workspace import workspace_routers

pytestmark = pytest.mark.django_db(transaction=True)  # file tools run in worker threads: their own connections

USER, OTHER = "u1", "u2"
ALL = frozenset(CONTEXT_FILE_NAMES)
# The routing table (docs/context-files.md), written out: which files are the user's own, and which the agent may
# write, for each kind of agent with and without a user id.
PER_USER = {("open", USER): ALL, ("open", ""): frozenset(),
            ("predefined", USER): frozenset({"USER.md", "BOOTSTRAP.md"}), ("predefined", ""): frozenset()}
WRITABLE = {("open", USER): ALL, ("open", ""): ALL,
            ("predefined", USER): frozenset({"USER.md", "BOOTSTRAP.md"}), ("predefined", ""): frozenset()}
CASES = [(kind, name, user) for kind in ("open", "predefined") for name in CONTEXT_FILE_NAMES for user in (USER, "")]
CASE_IDS = [f"{kind}-{name}-{'user' if user else 'nouser'}" for kind, name, user in CASES]
PERSON = ContextActor.system("test-setup")


def call(agent: Agent, tool: str, user: str = "", **arguments):
    return pipeline.execute(ToolCall(agent, tool, arguments, user_id=user))


def disk_files(agent: Agent) -> list[str]:
    root = Path(agent.workspace_path)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


def seed(agent: Agent, name: str, text: str, user: str = "") -> None:
    context_file_write(agent=agent, name=name, content=text, user_id=user, actor=PERSON)


def stored(agent: Agent, name: str, user: str = "") -> str | None:
    if user:
        return UserContextFile.objects.filter(agent=agent, user_id=user, name=name).values_list("content", flat=True).first()
    return AgentContextFile.objects.filter(agent=agent, name=name).values_list("content", flat=True).first()


@pytest.fixture
def agents(transactional_db) -> dict[str, Agent]:
    return {"open": make_agent(agent_type="open"), "predefined": make_agent(agent_type="predefined")}


def test_the_context_router_is_registered_first_and_claims_only_the_seven_names_at_the_root(agents):
    assert workspace_routers()[0] is context_file_router
    from tools_app.workspace import workspace_build

    ws = workspace_build(agents["open"], USER, {})
    for name in CONTEXT_FILE_NAMES:
        assert ws.router_for(name) == (context_file_router, name)
        assert ws.router_for(f"./{name}") == (context_file_router, name)
        assert ws.router_for(str(ws.root / name)) == (context_file_router, name)
        assert ws.router_for(f"docs/{name}") is None  # a subdirectory is the disk's
    for other in ("soul.md", "SOUL.txt", "MEMORY.md", "README.md", "SOUL.md/"):
        assert ws.router_for(other) is None or ws.router_for(other)[0] is not context_file_router


# --- the routing table, case by case ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind,name,user", CASES, ids=CASE_IDS)
def test_read_file_reads_the_users_own_file_or_the_agent_level_one_per_the_table(agents, kind, name, user):
    agent = agents[kind]
    seed(agent, name, f"agent-level {name}\n")
    seed(agent, name, f"{USER}'s {name}\n", USER)
    seed(agent, name, f"{OTHER}'s {name}\n", OTHER)
    outcome = call(agent, "read_file", user, path=name)
    assert outcome.status == "ok", outcome.for_llm
    mine = name in PER_USER[(kind, user)]
    assert outcome.for_llm == f"[{name} lines 1-1 of 1]\n" + (f"{USER}'s {name}\n" if mine else f"agent-level {name}\n")
    assert disk_files(agent) == []


@pytest.mark.parametrize("kind,name,user", CASES, ids=CASE_IDS)
def test_write_file_stores_where_the_table_says_or_is_refused(agents, kind, name, user):
    agent = agents[kind]
    seed(agent, name, "template\n")
    before = ContextFileVersion.objects.count()
    outcome = call(agent, "write_file", user, path=name, content=f"written {name}\n")
    if name not in WRITABLE[(kind, user)]:
        assert outcome.is_error and f"{name} is part of agent {agent.key}'s predefined configuration" in outcome.for_llm
        assert "read-only to the agent" in outcome.for_llm
        assert stored(agent, name) == "template\n" and not UserContextFile.objects.filter(agent=agent).exists()
        assert ContextFileVersion.objects.count() == before
    else:
        assert outcome.status == "ok", outcome.for_llm
        mine = name in PER_USER[(kind, user)]
        assert outcome.for_llm == f"wrote {len(name) + 9} bytes to {name} ({'created' if mine else 'replaced'})"
        assert stored(agent, name, user if mine else "") == f"written {name}\n"
        if mine:
            assert stored(agent, name) == "template\n"  # the template stays for everyone else
        version = ContextFileVersion.objects.latest("created_at", "id")
        assert (version.name, version.user_id, version.actor, version.content) == \
            (name, user if mine else "", f"agent:{agent.key}", f"written {name}\n")
    assert disk_files(agent) == []


@pytest.mark.parametrize("kind,name,user", CASES, ids=CASE_IDS)
def test_edit_reads_and_writes_through_the_same_routing(agents, kind, name, user):
    agent = agents[kind]
    seed(agent, name, f"hello {name}\nkeep this line\n")
    outcome = call(agent, "edit", user, path=name, old_string="hello", new_string="bye")
    if name not in WRITABLE[(kind, user)]:
        assert outcome.is_error and "read-only to the agent" in outcome.for_llm
        assert stored(agent, name) == f"hello {name}\nkeep this line\n"
    else:
        assert outcome.status == "ok" and outcome.for_llm == f"replaced 1 occurrence in {name}", outcome.for_llm
        mine = name in PER_USER[(kind, user)]
        # A user without their own file edits a copy of the agent-level template into their own file.
        assert stored(agent, name, user if mine else "") == f"bye {name}\nkeep this line\n"
        assert stored(agent, name) == (f"hello {name}\nkeep this line\n" if mine else f"bye {name}\nkeep this line\n")
        assert "bye" in call(agent, "read_file", user, path=name).for_llm
    assert disk_files(agent) == []


@pytest.mark.parametrize("kind,name,user", CASES, ids=CASE_IDS)
def test_list_files_shows_the_routed_file_at_the_root_with_the_size_the_agent_reads(agents, kind, name, user):
    agent = agents[kind]
    seed(agent, name, "x" * 10)
    seed(agent, name, "y" * 25, USER)
    outcome = call(agent, "list_files", user)
    assert outcome.status == "ok", outcome.for_llm
    size = 25 if name in PER_USER[(kind, user)] else 10
    assert outcome.for_llm == f"[workspace root: 1 entries]\n{name} ({size} B)"
    assert call(agent, "list_files", user, path=".", recursive=True).for_llm.endswith(f"{name} ({size} B)")
    assert disk_files(agent) == []


# --- the special cases -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["open", "predefined"])
def test_an_empty_bootstrap_write_deletes_the_users_row_and_the_template_never_comes_back(agents, kind):
    agent = agents[kind]
    seed(agent, "BOOTSTRAP.md", "Ask the user their name.\n")
    assert "Ask the user" in call(agent, "read_file", USER, path="BOOTSTRAP.md").for_llm  # the template, first run
    assert call(agent, "write_file", USER, path="BOOTSTRAP.md", content="Asked: Ada.\n").status == "ok"
    assert stored(agent, "BOOTSTRAP.md", USER) == "Asked: Ada.\n"
    done = call(agent, "write_file", USER, path="BOOTSTRAP.md", content="")
    assert done.status == "ok", done.for_llm
    assert stored(agent, "BOOTSTRAP.md", USER) is None and stored(agent, "BOOTSTRAP.md") == "Ask the user their name.\n"
    deletion = ContextFileVersion.objects.filter(agent=agent, user_id=USER, name="BOOTSTRAP.md").first()
    assert deletion.deleted and deletion.actor == f"agent:{agent.key}" and "-Asked: Ada." in deletion.diff
    read = call(agent, "read_file", USER, path="BOOTSTRAP.md")
    assert read.is_error and read.for_llm == "file not found: BOOTSTRAP.md"
    assert "BOOTSTRAP.md" not in call(agent, "list_files", USER).for_llm
    # Another user has not run yet: they still get the template.
    assert "Ask the user" in call(agent, "read_file", OTHER, path="BOOTSTRAP.md").for_llm
    assert disk_files(agent) == []


def test_an_empty_bootstrap_write_deletes_the_users_row_even_when_they_never_had_one(agents):
    agent = agents["open"]
    seed(agent, "BOOTSTRAP.md", "first run\n")
    assert call(agent, "write_file", USER, path="BOOTSTRAP.md", content="").status == "ok"
    assert call(agent, "read_file", USER, path="BOOTSTRAP.md").for_llm == "file not found: BOOTSTRAP.md"


def test_without_a_user_an_empty_bootstrap_write_keeps_an_empty_agent_level_file(agents):
    agent = agents["open"]
    seed(agent, "BOOTSTRAP.md", "first run\n")
    assert call(agent, "write_file", "", path="BOOTSTRAP.md", content="").status == "ok"
    assert stored(agent, "BOOTSTRAP.md") == ""
    assert call(agent, "read_file", "", path="BOOTSTRAP.md").for_llm == "[BOOTSTRAP.md: empty file (0 lines)]"


def test_an_open_agents_user_reads_the_agent_level_template_until_they_write_their_own(agents):
    agent = agents["open"]
    seed(agent, "SOUL.md", "I am the template.\n")
    assert call(agent, "read_file", USER, path="SOUL.md").for_llm.endswith("I am the template.\n")
    assert call(agent, "write_file", USER, path="SOUL.md", content="I am Ada's.\n", append=False).status == "ok"
    assert call(agent, "read_file", USER, path="SOUL.md").for_llm.endswith("I am Ada's.\n")
    assert call(agent, "read_file", OTHER, path="SOUL.md").for_llm.endswith("I am the template.\n")
    assert call(agent, "read_file", "", path="SOUL.md").for_llm.endswith("I am the template.\n")
    missing = call(agent, "read_file", USER, path="IDENTITY.md")
    assert missing.is_error and missing.for_llm == "file not found: IDENTITY.md"
    # Appending to the template starts the user's own file from the template's text.
    assert call(agent, "write_file", OTHER, path="SOUL.md", content="And Bob's.\n", append=True).status == "ok"
    assert stored(agent, "SOUL.md", OTHER) == "I am the template.\nAnd Bob's.\n"


def test_a_predefined_agents_configuration_is_refused_with_a_clear_message_that_is_a_permission_error(agents):
    agent = agents["predefined"]
    seed(agent, "SOUL.md", "Be kind.\n")
    for tool, args in (("write_file", {"content": "Be rude.\n"}), ("edit", {"old_string": "kind", "new_string": "rude"}),
                       ("write_file", {"content": "!", "append": True})):
        outcome = call(agent, tool, USER, path="SOUL.md", **args)
        assert outcome.is_error and outcome.status == "error"
        assert outcome.for_llm.startswith(f"SOUL.md is part of agent {agent.key}'s predefined configuration and is "
                                          "read-only to the agent")
        assert "Ask an operator" in outcome.for_llm
    assert stored(agent, "SOUL.md") == "Be kind.\n" and ContextFileVersion.objects.filter(actor_kind="agent").count() == 0
    from tools_app.workspace import workspace_build

    with pytest.raises(PermissionError):
        context_file_router.write(workspace_build(agent, USER, {}), "SOUL.md", "x")
    assert issubclass(ContextFileRefused, PermissionError)


def test_a_disk_file_with_a_routed_name_is_never_read_or_touched(agents):
    agent = agents["predefined"]
    root = Path(agent.workspace_path)
    (root / "USER.md").write_text("on disk\n")
    (root / "docs").mkdir()
    (root / "docs" / "SOUL.md").write_text("a subdirectory's SOUL.md is an ordinary file\n")
    seed(agent, "USER.md", "in the database\n", USER)
    assert call(agent, "read_file", USER, path="USER.md").for_llm.endswith("in the database\n")
    assert call(agent, "write_file", USER, path="USER.md", content="changed\n").status == "ok"
    assert (root / "USER.md").read_text() == "on disk\n" and stored(agent, "USER.md", USER) == "changed\n"
    assert call(agent, "read_file", USER, path="docs/SOUL.md").for_llm.endswith("ordinary file\n")
    assert call(agent, "write_file", USER, path="docs/SOUL.md", content="disk\n").status == "ok"
    assert (root / "docs" / "SOUL.md").read_text() == "disk\n" and stored(agent, "SOUL.md") is None


def test_content_the_database_cannot_hold_is_refused_as_a_tool_error(agents):
    agent = agents["open"]
    outcome = call(agent, "write_file", USER, path="SOUL.md", content="a\x00b")
    assert outcome.is_error and "NUL" in outcome.for_llm and stored(agent, "SOUL.md", USER) is None


# --- versions and restore --------------------------------------------------------------------------------------------
def test_every_write_is_versioned_with_who_the_previous_hash_and_a_diff_and_a_restore_is_a_new_version(agents,
                                                                                                     django_user_model):
    agent = agents["open"]
    assert call(agent, "write_file", "", path="SOUL.md", content="I am calm.\nI help.\n").status == "ok"
    assert call(agent, "edit", "", path="SOUL.md", old_string="calm", new_string="furious").status == "ok"
    person = django_user_model.objects.create_user("ops", is_staff=True)
    history = list(ContextFileVersion.objects.filter(agent=agent, name="SOUL.md", user_id="").order_by("created_at", "id"))
    assert [v.actor for v in history] == [f"agent:{agent.key}"] * 2
    first, second = history
    assert first.previous_hash == "" and first.diff.startswith("--- /dev/null\n+++ b/SOUL.md\n")
    assert second.previous_hash == hashlib.sha256(b"I am calm.\nI help.\n").hexdigest()
    assert "-I am calm.\n+I am furious.\n" in second.diff and second.content == "I am furious.\nI help.\n"
    # The operator puts back what the agent overwrote: a versioned write by the person, naming the version.
    change = context_file_restore(version=first, actor=ContextActor.of_person(person))
    assert stored(agent, "SOUL.md") == "I am calm.\nI help.\n"
    assert (change.version.actor, change.version.restored_from_id) == ("person:ops", first.pk)
    assert "-I am furious.\n+I am calm.\n" in change.version.diff
    # The same text again is not a change; a deletion is versioned and restorable too.
    assert context_file_write(agent=agent, name="SOUL.md", content="I am calm.\nI help.\n", actor=PERSON).version is None
    deleted = context_file_delete(agent=agent, name="SOUL.md", actor=ContextActor.of_person(person))
    assert deleted.deleted and stored(agent, "SOUL.md") is None
    assert call(agent, "read_file", "", path="SOUL.md").for_llm == "file not found: SOUL.md"
    back = context_file_restore(version=change.version, actor=ContextActor.of_person(person))
    assert back.created and stored(agent, "SOUL.md") == "I am calm.\nI help.\n"
    assert ContextFileVersion.objects.filter(agent=agent, name="SOUL.md").count() == 5


def test_context_file_providers_reject_stored_names_and_replace_by_name(agents, monkeypatch):
    from tools_app import selectors_context

    # the apps' own providers (teams_app's TEAM.md, …) come back after the test
    monkeypatch.setattr(selectors_context, "_providers", ())
    for bad in ("SOUL.md", "", "team/TEAM.md"):
        with pytest.raises(ValueError):
            context_file_provider_register(bad, lambda agent, user_id: "x")
    context_file_provider_register("TEAM.md", lambda agent, user_id: "one")
    context_file_provider_register("TEAM.md", lambda agent, user_id: "two")
    files = selectors_context.agent_context_for(agents["open"], USER).files
    assert [(f.name, f.content, f.source) for f in files] == [("TEAM.md", "two", "generated")]
