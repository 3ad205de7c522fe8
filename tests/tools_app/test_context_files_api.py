"""The context files API: GET /api/v1/agents/<key>/context merges what an agent loop puts in its system prompt
(per-user over agent-level, empty files skipped, generated files from other apps) with an ETag and 304; an agent
reads only its own context; staff read any, and manage the stored files, their versions and restores."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.factories import make_agent
from tools_app.context_files import context_file_provider_register
from tools_app.models.context_files import AgentContextFile, ContextFileVersion, UserContextFile
from tools_app.services.agents import token_issue
from tools_app.services.context_files import ContextActor, context_file_write

pytestmark = pytest.mark.django_db
SETUP = ContextActor.system("test-setup")


def seed(agent, name, text, user=""):
    context_file_write(agent=agent, name=name, content=text, user_id=user, actor=SETUP)


def client_for(agent) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_issue(agent=agent, name='ctx')[1]}")
    return client


@pytest.fixture
def generated():
    """TEAM.md from a working provider, and two providers that contribute nothing (empty, and failing)."""
    def team(agent, user_id):
        return f"# Team of {agent.key}\nuser: {user_id or '-'}\n"

    def broken(agent, user_id):
        raise RuntimeError("teams are down")

    from tools_app import selectors_context

    saved = selectors_context._providers  # the apps' own providers (teams_app's TEAM.md, …) come back after
    selectors_context._providers = ()
    context_file_provider_register("TEAM.md", team)
    context_file_provider_register("EMPTY.md", lambda agent, user_id: "  \n")
    context_file_provider_register("BROKEN.md", broken)
    yield
    selectors_context._providers = saved


def test_the_context_merges_user_files_over_agent_files_skips_empty_ones_and_adds_generated_files(generated):
    agent = make_agent(agent_type="open")
    seed(agent, "SOUL.md", "agent soul")
    seed(agent, "IDENTITY.md", "   \n")  # empty: skipped
    seed(agent, "AGENTS.md", "agent rules")
    seed(agent, "USER.md", "template user")
    seed(agent, "SOUL.md", "ada's soul", "ada")
    seed(agent, "USER.md", "Ada, likes tea", "ada")
    seed(agent, "HEARTBEAT.md", "", "ada")  # the user's empty file wins over nothing and is skipped
    body = client_for(agent).get(f"/api/v1/agents/{agent.key}/context", {"user_id": "ada"}).json()
    assert (body["agent"], body["user_id"]) == (agent.key, "ada")
    assert [(f["name"], f["content"], f["source"]) for f in body["files"]] == [
        ("SOUL.md", "ada's soul", "user"), ("AGENTS.md", "agent rules", "agent"), ("USER.md", "Ada, likes tea", "user"),
        ("TEAM.md", f"# Team of {agent.key}\nuser: ada\n", "generated")]
    shared = client_for(agent).get(f"/api/v1/agents/{agent.key}/context").json()
    assert [(f["name"], f["source"]) for f in shared["files"]] == \
        [("SOUL.md", "agent"), ("AGENTS.md", "agent"), ("USER.md", "agent"), ("TEAM.md", "generated")]
    assert shared["hash"] != body["hash"]


def test_a_predefined_agents_context_takes_only_user_and_bootstrap_from_the_user():
    agent = make_agent(agent_type="predefined")
    seed(agent, "SOUL.md", "the configured soul")
    seed(agent, "BOOTSTRAP.md", "greet new users")
    seed(agent, "SOUL.md", "a stale per-user soul", "bob")  # not a per-user file for a predefined agent: ignored
    seed(agent, "USER.md", "Bob", "bob")
    files = client_for(agent).get(f"/api/v1/agents/{agent.key}/context?user_id=bob").json()["files"]
    assert [(f["name"], f["content"], f["source"]) for f in files] == [
        ("SOUL.md", "the configured soul", "agent"), ("USER.md", "Bob", "user"),
        ("BOOTSTRAP.md", "greet new users", "agent")]
    context_file_write(agent=agent, name="BOOTSTRAP.md", content="", user_id="bob", actor=ContextActor.of_agent(agent))
    files = client_for(agent).get(f"/api/v1/agents/{agent.key}/context?user_id=bob").json()["files"]
    assert [f["name"] for f in files] == ["SOUL.md", "USER.md"]  # first run completed: no bootstrap any more


def test_the_etag_is_the_hash_and_if_none_match_gives_304_until_something_changes():
    agent = make_agent()
    seed(agent, "SOUL.md", "v1")
    client = client_for(agent)
    url = f"/api/v1/agents/{agent.key}/context"
    first = client.get(url)
    etag = first["ETag"]
    assert first.status_code == 200 and etag == f'"{first.json()["hash"]}"' and len(first.json()["hash"]) == 64
    assert client.get(url)["ETag"] == etag  # stable
    cached = client.get(url, HTTP_IF_NONE_MATCH=etag)
    assert cached.status_code == 304 and cached.content == b"" and cached["ETag"] == etag
    assert client.get(url, HTTP_IF_NONE_MATCH=f'"other", W/{etag}').status_code == 304
    assert client.get(url, HTTP_IF_NONE_MATCH='"stale"').status_code == 200
    seed(agent, "SOUL.md", "v2")
    changed = client.get(url, HTTP_IF_NONE_MATCH=etag)
    assert changed.status_code == 200 and changed["ETag"] != etag and changed.json()["files"][0]["content"] == "v2"


def test_an_agent_reads_only_its_own_context_and_staff_read_any(staff_api):
    mine, theirs = make_agent(), make_agent()
    seed(theirs, "SOUL.md", "their secret soul")
    client = client_for(mine)
    assert client.get(f"/api/v1/agents/{mine.key}/context").status_code == 200
    other = client.get(f"/api/v1/agents/{theirs.key}/context")
    missing = client.get("/api/v1/agents/nobody-at-all/context")
    assert other.status_code == missing.status_code == 404
    assert other.json()["error"]["code"] == missing.json()["error"]["code"] == "agent_not_found"
    assert "their secret soul" not in other.content.decode()
    assert client.get(f"/api/v1/agents/{mine.key}/context-files").status_code == 403  # CRUD is for staff
    assert APIClient().get(f"/api/v1/agents/{mine.key}/context").status_code == 401
    seen = staff_api.get(f"/api/v1/agents/{theirs.key}/context")
    assert seen.status_code == 200 and seen.json()["files"][0]["content"] == "their secret soul"
    assert staff_api.get("/api/v1/agents/nobody-at-all/context").status_code == 404


def test_staff_create_read_list_update_and_delete_files_of_both_scopes_as_versioned_writes(staff_api):
    agent = make_agent(agent_type="open")
    base = f"/api/v1/agents/{agent.key}/context-files"
    created = staff_api.put(f"{base}/SOUL.md", {"content": "# Soul\n"}, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["created"] and created.json()["version"]["actor"] == "person:staff"
    replaced = staff_api.put(f"{base}/SOUL.md", {"content": "# Soul\nkind\n"}, format="json")
    assert replaced.status_code == 200 and "+kind\n" in replaced.json()["version"]["diff"]
    same = staff_api.put(f"{base}/SOUL.md", {"content": "# Soul\nkind\n"}, format="json")
    assert same.status_code == 200 and same.json()["version"] is None
    assert staff_api.put(f"{base}/USER.md?user_id=ada", {"content": "Ada"}, format="json").status_code == 201
    assert staff_api.get(f"{base}/SOUL.md").json()["content"] == "# Soul\nkind\n"
    assert staff_api.get(f"{base}/USER.md", {"user_id": "ada"}).json() | {"created_at": 0, "updated_at": 0} == \
        {"name": "USER.md", "user_id": "ada", "content": "Ada", "created_at": 0, "updated_at": 0}
    assert staff_api.get(f"{base}/USER.md").status_code == 404  # no agent-level USER.md: no fallback in CRUD
    assert [f["name"] for f in staff_api.get(base).json()["results"]] == ["SOUL.md"]
    assert [(f["name"], f["user_id"]) for f in staff_api.get(base, {"user_id": "ada"}).json()["results"]] == \
        [("USER.md", "ada")]
    assert staff_api.delete(f"{base}/USER.md?user_id=ada").status_code == 204
    assert staff_api.delete(f"{base}/USER.md?user_id=ada").status_code == 404
    assert not UserContextFile.objects.filter(agent=agent).exists()
    assert ContextFileVersion.objects.filter(agent=agent, user_id="ada", deleted=True, actor_kind="person").exists()


def test_bad_names_contents_and_agents_are_clear_errors(staff_api):
    agent = make_agent()
    base = f"/api/v1/agents/{agent.key}/context-files"
    unknown = staff_api.put(f"{base}/NOTES.md", {"content": "x"}, format="json")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "context_file_not_found"
    assert "SOUL.md" in unknown.json()["error"]["message"]
    nul = staff_api.put(f"{base}/SOUL.md", {"content": "a\x00b"}, format="json")
    assert nul.status_code == 400 and "content" in nul.json()["error"]["details"]
    assert staff_api.put(f"{base}/SOUL.md", {"content": 5}, format="json").status_code == 400
    assert staff_api.put(f"{base}/SOUL.md", {}, format="json").status_code == 400
    assert staff_api.get("/api/v1/agents/ghost/context-files").status_code == 404
    long_user = staff_api.get(f"{base}/SOUL.md", {"user_id": "u" * 256})
    assert long_user.status_code == 400 and long_user.json()["error"]["code"] == "invalid_request"
    assert not AgentContextFile.objects.exists()


def test_versions_list_newest_first_and_restore_writes_the_old_text_back_as_the_person(staff_api):
    agent = make_agent(agent_type="open")
    seed(agent, "SOUL.md", "I am calm.\n")
    context_file_write(agent=agent, name="SOUL.md", content="I am furious.\n", actor=ContextActor.of_agent(agent))
    base = f"/api/v1/agents/{agent.key}/context-files/SOUL.md"
    versions = staff_api.get(f"{base}/versions").json()["results"]
    assert [(v["actor"], v["content"]) for v in versions] == \
        [(f"agent:{agent.key}", "I am furious.\n"), ("system:test-setup", "I am calm.\n")]
    assert "-I am calm.\n+I am furious.\n" in versions[0]["diff"]
    restored = staff_api.post(f"{base}/versions/{versions[1]['id']}/restore")
    assert restored.status_code == 200, restored.content
    assert restored.json()["version"]["restored_from"] == versions[1]["id"]
    assert restored.json()["version"]["actor"] == "person:staff"
    assert AgentContextFile.objects.get(agent=agent, name="SOUL.md").content == "I am calm.\n"
    assert len(staff_api.get(f"{base}/versions").json()["results"]) == 3
    other = make_agent()
    assert staff_api.post(f"/api/v1/agents/{other.key}/context-files/SOUL.md/versions/{versions[1]['id']}/restore"
                          ).status_code == 404  # a version of another agent's file
    assert staff_api.post(f"/api/v1/agents/{agent.key}/context-files/USER.md/versions/{versions[1]['id']}/restore"
                          ).status_code == 404
    assert staff_api.get(f"{base}/versions", {"user_id": "ada"}).json()["results"] == []
