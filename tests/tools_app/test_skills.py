"""Skills: an agent publishes a workspace directory holding a SKILL.md (front matter in a small safe YAML subset, its
text files under caps, the workspace's path rules), finds skills with BM25 (best first, with the words that matched),
loads one (the use is counted); each agent sees the global skills and its own; staff manage them in the API and the
admin, where usage counts come with the list query."""
from __future__ import annotations

import os

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from tests.factories import make_agent
from tools_app import pipeline
from tools_app.models import ToolInvocation
from tools_app.models.skills import Skill, SkillUse
from tools_app.services import skills as svc
from tools_app.skills import skill_front_matter_parse, skill_search

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("counters_reread_only_after_a_change")]  # counts queries

FRONT = "---\nname: PDF Tools\ndescription: Extract text and tables from PDF documents\ntags: [pdf, documents]\n---\n"
BODY = "# PDF tools\n\n1. Run scripts/extract.py on the file.\n"


def write_skill(agent, rel: str, text: str = FRONT + BODY, files: dict[str, str | bytes] | None = None):
    """A skill directory in `agent`'s workspace; returns its path."""
    directory = agent.workspace_path / rel
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "SKILL.md").write_text(text)
    for path, content in (files or {}).items():
        target = directory / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    return directory


def call(agent, tool: str, args: dict, **context):
    return pipeline.execute(pipeline.ToolCall(agent, tool, args, **context))


def publish_global(name: str, description: str, tags=(), content: str = "Steps.", **kw) -> Skill:
    return svc.skill_publish(agent=None, name=name, description=description, tags=tags, content=content,
                             published_by="staff:test", **kw)[0]


# --- publishing ------------------------------------------------------------------------------------------------------
def test_publishing_a_directory_stores_its_front_matter_instructions_and_text_files(agent):
    write_skill(agent, "skills/pdf", files={"scripts/extract.py": "print('text')\n", "templates/report.md": "# R\n",
                                            "logo.png": b"\x89PNG\r\n\x1a\n\x00\x00binary", ".cache/junk": "x"})
    outcome = call(agent, "publish_skill", {"path": "skills/pdf"})
    assert outcome.status == "ok", outcome.for_llm
    assert "published skill pdf-tools version 1" in outcome.for_llm and "logo.png (binary)" in outcome.for_llm
    skill = Skill.objects.get()
    assert (skill.slug, skill.name, skill.agent, skill.version) == ("pdf-tools", "PDF Tools", agent, 1)
    assert skill.description == "Extract text and tables from PDF documents"
    assert skill.tags == ["pdf", "documents"] and skill.content == BODY.rstrip("\n")
    assert skill.files == {"scripts/extract.py": "print('text')\n", "templates/report.md": "# R\n"}
    assert (skill.source_path, skill.published_by) == ("skills/pdf", f"agent:{agent.key}")


def test_the_path_may_name_the_skill_md_itself(agent):
    write_skill(agent, "tools/pdf")
    assert call(agent, "publish_skill", {"path": "tools/pdf/SKILL.md"}).status == "ok"
    assert Skill.objects.get().source_path == "tools/pdf"


def test_republishing_the_same_name_bumps_the_version_and_replaces_content_and_files(agent):
    write_skill(agent, "skills/pdf", files={"old.txt": "old"})
    call(agent, "publish_skill", {"path": "skills/pdf"})
    svc.skill_update(actor=None, skill=Skill.objects.get(), enabled=False)  # an operator's choice survives
    (agent.workspace_path / "skills/pdf/old.txt").unlink()
    write_skill(agent, "skills/pdf", FRONT + "New steps.\n", files={"new.txt": "new"})
    outcome = call(agent, "publish_skill", {"path": "skills/pdf"})
    assert "republished skill pdf-tools version 2" in outcome.for_llm
    skill = Skill.objects.get()
    assert (skill.version, skill.content, skill.files, skill.enabled) == (2, "New steps.", {"new.txt": "new"}, False)


def test_front_matter_accepts_quoting_block_scalars_lists_comments_and_ignores_other_keys():
    front = skill_front_matter_parse(
        "\ufeff---\n# a comment\nname: \"PDF: Tools\"\ndescription: >\n  Extract text from PDFs\n  and merge them.\n"
        "tags:\n  - pdf\n  - Documents\nlicense: MIT\nmetadata:\n  author: someone\n  nested: [1, [2]]\n---\n"
        "# PDF tools\n\nSteps.\n")
    assert (front.name, front.description) == ("PDF: Tools", "Extract text from PDFs and merge them.")
    assert front.tags == ("pdf", "documents") and front.ignored_keys == ("license", "metadata")
    assert front.body == "# PDF tools\n\nSteps."
    other = skill_front_matter_parse("---\nname: 'It''s git'  # comment\ndescription: plain text # a comment\n"
                                     "  continued here\ntags: [a, \"b, c\", 'd']\n---\nBody")
    assert (other.name, other.description, other.tags) == ("It's git", "plain text continued here", ("a", "b, c", "d"))


@pytest.mark.parametrize("text, problem", [
    ("name: x\ndescription: y\n\nbody", "must begin with front matter"),
    ("---\nname: x\ndescription: y\nbody", "never closed"),
    ("---\ndescription: y\n---\nbody", "needs a non-empty 'name"),
    ("---\nname: x\n---\nbody", "needs a non-empty 'description"),
    ("---\nname: x\ndescription: y\njust some words\n---\nbody", "line 4: expected 'key: value'"),
    ("---\nname: !!python/object/apply:os.system ['touch pwned']\ndescription: y\n---\nbody", "not supported"),
    ("---\nname: &a x\ndescription: *a\n---\nbody", "not supported"),
    ("---\nname: x\nname: z\ndescription: y\n---\nbody", "line 3: name is given twice"),
    ("---\nname: x\ndescription: y\n---\n\n", "no instructions"),
    ("---\nname: \"x\ndescription: y\n---\nbody", "line 2: name: the double-quoted value is not closed"),
    ("---\nname: x\ndescription: y\ntags: [a, [b]]\n---\nbody", "nested lists"),
    ("---\nname: '***'\ndescription: y\n---\nbody", "ASCII letters or digits"),
    ("---\nname: x\ndescription: y\ntags: [" + ", ".join(f"t{i}" for i in range(21)) + "]\n---\nbody", "at most 20 tags"),
])
def test_bad_front_matter_is_refused_naming_the_problem(text, problem):
    with pytest.raises(svc.SkillInvalid) as caught:
        skill_front_matter_parse(text)
    assert caught.value.message.startswith("SKILL.md: ") and problem in caught.value.message


def test_a_bad_skill_md_is_a_tool_error_and_stores_nothing(agent):
    write_skill(agent, "broken", "---\nname: x\ndescription: y\nno colon here\n---\nbody\n")
    outcome = call(agent, "publish_skill", {"path": "broken"})
    assert outcome.is_error and "SKILL.md: line 4: expected 'key: value'" in outcome.for_llm
    write_skill(agent, "empty-dir-without-skill").joinpath("SKILL.md").unlink()
    assert "no SKILL.md in empty-dir-without-skill/" in call(agent, "publish_skill",
                                                               {"path": "empty-dir-without-skill"}).for_llm
    assert not Skill.objects.exists()


def test_paths_outside_the_workspace_symlinks_and_denied_paths_are_refused(tmp_path):
    agent = make_agent(other_config={"denied_paths": ["private/"]})
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "SKILL.md").write_text(FRONT + BODY)
    write_skill(agent, "private/skill")
    os.symlink(outside, agent.workspace_path / "linked")
    for path, message in [("../outside", "outside the workspace"), (str(outside), "outside the workspace"),
                          ("skills/../../outside", "outside the workspace"), ("private/skill", "protected location"),
                          ("private/skill/SKILL.md", "protected location"), ("linked", "outside the workspace")]:
        outcome = call(agent, "publish_skill", {"path": path})
        assert outcome.is_error and message in outcome.for_llm, (path, outcome.for_llm)
    assert not Skill.objects.exists()


def test_denied_files_and_symlinks_inside_a_skill_directory_are_never_stored(tmp_path):
    agent = make_agent(other_config={"denied_paths": ["skills/pdf/secrets/"]})
    planted = tmp_path / "planted.txt"
    planted.write_text("PLANTED-OUTSIDE-TEXT")
    directory = write_skill(agent, "skills/pdf", files={"secrets/key.txt": "DENIED-TEXT", "ok.txt": "fine"})
    os.symlink(planted, directory / "escape.txt")
    outcome = call(agent, "publish_skill", {"path": "skills/pdf"})
    assert outcome.status == "ok" and "escape.txt (symlink)" in outcome.for_llm
    skill = Skill.objects.get()
    assert skill.files == {"ok.txt": "fine"}
    assert "DENIED-TEXT" not in str(skill.files) and "PLANTED-OUTSIDE-TEXT" not in str(skill.files)


def test_files_over_the_caps_are_refused(agent):
    write_skill(agent, "big", files={"huge.txt": "x" * (svc.FILE_MAX_BYTES + 1)})
    assert "huge.txt is larger than 256 KB" in call(agent, "publish_skill", {"path": "big"}).for_llm
    write_skill(agent, "many", files={f"f{i:03}.txt": "x" for i in range(svc.FILES_MAX + 1)})
    assert f"more than {svc.FILES_MAX} files" in call(agent, "publish_skill", {"path": "many"}).for_llm
    write_skill(agent, "long", FRONT + "x" * (svc.CONTENT_MAX_BYTES + 1))
    assert "SKILL.md is larger than 256 KB" in call(agent, "publish_skill", {"path": "long"}).for_llm
    assert not Skill.objects.exists()


# --- searching -------------------------------------------------------------------------------------------------------
CORPUS = [
    ("PDF Tools", "Extract text and tables from PDF documents, merge and split PDF files", ["pdf", "documents"]),
    ("Git Workflow", "Create branches, write commit messages and open pull requests", ["git", "vcs"]),
    ("CSV Analysis", "Load CSV spreadsheets, compute summary statistics and plot charts", ["data", "csv"]),
    ("Web Scraping", "Fetch web pages and parse HTML into structured records", ["http", "html"]),
    ("Docker Deploy", "Build container images and deploy services with docker compose", ["docker", "containers"]),
    ("SQL Migrations", "Write and review PostgreSQL schema migrations safely", ["database", "postgres"]),
    ("Image Resize", "Resize, crop and convert images between PNG and JPEG", ["images"]),
    ("Email Drafting", "Draft polite customer support emails and replies", ["writing", "email"]),
    ("Unit Testing", "Write pytest unit tests with fixtures and parametrization", ["python", "testing"]),
    ("Log Triage", "Search application logs for errors and summarise incidents", ["logs", "ops"]),
    ("Translation", "Translate documents between English, French and German", ["language"]),
    ("Calendar Scheduling", "Find meeting slots and send calendar invitations", ["calendar", "meetings"]),
]


@pytest.fixture
def corpus():
    return [publish_global(name, description, tags) for name, description, tags in CORPUS]


@pytest.mark.parametrize("query, best", [
    ("extract tables from a pdf", "pdf-tools"),
    ("write a commit message", "git-workflow"),
    ("plot charts from spreadsheet data", "csv-analysis"),
    ("resize png images", "image-resize"),
    ("deploy containers", "docker-deploy"),
    ("postgres schema migration", "sql-migrations"),
    ("errors in the logs", "log-triage"),
    ("schedule meetings", "calendar-scheduling"),
    ("translate into french", "translation"),
    ("draft a reply to a customer", "email-drafting"),
    ("parsing html pages", "web-scraping"),
    ("pytest fixtures", "unit-testing"),
])
def test_skill_search_puts_the_best_skill_first(corpus, agent, query, best):
    matches = skill_search(agent.pk, query, 5)
    assert matches and matches[0].entry.slug == best, [(m.entry.slug, round(m.score, 2)) for m in matches]


def test_skill_search_answers_with_slugs_descriptions_and_the_words_that_matched(corpus, agent):
    outcome = call(agent, "skill_search", {"query": "extract tables from a pdf", "max_results": 2})
    assert outcome.status == "ok", outcome.for_llm
    lines = outcome.for_llm.splitlines()
    assert lines[0].startswith("[") and lines[1].startswith("1. pdf-tools — PDF Tools (v1) [pdf, documents]")
    assert 'why: matched "extract" in description; "tables" in description; "pdf" in name, tags, description' \
        in outcome.for_llm
    assert "3. " not in outcome.for_llm
    nothing = call(agent, "skill_search", {"query": "quantum chromodynamics"})
    assert nothing.status == "ok" and "no skill matches" in nothing.for_llm and "12 skills searched" in nothing.for_llm
    assert call(agent, "skill_search", {"query": "the of and"}).is_error


def test_a_skill_change_reaches_the_search_index_at_once(corpus, agent):
    assert "kubernetes" not in [m.entry.slug for m in skill_search(agent.pk, "kubernetes helm charts", 3)]
    publish_global("Kubernetes", "Roll out helm charts to a kubernetes cluster", ["k8s"])
    assert skill_search(agent.pk, "kubernetes helm charts", 3)[0].entry.slug == "kubernetes"
    svc.skill_set_enabled(actor=None, skills=Skill.objects.filter(slug="kubernetes"), enabled=False)
    assert "kubernetes" not in [m.entry.slug for m in skill_search(agent.pk, "kubernetes helm", 3)]


# --- using -----------------------------------------------------------------------------------------------------------
def test_use_skill_returns_the_instructions_and_file_list_and_records_the_use(agent):
    write_skill(agent, "skills/pdf", files={"scripts/extract.py": "print('text')\n"})
    call(agent, "publish_skill", {"path": "skills/pdf"})
    outcome = call(agent, "use_skill", {"name": "PDF Tools"}, user_id="alice", session_key="chat-7")
    assert outcome.status == "ok", outcome.for_llm
    assert outcome.for_llm.startswith("[skill pdf-tools v1: PDF Tools]\n# PDF tools")
    assert "scripts/extract.py (14 B)" in outcome.for_llm
    use = SkillUse.objects.get()
    assert (use.skill.slug, use.agent_key, use.user_id, use.session_key) == ("pdf-tools", agent.key, "alice", "chat-7")
    assert ToolInvocation.objects.filter(tool_name="use_skill", status="ok").count() == 1  # and the audit row
    one_file = call(agent, "use_skill", {"name": "pdf-tools", "file": "scripts/extract.py"})
    assert one_file.for_llm == "[skill pdf-tools v1: scripts/extract.py]\nprint('text')\n"
    assert "has no file 'nope.py'" in call(agent, "use_skill", {"name": "pdf-tools", "file": "nope.py"}).for_llm
    assert SkillUse.objects.count() == 1  # reading a file is not another use
    missing = call(agent, "use_skill", {"name": "no-such-skill"})
    assert missing.is_error and "no skill named 'no-such-skill'" in missing.for_llm


def test_each_agent_sees_the_global_skills_and_its_own_only():
    alice, bob = make_agent(), make_agent()
    write_skill(alice, "skills/pdf")
    call(alice, "publish_skill", {"path": "skills/pdf"})
    publish_global("Git Workflow", "Commit and branch", ["git"], content="global git steps")
    write_skill(bob, "skills/git", "---\nname: Git Workflow\ndescription: Bob's own git\n---\nbob git steps\n")
    call(bob, "publish_skill", {"path": "skills/git"})
    assert [m.entry.slug for m in skill_search(alice.pk, "pdf", 5)] == ["pdf-tools"]
    assert skill_search(bob.pk, "pdf", 5) == []
    assert call(bob, "use_skill", {"name": "pdf-tools"}).is_error
    # Bob's own skill shadows the global one of the same slug, for Bob only.
    assert "bob git steps" in call(bob, "use_skill", {"name": "git-workflow"}).for_llm
    assert "global git steps" in call(alice, "use_skill", {"name": "git-workflow"}).for_llm
    assert [(m.entry.slug, m.entry.own) for m in skill_search(bob.pk, "git", 5)] == [("git-workflow", True)]
    svc.skill_set_enabled(actor=None, skills=Skill.objects.filter(agent=alice), enabled=False)
    assert call(alice, "use_skill", {"name": "pdf-tools"}).is_error


def test_the_skill_tools_are_a_tool_source_in_the_skills_group(agent):
    from tools_app.toolsets import reserved_tool_names, toolset_for

    tools = toolset_for(agent)
    assert tools.expand(["group:skills"]) == {"publish_skill", "skill_search", "use_skill"}
    assert {"publish_skill", "skill_search", "use_skill"} <= reserved_tool_names()


# --- API -------------------------------------------------------------------------------------------------------------
def test_staff_list_skills_with_usage_counts_and_agents_list_the_ones_they_see(staff_api, api, agent):
    other = make_agent()
    own = svc.skill_publish(agent=agent, name="Mine", description="my skill", content="x")[0]
    publish_global("Shared", "for all", content="y")
    svc.skill_publish(agent=other, name="Theirs", description="not yours", content="z")
    for _ in range(3):
        svc.skill_use_record(skill=own, agent_key=agent.key)
    staff = staff_api.get("/api/v1/skills").json()["results"]
    assert [(s["slug"], s["agent"], s["use_count"]) for s in staff] == [
        ("mine", agent.key, 3), ("shared", None, 0), ("theirs", other.key, 0)]
    assert "content" not in staff[0]
    assert [s["slug"] for s in staff_api.get(f"/api/v1/skills?agent={other.key}").json()["results"]] == ["theirs"]
    assert [s["slug"] for s in api.get("/api/v1/skills").json()["results"]] == ["mine", "shared"]
    assert api.get("/api/v1/skills/mine").json()["content"] == "x"
    assert api.get("/api/v1/skills/theirs").status_code == 404


def test_the_skill_list_runs_the_same_queries_for_3_and_30_skills(staff_api, django_assert_num_queries):
    def add(start, n):
        for i in range(start, start + n):
            skill = publish_global(f"Skill {i}", "d")
            svc.skill_use_record(skill=skill, agent_key="a")

    add(0, 3)
    with CaptureQueriesContext(connection) as queries:
        staff_api.get("/api/v1/skills")
    add(3, 27)
    with django_assert_num_queries(len(queries)):
        assert len(staff_api.get("/api/v1/skills").json()["results"]) == 30


def test_staff_edit_disable_and_delete_a_skill_and_agents_may_not(staff_api, api, agent):
    publish_global("PDF Tools", "Extract text", ["pdf"])
    response = staff_api.patch("/api/v1/skills/pdf-tools", {"description": "Extract text and tables",
                                                              "tags": ["PDF", "docs"], "enabled": False}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["version"], body["enabled"], body["tags"], body["description"]) == (
        2, False, ["pdf", "docs"], "Extract text and tables")
    assert call(agent, "use_skill", {"name": "pdf-tools"}).is_error  # disabled: invisible
    assert api.patch("/api/v1/skills/pdf-tools", {"enabled": True}, format="json").status_code == 403
    assert api.delete("/api/v1/skills/pdf-tools").status_code == 403
    assert APIClient().get("/api/v1/skills/pdf-tools").status_code == 401
    assert staff_api.delete("/api/v1/skills/pdf-tools").status_code == 204
    assert not Skill.objects.exists()


def test_a_slug_in_several_scopes_must_be_named_and_a_scope_move_may_not_collide(staff_api, agent):
    publish_global("Git", "global git")
    svc.skill_publish(agent=agent, name="Git", description="agent git", content="x")
    ambiguous = staff_api.get("/api/v1/skills/git")
    assert ambiguous.status_code == 409 and ambiguous.json()["error"]["code"] == "skill_ambiguous"
    assert staff_api.get("/api/v1/skills/git?agent=").json()["description"] == "global git"
    assert staff_api.get(f"/api/v1/skills/git?agent={agent.key}").json()["description"] == "agent git"
    moved = staff_api.patch(f"/api/v1/skills/git?agent={agent.key}", {"agent": None}, format="json")
    assert moved.status_code == 409 and moved.json()["error"]["code"] == "skill_slug_taken"
    unknown = staff_api.patch("/api/v1/skills/git?agent=", {"agent": "nobody"}, format="json")
    assert unknown.status_code == 400 and unknown.json()["error"]["code"] == "skill_invalid"


# --- admin -----------------------------------------------------------------------------------------------------------
ADMIN = "/admin/tools_app/skill/"


def test_the_admin_list_shows_usage_counts_from_one_query_whatever_the_rows(admin_client):
    def add(names, uses):
        for name in names:
            skill = publish_global(name, "d")
            for _ in range(uses):
                svc.skill_use_record(skill=skill, agent_key="a")

    add(["Alpha", "Beta"], 2)
    with CaptureQueriesContext(connection) as few:
        page = admin_client.get(ADMIN).content.decode()
    assert '<td class="field-use_count">2</td>' in page
    add([f"Gamma {i}" for i in range(8)], 5)
    with CaptureQueriesContext(connection) as many:
        page = admin_client.get(ADMIN).content.decode()
    assert page.count('<td class="field-use_count">5</td>') == 8
    assert len(many) == len(few)


def test_admin_actions_enable_and_disable_and_the_change_page_previews_escaped_instructions(admin_client):
    skill = publish_global("PDF Tools", "d", content="# Steps\n<script>alert(1)</script>",
                           files={"a.py": "print(1)"})
    response = admin_client.post(ADMIN, {"action": "disable_selected", "_selected_action": [str(skill.pk)]})
    assert response.status_code == 302
    assert not Skill.objects.get().enabled
    admin_client.post(ADMIN, {"action": "enable_selected", "_selected_action": [str(skill.pk)]})
    assert Skill.objects.get().enabled
    page = admin_client.get(f"{ADMIN}{skill.pk}/change/").content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)</script>" not in page
    assert "<code>a.py</code> (8 bytes)" in page
    assert admin_client.get(f"{ADMIN}add/").status_code == 403


def test_an_admin_edit_goes_through_the_service_and_bumps_the_version(admin_client):
    skill = publish_global("PDF Tools", "d", ["pdf"], content="old")
    form = {"description": "d", "tags": '["pdf"]', "agent": "", "enabled": "on", "content": "new steps"}
    response = admin_client.post(f"{ADMIN}{skill.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:2000]
    skill.refresh_from_db()
    assert (skill.content, skill.version) == ("new steps", 2)
    bad = admin_client.post(f"{ADMIN}{skill.pk}/change/", {**form, "description": "d" * 2001, "tags": '["x" , 5]'})
    assert bad.status_code == 200
    assert "must be at most 2000 characters" in bad.content.decode() and "tags must be a list of strings" in bad.content.decode()
    skill.refresh_from_db()
    assert (skill.description, skill.version) == ("d", 2)

