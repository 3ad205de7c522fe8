"""The context files admin: agent-level and per-user files edited in a markdown editor with a server-rendered preview
(raw HTML never rendered), every save and delete a versioned write by the person, and each file's history with
coloured diffs and a "restore this version" action that is itself a versioned write."""
from __future__ import annotations

import pytest

from tests.factories import make_agent
from tools_app.models.context_files import AgentContextFile, ContextFileVersion, UserContextFile
from tools_app.services.context_files import ContextActor, context_file_write

pytestmark = pytest.mark.django_db

FILES = "/admin/tools_app/agentcontextfile/"
USER_FILES = "/admin/tools_app/usercontextfile/"
VERSIONS = "/admin/tools_app/contextfileversion/"
HOSTILE = "# Soul\n\n**bold** and <script>alert(1)</script>\n\n[click](javascript:alert(1)) [docs](https://example.org/a)\n"


def test_adding_and_editing_an_agent_level_file_are_versioned_writes_by_the_person(admin_client):
    agent = make_agent()
    added = admin_client.post(f"{FILES}add/", {"agent": agent.pk, "name": "SOUL.md", "content": "I am calm.\n"})
    assert added.status_code == 302, added.content.decode()[:3000]
    row = AgentContextFile.objects.get(agent=agent, name="SOUL.md")
    changed = admin_client.post(f"{FILES}{row.pk}/change/", {"content": "I am calm.\nI explain.\n"})
    assert changed.status_code == 302, changed.content.decode()[:3000]
    row.refresh_from_db()
    assert row.content == "I am calm.\nI explain.\n"
    versions = list(ContextFileVersion.objects.filter(agent=agent, name="SOUL.md").order_by("created_at", "id"))
    assert [v.actor for v in versions] == ["person:admin", "person:admin"]
    assert "+I explain.\n" in versions[1].diff


def test_the_editor_shows_a_server_rendered_preview_that_never_renders_raw_html_or_script_links(admin_client):
    agent = make_agent()
    context_file_write(agent=agent, name="SOUL.md", content=HOSTILE, actor=ContextActor.system())
    row = AgentContextFile.objects.get(agent=agent)
    page = admin_client.get(f"{FILES}{row.pk}/change/").content.decode()
    assert 'class="context-file-editor"' in page and "Live preview" in page and "Versions and diffs" in page
    assert "<h1>Soul</h1>" in page and "<strong>bold</strong>" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert 'href="https://example.org/a"' in page and 'href="javascript:' not in page
    preview = admin_client.post(f"{FILES}preview/", {"content": "## Hi\n- <b>one</b>\n- `two`\n"})
    assert preview.status_code == 200
    html = preview.content.decode()
    assert "<h2>Hi</h2>" in html and "<li>&lt;b&gt;one&lt;/b&gt;</li>" in html and "<li><code>two</code></li>" in html
    assert admin_client.get(f"{FILES}preview/").status_code == 405


def test_history_shows_coloured_diffs_and_restore_writes_the_old_text_back_as_the_person(admin_client):
    agent = make_agent(agent_type="open")
    context_file_write(agent=agent, name="SOUL.md", content="I am calm.\n", actor=ContextActor.system())
    context_file_write(agent=agent, name="SOUL.md", content="I am furious.\n", actor=ContextActor.of_agent(agent))
    row = AgentContextFile.objects.get(agent=agent)
    history = admin_client.get(f"{FILES}{row.pk}/history/", follow=True)
    html = history.content.decode()
    assert history.status_code == 200 and f"History of SOUL.md ({agent.key}, agent-level)" in html
    assert '<span class="diff-del">-I am calm.</span>' in html and '<span class="diff-add">+I am furious.</span>' in html
    assert f"agent:{agent.key}" in html and html.count("Restore this version") == 1  # not on the current version
    old = ContextFileVersion.objects.get(agent=agent, content="I am calm.\n")
    done = admin_client.post(f"{VERSIONS}{old.pk}/restore/", follow=True)
    assert f"Restored SOUL.md to version {old.pk}" in done.content.decode()
    row.refresh_from_db()
    assert row.content == "I am calm.\n"
    latest = ContextFileVersion.objects.filter(agent=agent).latest("created_at", "id")
    assert (latest.actor, latest.restored_from_id) == ("person:admin", old.pk)
    assert f"restored version {old.pk}" in done.content.decode()
    assert admin_client.get(f"{VERSIONS}{old.pk}/restore/").status_code == 405


def test_a_version_page_is_read_only_with_its_diff_and_a_restore_button(admin_client):
    agent = make_agent()
    context_file_write(agent=agent, name="TOOLS.md", content="use exec\n", actor=ContextActor.system())
    version = ContextFileVersion.objects.get(agent=agent)
    page = admin_client.get(f"{VERSIONS}{version.pk}/change/").content.decode()
    assert '<span class="diff-add">+use exec</span>' in page and "Restore this version" in page
    assert 'name="_save"' not in page
    assert admin_client.get(f"{VERSIONS}add/").status_code == 403
    listing = admin_client.get(VERSIONS).content.decode()
    assert "system:system" in listing and "TOOLS.md" in listing


def test_deleting_in_the_admin_is_versioned_and_a_deleted_file_can_be_restored(admin_client):
    agent = make_agent()
    context_file_write(agent=agent, name="AGENTS.md", content="rules\n", actor=ContextActor.system())
    row = AgentContextFile.objects.get(agent=agent)
    assert admin_client.post(f"{FILES}{row.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not AgentContextFile.objects.filter(agent=agent).exists()
    deletion = ContextFileVersion.objects.filter(agent=agent).latest("created_at", "id")
    assert deletion.deleted and deletion.actor == "person:admin"
    page = admin_client.get(f"{VERSIONS}file/{agent.pk}/AGENTS.md/").content.decode()
    assert "This file does not exist now." in page and "deleted the file" in page
    first = ContextFileVersion.objects.filter(agent=agent).earliest("created_at", "id")
    admin_client.post(f"{VERSIONS}{first.pk}/restore/")
    assert AgentContextFile.objects.get(agent=agent).content == "rules\n"


def test_user_files_are_edited_per_user_and_an_empty_bootstrap_cannot_be_added(admin_client):
    agent = make_agent(agent_type="open")
    form = {"agent": agent.pk, "user_id": "ada", "name": "USER.md", "content": "Ada likes tea.\n"}
    assert admin_client.post(f"{USER_FILES}add/", form).status_code == 302
    row = UserContextFile.objects.get(agent=agent, user_id="ada")
    assert ContextFileVersion.objects.get(agent=agent, user_id="ada").actor == "person:admin"
    again = admin_client.post(f"{USER_FILES}add/", form).content.decode()
    assert "already exists" in again
    empty = admin_client.post(f"{USER_FILES}add/", {**form, "name": "BOOTSTRAP.md", "content": ""}).content.decode()
    assert "first run is completed" in empty and not UserContextFile.objects.filter(name="BOOTSTRAP.md").exists()
    page = admin_client.get(f"{USER_FILES}{row.pk}/change/").content.decode()
    assert "Ada likes tea." in page and f"{VERSIONS}file/{agent.pk}/USER.md/?user_id=ada" in page
    history = admin_client.get(f"{VERSIONS}file/{agent.pk}/USER.md/?user_id=ada").content.decode()
    assert "History of USER.md" in history and "user ada" in history and "+Ada likes tea." in history
