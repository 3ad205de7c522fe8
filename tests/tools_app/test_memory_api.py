"""The memory API and admin (P10): documents per user with the shared fallback, writes indexed like write_file,
search identical to the tool, an agent limited to its own memory; the admin's documents, re-index action and search
page with its scores."""
from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from tests.factories import make_agent
from tools_app.memory.tools import MemorySearchTool
from tools_app.models.memory import MemoryChunk, MemoryDocument
from tools_app.services.agents import token_issue
from tools_app.services.memory import memory_document_write
from tests.tools_app.test_memory import ctx_for

NOTE = "The spare office key is in the top drawer of the reception desk.\n"


def url(agent, rest: str = "") -> str:
    return f"/api/v1/agents/{agent.key}/memory{rest}"


def test_put_get_list_and_delete_a_users_document_with_the_shared_fallback(agent, staff_api):
    created = staff_api.put(url(agent, "/memory/office.md?user_id=alice"), {"content": NOTE}, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["path"], body["user_id"], body["scope"], body["content"]) == ("memory/office.md", "alice", "personal", NOTE)
    assert (body["chunks"], body["embedded_chunks"]) == (1, 1) and "embedding_error" not in body
    assert staff_api.put(url(agent, "/memory/office.md?user_id=alice"), {"content": NOTE + "more\n"},
                         format="json").status_code == 200
    assert staff_api.put(url(agent, "/MEMORY.md"), {"content": "Shared rules.\n"}, format="json").status_code == 201

    alice = staff_api.get(url(agent, "?user_id=alice")).json()
    assert [(d["path"], d["scope"]) for d in alice] == [("MEMORY.md", "shared"), ("memory/office.md", "personal")]
    assert [d["path"] for d in staff_api.get(url(agent)).json()] == ["MEMORY.md"]
    assert [d["path"] for d in staff_api.get(url(agent, "?user_id=bob")).json()] == ["MEMORY.md"]
    assert staff_api.get(url(agent, "/MEMORY.md?user_id=alice")).json()["scope"] == "shared"  # the fallback
    missing = staff_api.get(url(agent, "/memory/office.md?user_id=bob"))
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "memory_document_not_found")

    # DELETE removes exactly the named scope: alice cannot delete the shared file by naming it.
    assert staff_api.delete(url(agent, "/MEMORY.md?user_id=alice")).status_code == 404
    assert staff_api.delete(url(agent, "/memory/office.md?user_id=alice")).status_code == 204
    assert not MemoryChunk.objects.filter(agent=agent, user_id="alice").exists()
    assert staff_api.delete(url(agent, "/MEMORY.md")).status_code == 204
    assert not MemoryDocument.objects.filter(agent=agent).exists()


def test_paths_outside_memory_are_refused(agent, staff_api):
    for path in ("/SOUL.md", "/memory/../SOUL.md", "/notes/memory.md", "/memory"):
        response = staff_api.put(url(agent, path), {"content": "x"}, format="json")
        assert response.status_code in (400, 404), (path, response.status_code)
        if response.status_code == 400:
            assert response.json()["error"]["code"] == "memory_path_invalid"
    binary = staff_api.put(url(agent, "/MEMORY.md"), {"content": "a\x00b"}, format="json")
    assert binary.status_code == 400
    assert staff_api.get("/api/v1/agents/x%00y/memory").status_code == 404
    assert not MemoryDocument.objects.exists()


def test_a_nul_character_is_refused_by_the_service_and_write_file_reports_it(agent):
    from goclaw.errors import ValidationError
    from tools_app.base import ToolError
    from tools_app.builtin import fs

    with pytest.raises(ValidationError, match="NUL"):
        memory_document_write(agent=agent, user_id=None, path="MEMORY.md", content="a\x00b")
    write = {t.name: t for t in fs.TOOLS}["write_file"]
    with pytest.raises(ToolError):
        write.run(ctx_for(agent, "u"), {"path": "MEMORY.md", "content": "a\x00b"})
    assert not MemoryDocument.objects.exists()


def test_api_search_returns_what_the_memory_search_tool_returns(agent, staff_api):
    memory_document_write(agent=agent, user_id="alice", path="memory/office.md", content=NOTE)
    memory_document_write(agent=agent, user_id="bob", path="memory/office.md", content="Bob's desk key is lost.\n")
    response = staff_api.post(url(agent, "/search"), {"query": "where is the office key?", "user_id": "alice"},
                              format="json")
    assert response.status_code == 200, response.content
    tool = json.loads(MemorySearchTool().run(ctx_for(agent, "alice"), {"query": "where is the office key?"}).for_llm)
    assert response.json() == tool
    assert [h["text"] for h in response.json()["results"]] == [NOTE.rstrip("\n")]
    bad = staff_api.post(url(agent, "/search"), {"query": "x", "max_results": 0}, format="json")
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, "invalid_request")


def test_an_agent_reaches_its_own_memory_and_no_other_agents(agent, api):
    assert api.put(url(agent, "/MEMORY.md?user_id=u1"), {"content": NOTE}, format="json").status_code == 201
    assert api.get(url(agent, "/MEMORY.md?user_id=u1")).json()["content"] == NOTE
    assert api.post(url(agent, "/search"), {"query": "office key", "user_id": "u1"}, format="json").json()["count"] == 1
    other = make_agent()
    memory_document_write(agent=other, user_id=None, path="MEMORY.md", content="other agent's memory\n")
    for response in (api.get(url(other, "/MEMORY.md")), api.get(url(other)),
                     api.post(url(other, "/search"), {"query": "memory"}, format="json"),
                     api.delete(url(other, "/MEMORY.md"))):
        assert (response.status_code, response.json()["error"]["code"]) == (403, "memory_not_yours")
    assert MemoryDocument.objects.filter(agent=other).exists()
    assert APIClient().get(url(agent)).status_code == 401


def test_the_document_list_takes_a_constant_number_of_queries(agent, staff_api, django_assert_max_num_queries):
    for n in range(8):
        memory_document_write(agent=agent, user_id=None if n % 2 else "alice", path=f"memory/n{n}.md",
                              content=f"note {n}\n")
    with django_assert_max_num_queries(8):  # 2 of them read the person's permissions (goclaw.authz)
        assert len(staff_api.get(url(agent, "?user_id=alice")).json()) == 8


# --- admin ---------------------------------------------------------------------------------------------------------
@pytest.fixture
def admin_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw-root-123")
    client.force_login(user)
    return client


def test_the_admin_lists_documents_per_user_and_reindexes_them(agent, admin_client):
    memory_document_write(agent=agent, user_id="alice", path="memory/office.md", content=NOTE)
    memory_document_write(agent=agent, user_id=None, path="MEMORY.md", content="Shared rules.\n")
    page = admin_client.get("/admin/tools_app/memorydocument/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "memory/office.md" in text and "(shared)" in text and "Search memory" in text
    MemoryChunk.objects.filter(agent=agent).update(embedding=None, embedding_model="")
    done = admin_client.post("/admin/tools_app/memorydocument/", {
        "action": "reindex_selected", "_selected_action": list(MemoryDocument.objects.values_list("pk", flat=True))},
        follow=True)
    assert "Re-indexed 2 document(s): 2 chunk(s), 2 with a vector." in done.content.decode()
    assert not MemoryChunk.objects.filter(embedding__isnull=True).exists()
    document = MemoryDocument.objects.get(path="memory/office.md")
    detail = admin_client.get(f"/admin/tools_app/memorydocument/{document.pk}/change/").content.decode()
    assert "top drawer of the reception desk" in detail


def test_a_document_saved_in_the_admin_is_stored_chunked_and_embedded(agent, admin_client,
                                                                     django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post("/admin/tools_app/memorydocument/add/", {
            "agent": agent.pk, "user_id": "", "path": "memory/admin.md", "content": NOTE.replace("\n", "\r\n"),
            "chunks-TOTAL_FORMS": "0", "chunks-INITIAL_FORMS": "0"})
    assert response.status_code == 302, response.content.decode()[:2000]
    document = MemoryDocument.objects.get(agent=agent, path="memory/admin.md")
    assert document.user_id is None and document.content == NOTE
    assert MemoryChunk.objects.get(document=document).embedding is not None


def test_the_admin_search_page_shows_text_vector_and_combined_scores(agent, admin_client):
    memory_document_write(agent=agent, user_id="alice", path="memory/office.md", content=NOTE)
    memory_document_write(agent=agent, user_id="bob", path="memory/bob.md", content="Bob hid the office key.\n")
    page = admin_client.get("/admin/tools_app/memorydocument/search/",
                            {"agent": agent.key, "user_id": "alice", "query": "office key drawer"})
    assert page.status_code == 200
    html = page.content.decode()
    [hit] = page.context["result"].hits
    assert hit.path == "memory/office.md" and "Bob hid" not in html
    for css, value in (("score-combined", hit.score), ("score-vector", hit.vector_score),
                       ("score-text", hit.text_score)):
        assert f'<td class="{css}">{value:.4f}</td>' in html
    assert "top drawer of the reception desk" in html


def test_an_agent_token_cannot_open_the_admin(agent):
    _, plain = token_issue(agent=agent, name="x")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plain}")
    assert client.get("/admin/tools_app/memorydocument/search/").status_code == 302
