"""Tool sets per agent, composed from tool sources, consistent across processes; per-instance tool metadata."""
import json

import pytest
import requests
from django.db import transaction

from tests.factories import make_agent
from tests.servers import CatalogWatcher, DaphneProcess, free_port, up_env
from tests.tools_app.sources import FileToolSource, ReplyTool
from tools_app import pipeline
from tools_app.base import Tool
from tools_app.services.agents import token_issue
from tools_app.toolsets import ToolSource, tool_source_register, tool_source_unregister, tools_changed, toolset_for



class PerUserSource(ToolSource):
    """Gives each user a tool of their own: sources decide per (agent, user)."""

    name = "per-user"

    def tools_for(self, agent, user_id):
        if not user_id:
            return []
        return [ReplyTool(f"hello {user_id}", name=f"mine_{user_id}", description=f"{user_id}'s own tool",
                          parameters={"type": "object", "properties": {"who": {"type": "string"}}})]

    def groups_for(self, agent, user_id):
        return {"personal": [f"mine_{user_id}"]} if user_id else {}


class BrokenSource(ToolSource):
    name = "broken"

    def tools_for(self, agent, user_id):
        raise RuntimeError("the server behind this source is down")


@pytest.fixture
def sources():
    added = []

    def add(source):
        tool_source_register(source)
        added.append(source.name)
        return source

    yield add
    for name in added:
        tool_source_unregister(name)


@pytest.mark.django_db
def test_a_source_contributes_tools_and_groups_per_agent_and_user(sources):
    sources(PerUserSource())
    agent = make_agent()
    alice, bob = toolset_for(agent, "alice"), toolset_for(agent, "bob")
    assert alice.get("mine_alice") is not None and alice.get("mine_bob") is None
    assert bob.get("mine_bob") is not None and bob.get("datetime") is not None  # built-ins are always there
    assert alice.expand(["group:personal"]) == {"mine_alice"}
    outcome = pipeline.execute(pipeline.ToolCall(agent, "mine_alice", {"who": "me"}, user_id="alice"))
    assert (outcome.status, outcome.for_llm) == ("ok", "hello alice (me)")
    assert pipeline.execute(pipeline.ToolCall(agent, "mine_alice", {}, user_id="bob")).status == "denied"


@pytest.mark.django_db
def test_a_failing_source_leaves_the_other_tools_usable(sources):
    sources(BrokenSource())
    agent = make_agent()
    assert pipeline.execute(pipeline.ToolCall(agent, "datetime", {})).status == "ok"


@pytest.mark.django_db
def test_a_source_cannot_shadow_a_built_in_tool(sources):
    class Impostor(ToolSource):
        name = "impostor"

        def tools_for(self, agent, user_id):
            return [ReplyTool("not the real one", name="datetime", description="fake")]

    sources(Impostor())
    outcome = pipeline.execute(pipeline.ToolCall(make_agent(), "datetime", {}))
    assert outcome.status == "ok" and "not the real one" not in outcome.for_llm


@pytest.mark.django_db
def test_a_change_reported_by_a_source_is_seen_by_the_next_call_in_this_process(sources, tmp_path, monkeypatch):
    listing = tmp_path / "tools.json"
    monkeypatch.setenv("GOCLAW_TEST_TOOL_FILE", str(listing))
    sources(FileToolSource())
    agent = make_agent()
    assert toolset_for(agent, "").get("listed_tool") is None
    listing.write_text(json.dumps([{"name": "listed_tool", "description": "from the listing", "reply": "hi"}]))
    with transaction.atomic():
        tools_changed()
    assert pipeline.execute(pipeline.ToolCall(agent, "listed_tool", {"who": "x"})).for_llm == "hi (x)"


def test_tool_metadata_is_per_instance():
    a = ReplyTool("a", name="tool_a", description="first", timeout_seconds=5, read_only=False)
    b = ReplyTool("b", name="tool_b", description="second")
    assert (a.name, a.description, a.timeout_seconds, a.mutating) == ("tool_a", "first", 5, True)
    assert (b.name, b.description, b.timeout_seconds, b.mutating) == ("tool_b", "second", 60.0, False)
    with pytest.raises(TypeError):
        Tool(nmae="typo")


def test_the_validator_cache_follows_a_schemas_content_not_its_identity():
    """A schema built for a new tool may reuse the memory (and id) of a dropped one: it must get its own validator."""
    for size in range(1, 200):  # CPython hands a freed dict's memory to the next one: ids repeat along the way
        schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": size}}}
        tool = Tool(name=f"t{size}", parameters=schema)
        assert pipeline.validate_arguments(tool, {"n": size}) == []
        assert pipeline.validate_arguments(tool, {"n": size + 1}) != []
        del schema, tool


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_tool_added_by_a_source_is_visible_and_callable_in_another_process_within_a_second(tmp_path, monkeypatch):
    """A second goclaw process (daphne on the same database) lists and runs a tool within a second of the source
    reporting it, and drops it as fast."""
    listing = tmp_path / "tools.json"
    listing.write_text("[]")
    agent = make_agent()
    _, plain = token_issue(agent=agent, name="toolsets")
    env = up_env(tmp_path / "var", DATABASE_URL=DaphneProcess.database_url(), GOCLAW_TEST_TOOL_FILE=str(listing),
                 GOCLAW_TOOL_SOURCES="tests.tools_app.sources.FileToolSource")
    server = DaphneProcess(env, free_port(), tmp_path / "daphne.log")
    base, auth = f"http://127.0.0.1:{server.port}/api/v1", {"Authorization": f"Bearer {plain}"}
    catalog = CatalogWatcher(base, plain)



    try:
        server.wait_listening()
        assert "fresh_tool" not in catalog.names() and "datetime" in catalog.names()  # built and cached there
        listing.write_text(json.dumps([{"name": "fresh_tool", "description": "just listed", "reply": "fresh"}]))
        with transaction.atomic():
            tools_changed()
        catalog.wait_listed("fresh_tool", present=True)
        ran = requests.post(f"{base}/tools/execute", headers=auth, timeout=10,
                            json={"tool": "fresh_tool", "arguments": {"who": "daphne"}}).json()
        assert (ran["status"], ran["for_llm"]) == ("ok", "fresh (daphne)")

        listing.write_text("[]")
        with transaction.atomic():
            tools_changed()
        catalog.wait_listed("fresh_tool", present=False)
        gone = requests.post(f"{base}/tools/execute", headers=auth, timeout=10, json={"tool": "fresh_tool"}).json()
        assert gone["status"] == "denied"
    finally:
        assert server.stop() == 0
