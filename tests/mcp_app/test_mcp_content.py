"""Resources and prompts over MCP (docs/mcp-server-content.md): an agent's context files and memory documents as
read-only resources and its skills as prompts, exactly what its tools see for the call's user, under the policy's
`resources` / `prompts` sections (default allow, deny wins), scrubbed, and audited like tool calls. The services are
tested directly; the MCP methods through real uvicorn processes (the session-era module's servers) with the SDK
client in both protocol eras, including `subscriptions/listen` across processes."""
from __future__ import annotations

import json
import threading

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.factories import make_agent
from tests.mcp_app import test_mcp_server as session_era
from tests.mcp_app.test_mcp_server import agent_with_token, client, run
from tests.servers import wait_until
from tools_app import mcp_content
from tools_app.calls import CallContext
from tools_app.models import ToolInvocation, ToolPolicy
from tools_app.models.skills import SkillUse
from tools_app.security.scrub import REDACTED
from tools_app.services import skills as skill_services
from tools_app.services.context_files import context_file_write_by_agent
from tools_app.services.memory import memory_document_delete, memory_document_write
from tools_app.services.policy import tool_policy_save

servers, server = session_era.servers, session_era.server
_generations_past_what_the_servers_saw = session_era._generations_past_what_the_servers_saw

MODERN = "2026-07-28"
SECRET = "AKIAIOSFODNN7EXAMPLE"  # an AWS access key id: the scrubber's detectors know its shape
NOTES = "memory/notes.md"


def open_agent(**fields):
    return make_agent(agent_type="open", **fields)


def remember(agent, path: str, text: str, user_id: str | None = None):
    """A memory document written as the memory tools write it (not embedded: these tests do not search)."""
    return memory_document_write(agent=agent, user_id=user_id, path=path, content=text, embed=False)


def policy(agent=None, **sections) -> ToolPolicy:
    spec = ToolPolicy(scope="agent", agent=agent, **sections) if agent else ToolPolicy(scope="global", **sections)
    return tool_policy_save(actor=None, policy=spec)[0]


def skill(agent, name: str, content: str, arguments=(), description: str = "What it does"):
    return skill_services.skill_publish(agent=agent, name=name, description=description, content=content,
                                        arguments=arguments)[0]


def as_user(user_id: str = "", **fields) -> CallContext:
    return CallContext(user_id=user_id, **fields)


def uris(agent, context: CallContext) -> list[str]:
    return [e.uri for e in mcp_content.resources_list(agent, context)[0]]


# --- resources: visibility ----------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_resources_are_what_the_agents_file_and_memory_tools_see_for_each_user():
    agent, other = open_agent(), open_agent()
    context_file_write_by_agent(agent=agent, name="SOUL.md", content="shared soul")
    context_file_write_by_agent(agent=agent, name="USER.md", content="ada's profile", user_id="ada")
    remember(agent, "MEMORY.md", "shared memory")
    remember(agent, NOTES, "ada's notes", user_id="ada")
    remember(agent, "memory/zeta.md", "bob's own", user_id="bob")
    context_file_write_by_agent(agent=other, name="SOUL.md", content="another agent")

    assert uris(agent, as_user("ada")) == ["goclaw://context/SOUL.md", "goclaw://context/USER.md",
                                           "goclaw://memory/MEMORY.md", "goclaw://memory/memory/notes.md"]
    assert uris(agent, as_user("bob")) == ["goclaw://context/SOUL.md", "goclaw://memory/MEMORY.md",
                                           "goclaw://memory/memory/zeta.md"]
    assert uris(agent, as_user()) == ["goclaw://context/SOUL.md", "goclaw://memory/MEMORY.md"]
    read = mcp_content.resource_read(agent=agent, context=as_user("ada"), uri="goclaw://context/USER.md")
    assert (read.text, read.mime_type) == ("ada's profile", "text/markdown")
    for user, uri in (("bob", "goclaw://context/USER.md"), ("bob", "goclaw://memory/memory/notes.md"),
                      ("", "goclaw://memory/memory/zeta.md")):
        with pytest.raises(mcp_content.ResourceNotFound):  # another user's data is not there for this caller
            mcp_content.resource_read(agent=agent, context=as_user(user), uri=uri)
    assert mcp_content.resource_read(agent=other, context=as_user("ada"), uri="goclaw://context/SOUL.md").text \
        == "another agent"


@pytest.mark.django_db
def test_a_users_own_memory_document_hides_the_shared_one_of_the_same_path():
    agent = open_agent()
    remember(agent, "MEMORY.md", "shared")
    remember(agent, "MEMORY.md", "mine", user_id="ada")
    entries = mcp_content.resources_list(agent, as_user("ada"))[0]
    assert [(e.uri, e.description) for e in entries] == [("goclaw://memory/MEMORY.md",
                                                          "Memory document MEMORY.md: this user's own")]
    for user, text in (("ada", "mine"), ("bob", "shared")):
        read = mcp_content.resource_read(agent=agent, context=as_user(user), uri="goclaw://memory/MEMORY.md")
        assert read.text == text


@pytest.mark.django_db
def test_uris_are_percent_encoded_and_every_spelling_means_one_resource():
    agent = open_agent()
    remember(agent, "memory/a b#1.json", '{"x": 1}')
    [entry] = mcp_content.resources_list(agent, as_user())[0]
    assert entry.uri == "goclaw://memory/memory/a%20b%231.json" and entry.mime_type == "application/json"
    read = mcp_content.resource_read(agent=agent, context=as_user(), uri="goclaw://memory/memory/a%20b%231%2Ejson")
    assert read.uri == entry.uri and read.text == '{"x": 1}'
    for bad in ("goclaw://memory/../SOUL.md", "goclaw://memory/memory/%ff", "goclaw://context/NOTES.md",
                "goclaw://memory/notes/x.md", "file:///etc/passwd", "goclaw://memory/" + "a" * 3000):
        with pytest.raises(mcp_content.ResourceNotFound):
            mcp_content.resource_read(agent=agent, context=as_user(), uri=bad)


@pytest.mark.django_db
def test_pages_follow_a_cursor_that_stays_valid_while_entries_come_and_go(monkeypatch):
    monkeypatch.setattr(mcp_content, "PAGE_SIZE", 2)
    agent = open_agent()
    for name in ("a", "b", "c", "d"):
        remember(agent, f"memory/{name}.md", name)
    first, cursor = mcp_content.resources_list(agent, as_user())
    assert [e.name for e in first] == ["memory/a.md", "memory/b.md"] and cursor
    remember(agent, "memory/0.md", "before the cursor")  # must not shift what comes next
    second, cursor = mcp_content.resources_list(agent, as_user(), cursor)
    assert [e.name for e in second] == ["memory/c.md", "memory/d.md"] and cursor is None
    with pytest.raises(mcp_content.ContentRequestInvalid):
        mcp_content.resources_list(agent, as_user(), "not base64!")


@pytest.mark.django_db
def test_listing_again_costs_one_aggregate_query_while_nothing_moved(django_assert_max_num_queries):
    agent = open_agent()
    context_file_write_by_agent(agent=agent, name="SOUL.md", content="soul")
    for n in range(5):
        remember(agent, f"memory/{n}.md", str(n), user_id="ada")
    with django_assert_max_num_queries(8):  # cold: counters, policies, the aggregate, files, bootstrap, documents
        cold = mcp_content.resources_list(agent, as_user("ada"))[0]
    with django_assert_max_num_queries(2):  # warm: the aggregate (and at most the shared generation counters)
        assert mcp_content.resources_list(agent, as_user("ada"))[0] == cold


# --- resources: policy, scrubbing, audit -----------------------------------------------------------------------
@pytest.mark.django_db
def test_resources_default_to_allowed_narrow_with_allow_lists_and_an_explicit_deny_wins():
    agent = open_agent()
    context_file_write_by_agent(agent=agent, name="SOUL.md", content="soul")
    remember(agent, "MEMORY.md", "memory")
    remember(agent, "memory/private/diary.md", "secret thoughts")
    everything = uris(agent, as_user())
    assert len(everything) == 3

    policy(resources={"allow": ["goclaw://memory/*"]})
    assert uris(agent, as_user()) == ["goclaw://memory/MEMORY.md", "goclaw://memory/memory/private/diary.md"]
    policy(agent, resources={"allow": ["goclaw://memory/*", "goclaw://context/*"],
                             "deny": ["goclaw://memory/memory/private/*"]})
    assert uris(agent, as_user()) == ["goclaw://memory/MEMORY.md"]  # both allow lists narrow; the deny removes
    with pytest.raises(mcp_content.ResourceNotFound) as caught:
        mcp_content.resource_read(agent=agent, context=as_user("ada"), uri="goclaw://memory/memory/private/diary.md")
    assert caught.value.message == "Resource not found"  # the same answer as for what does not exist
    row = ToolInvocation.objects.filter(tool_name=mcp_content.READ_TOOL).latest("created_at")
    assert (row.status, row.agent_key, row.user_id) == ("denied", agent.key, "ada")
    assert "denied by policy" in row.error and row.arguments == {"uri": "goclaw://memory/memory/private/diary.md"}
    # the deny is checked against the canonical URI, whatever spelling the client sends
    with pytest.raises(mcp_content.ResourceNotFound):
        mcp_content.resource_read(agent=agent, context=as_user(), uri="goclaw://memory/memory/%70rivate/diary.md")


@pytest.mark.django_db
def test_a_secret_in_a_context_file_is_scrubbed_and_every_read_is_an_audit_row():
    agent = open_agent()
    context_file_write_by_agent(agent=agent, name="TOOLS.md", content=f"deploy key {SECRET} for the bucket")
    read = mcp_content.resource_read(agent=agent, context=as_user("ada", session_key="s-1", request_id="7"),
                                     uri="goclaw://context/TOOLS.md")
    assert SECRET not in read.text and REDACTED in read.text
    row = ToolInvocation.objects.get(pk=read.invocation_id)
    assert (row.tool_name, row.status, row.user_id, row.session_key, row.request_id) == \
        ("mcp:resources/read", "ok", "ada", "s-1", "7")
    assert row.result_size == len(read.text) and SECRET not in json.dumps(row.arguments)
    with pytest.raises(mcp_content.ResourceNotFound):
        mcp_content.resource_read(agent=agent, context=as_user(), uri="goclaw://context/SOUL.md")
    assert ToolInvocation.objects.filter(tool_name="mcp:resources/read", status="error").count() == 1


@pytest.mark.django_db
def test_a_memory_path_that_holds_a_credential_is_never_offered():
    agent = open_agent()
    remember(agent, f"memory/{SECRET}.md", "named after a key")
    assert uris(agent, as_user()) == []
    with pytest.raises(mcp_content.ResourceNotFound):
        mcp_content.resource_read(agent=agent, context=as_user(), uri=f"goclaw://memory/memory/{SECRET}.md")


@pytest.mark.django_db
def test_content_sections_are_checked_like_tool_lists():
    from goclaw.errors import ValidationError

    for bad in ({"allow": "goclaw://memory/*"}, {"allow": [""]}, {"deny": [1]}, {"only": []}, ["goclaw://*"],
                {"deny": ["x" * 501]}, {"deny": ["a\nb"]}):
        with pytest.raises(ValidationError):
            policy(resources=bad)
    saved, warnings = tool_policy_save(actor=None, policy=ToolPolicy(scope="global", resources={"deny": ["SOUL.md"]},
                                                                     prompts={"allow": ["pdf-*"]}))
    assert any("matches no resource" in w for w in warnings)


@pytest.mark.django_db
def test_the_admin_edits_the_content_sections_with_the_same_checks(admin_client):
    agent = open_agent()
    page = admin_client.get("/admin/tools_app/toolpolicy/add/").content.decode()
    assert 'name="resources"' in page and 'name="prompts"' in page
    form = {"scope": "agent", "agent": agent.pk, "allow": "[]", "deny": "[]", "also_allow": "[]", "enabled": "on",
            "prompts": "{}"}
    refused = admin_client.post("/admin/tools_app/toolpolicy/add/", {**form, "resources": '{"deny": "goclaw://*"}'})
    assert refused.status_code == 200 and "resources.deny: must be a list of patterns" in refused.content.decode()
    saved = admin_client.post("/admin/tools_app/toolpolicy/add/", {**form, "resources": '{"deny": ["goclaw://*"]}'})
    assert saved.status_code == 302 and ToolPolicy.objects.get(agent=agent).resources == {"deny": ["goclaw://*"]}


@pytest.mark.django_db
def test_a_malformed_section_saved_behind_the_checks_back_denies_everything():
    agent = open_agent()
    remember(agent, "MEMORY.md", "x")
    spec = policy(agent)
    ToolPolicy.objects.filter(pk=spec.pk).update(resources={"deny": "goclaw://memory/*"})
    from tools_app.policy import policy_changed

    policy_changed()
    assert uris(agent, as_user()) == []


@pytest.mark.django_db
def test_configuration_as_code_carries_the_content_sections():
    from config_app.errors import ConfigInvalid
    from config_app.services import config_export, config_import

    agent = open_agent(key="content-cfg")
    policy(agent, resources={"deny": ["goclaw://memory/*"]}, prompts={"allow": ["pdf-*"]})
    document = config_export()
    [entry] = [p for p in document["tool_policies"] if p["agent"] == "content-cfg"]
    assert entry["resources"] == {"deny": ["goclaw://memory/*"]} and entry["prompts"] == {"allow": ["pdf-*"]}
    entry["resources"] = {"allow": ["goclaw://context/*"]}
    plan = config_import(document, dry_run=False, prune=False, actor=None)
    assert [c["key"] for c in plan["changed"]] == ["scope=agent, agent=content-cfg"]
    assert ToolPolicy.objects.get(agent=agent).resources == {"allow": ["goclaw://context/*"]}
    entry["prompts"] = {"deny": 5}
    with pytest.raises(ConfigInvalid) as caught:
        config_import(document, dry_run=False, prune=False, actor=None)
    assert any("prompts.deny" in json.dumps(problem) for problem in caught.value.problems)


# --- prompts ------------------------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_prompts_are_the_skills_the_agent_sees_with_their_declared_arguments():
    agent, other = make_agent(), make_agent()
    skill(None, "Release notes", "Notes for {{version}}.", arguments=["version: the version", "audience?: readers"])
    skill(agent, "Own Skill", "mine")
    skill(other, "Not Yours", "theirs")
    entries = mcp_content.prompts_list(agent, as_user())[0]
    assert [(e.name, e.title) for e in entries] == [("own-skill", "Own Skill"), ("release-notes", "Release notes")]
    assert entries[1].arguments == (mcp_content.PromptArgument("version", "the version", True),
                                    mcp_content.PromptArgument("audience", "readers", False))
    with pytest.raises(mcp_content.PromptNotFound):
        mcp_content.prompt_get(agent=agent, context=as_user(), name="not-yours")


@pytest.mark.django_db
def test_prompt_arguments_are_filled_in_as_data_and_checked():
    agent = make_agent()
    skill(agent, "Greet", "Hello {{ who }}, about {{topic}}. Keep {{unknown}} and {{who}}.",
          arguments=["who: the person", "topic?: optional", "tone?: unplaced"])
    got = mcp_content.prompt_get(agent=agent, context=as_user("ada"), name="greet",
                                 arguments={"who": "{{topic}} $(rm -rf /) {% x %}", "tone": "warm"})
    assert got.text == ("Hello {{topic}} $(rm -rf /) {% x %}, about . Keep {{unknown}} and {{topic}} $(rm -rf /) "
                        "{% x %}.\n\nArguments:\ntone: warm")
    row = ToolInvocation.objects.get(pk=got.invocation_id)
    assert (row.tool_name, row.status, row.user_id) == ("mcp:prompts/get", "ok", "ada")
    assert SkillUse.objects.filter(skill__slug="greet", agent_key=agent.key, user_id="ada").count() == 1
    for arguments, reason in (({}, "missing required argument: who"), ({"who": "  "}, "missing required argument"),
                              ({"who": "x", "mood": "y"}, "unknown argument 'mood'"),
                              ({"who": "x" * 10_001}, "at most 10000"), ({"who": "a\x00"}, "NUL")):
        with pytest.raises(mcp_content.ContentRequestInvalid, match=reason):
            mcp_content.prompt_get(agent=agent, context=as_user(), name="greet", arguments=arguments)
    assert ToolInvocation.objects.filter(tool_name="mcp:prompts/get", status="invalid_arguments").count() == 5


@pytest.mark.django_db
def test_prompts_follow_the_policy_and_their_text_is_scrubbed():
    agent = make_agent()
    skill(agent, "Deploy", f"use {SECRET} to deploy")
    skill(agent, "Internal Audit", "internal")
    policy(agent, prompts={"deny": ["internal-*"]})
    assert [e.name for e in mcp_content.prompts_list(agent, as_user())[0]] == ["deploy"]
    got = mcp_content.prompt_get(agent=agent, context=as_user(), name="deploy")
    assert SECRET not in got.text and REDACTED in got.text
    with pytest.raises(mcp_content.PromptNotFound):
        mcp_content.prompt_get(agent=agent, context=as_user(), name="internal-audit")
    assert ToolInvocation.objects.get(tool_name="mcp:prompts/get", status="denied").agent_key == agent.key


@pytest.mark.django_db
def test_skill_md_declares_arguments_in_its_front_matter():
    from tools_app.skills import skill_front_matter_parse

    front = skill_front_matter_parse("---\nname: Notes\ndescription: d\narguments:\n  - version: the version\n"
                                     "  - audience?: who reads them\n---\nbody {{version}}\n")
    assert front.arguments == ({"name": "version", "description": "the version", "required": True},
                               {"name": "audience", "description": "who reads them", "required": False})
    for bad in ("arguments: [9lives]", "arguments: [a, a]", "arguments: ['a b: c']"):
        with pytest.raises(skill_services.SkillInvalid):
            skill_front_matter_parse(f"---\nname: N\ndescription: d\n{bad}\n---\nbody\n")


# --- change detection ----------------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_fingerprints_move_with_what_a_list_or_a_read_would_answer(monkeypatch):
    monkeypatch.setattr(mcp_content, "WATCH_STAMP_SECONDS", 0)  # a watcher's reuse window: each check looks now
    agent = open_agent()
    remember(agent, NOTES, "one", user_id="ada")
    ada = as_user("ada")
    listed, notes = (mcp_content.resources_list_fingerprint(agent, ada),
                     mcp_content.resource_fingerprint(agent, ada, "goclaw://memory/memory/notes.md"))
    remember(agent, NOTES, "two", user_id="ada")  # new text: the list is the same, the resource changed
    assert mcp_content.resources_list_fingerprint(agent, ada) == listed
    assert mcp_content.resource_fingerprint(agent, ada, "goclaw://memory/memory/notes.md") != notes
    remember(agent, "memory/other.md", "x", user_id="bob")  # another user's document changes nothing for ada
    assert mcp_content.resources_list_fingerprint(agent, ada) == listed
    remember(agent, "MEMORY.md", "shared")
    assert mcp_content.resources_list_fingerprint(agent, ada) != listed
    memory_document_delete(agent=agent, user_id="ada", path=NOTES)
    assert mcp_content.resource_fingerprint(agent, ada, "goclaw://memory/memory/notes.md") == "absent"

    prompts = mcp_content.prompts_list_fingerprint(agent, ada)
    skill(agent, "New Skill", "text")
    assert mcp_content.prompts_list_fingerprint(agent, ada) != prompts


@pytest.mark.django_db
def test_a_session_stream_watcher_is_told_which_lists_changed_since_it_last_looked(monkeypatch):
    from mcp_app.server import services
    from mcp_app.server.content import PROMPTS_CHANGED, RESOURCES_CHANGED, session_content_changes
    from tools_app.models import AgentToken
    from tools_app.services.agents import token_issue

    monkeypatch.setattr(mcp_content, "WATCH_STAMP_SECONDS", 0)
    agent = open_agent()
    token_issue(agent=agent, name="mcp")
    services.session_open(session_id="content-s1", token=AgentToken.objects.get(agent=agent),
                          context={"user_id": "ada"}, protocol_version="2025-11-25", client_info={})
    seen: dict = {"gone-session": {}}
    assert session_content_changes(["content-s1"], seen) == {"content-s1": []}  # where the stream starts
    assert "gone-session" not in seen
    remember(agent, NOTES, "new", user_id="ada")
    assert session_content_changes(["content-s1"], seen) == {"content-s1": [RESOURCES_CHANGED]}
    assert session_content_changes(["content-s1"], seen) == {"content-s1": []}  # told once
    remember(agent, "memory/theirs.md", "bob's", user_id="bob")
    skill(agent, "Another", "text")
    assert session_content_changes(["content-s1"], seen) == {"content-s1": [PROMPTS_CHANGED]}


# --- through the MCP endpoint ------------------------------------------------------------------------------------
def _write_context(agent, name, text, user_id=""):
    context_file_write_by_agent(agent=agent, name=name, content=text, user_id=user_id)


@pytest.mark.django_db(transaction=True)
def test_an_mcp_client_lists_and_reads_resources_and_gets_prompts_for_its_user(servers):
    agent, token = agent_with_token(agent_type="open")
    _write_context(agent, "USER.md", "ada's profile", user_id="ada")
    remember(agent, NOTES, f"ada's notes {SECRET}", user_id="ada")
    skill(agent, "Summarise", "Summarise {{topic}}.", arguments=["topic: what to summarise"])

    async def session(url):
        async with client(url, token, headers={"X-Goclaw-User": "ada"}) as c:
            capabilities = c.server_capabilities
            listed = await c.list_resources()
            templates = await c.list_resource_templates()
            read = await c.read_resource("goclaw://memory/memory/notes.md")
            prompts = await c.list_prompts()
            got = await c.get_prompt("summarise", {"topic": "the meeting"})
            with pytest.raises(MCPError) as missing:
                await c.read_resource("goclaw://memory/memory/absent.md")
            with pytest.raises(MCPError) as bad_prompt:
                await c.get_prompt("summarise", {})
            other = await c.list_resources(meta={"goclaw/user_id": "bob"})  # _meta overrides the header
            return capabilities, listed, templates, read, prompts, got, missing.value, bad_prompt.value, other

    capabilities, listed, templates, read, prompts, got, missing, bad_prompt, other = run(session(servers[0].url))
    assert capabilities.resources is not None and capabilities.prompts is not None
    assert [r.uri for r in listed.resources] == ["goclaw://context/USER.md", "goclaw://memory/memory/notes.md"]
    assert {t.uri_template for t in templates.resource_templates} == {"goclaw://context/{name}",
                                                                      "goclaw://memory/{+path}"}
    [content] = read.contents
    assert content.uri == "goclaw://memory/memory/notes.md" and content.mime_type == "text/markdown"
    assert content.text.startswith("ada's notes") and SECRET not in content.text
    assert [(p.name, [a.name for a in p.arguments]) for p in prompts.prompts] == [("summarise", ["topic"])]
    assert got.messages[0].role == "user" and got.messages[0].content.text == "Summarise the meeting."
    assert missing.code == -32602 and missing.data == {"uri": "goclaw://memory/memory/absent.md"}
    assert bad_prompt.code == -32602 and "topic" in bad_prompt.message
    assert [r.uri for r in other.resources] == []
    rows = ToolInvocation.objects.filter(agent_key=agent.key).values_list("tool_name", "status", "user_id")
    assert {("mcp:resources/read", "ok", "ada"), ("mcp:resources/read", "error", "ada"),
            ("mcp:prompts/get", "ok", "ada"), ("mcp:prompts/get", "invalid_arguments", "ada")} <= set(rows)


@pytest.mark.django_db(transaction=True)
def test_in_the_stateless_era_an_unknown_or_denied_resource_is_invalid_params_naming_the_uri(servers):
    agent, token = agent_with_token(agent_type="open")
    _write_context(agent, "SOUL.md", "soul")
    policy(agent, resources={"deny": ["goclaw://context/SOUL.md"]})

    async def session(url):
        async with client(url, token, mode="auto") as c:  # negotiates the stateless era (server/discover)
            errors = []
            for uri in ("test://nonexistent-resource-for-conformance-testing", "goclaw://context/SOUL.md"):
                with pytest.raises(MCPError) as caught:
                    await c.read_resource(uri, cache_mode="bypass")
                errors.append(caught.value)
            return c.protocol_version, c.server_capabilities, errors, await c.list_resources()

    version, capabilities, errors, listed = run(session(servers[1].url))
    assert version == MODERN and capabilities.resources.subscribe is True
    assert capabilities.resources.list_changed is True and capabilities.prompts.list_changed is True
    assert [(e.code, e.message, e.data) for e in errors] == [
        (-32602, "Resource not found", {"uri": "test://nonexistent-resource-for-conformance-testing"}),
        (-32602, "Resource not found", {"uri": "goclaw://context/SOUL.md"})]
    assert listed.resources == []


def _listen(url: str, token: str, notifications: dict, seen: list, ended: threading.Event, user: str = "ada"):
    """A raw `subscriptions/listen` stream read in a thread (frames appended to `seen`)."""
    from tests.mcp_app.test_mcp_server_stateless import modern_headers, request

    body = request("subscriptions/listen", 41, notifications=notifications)

    def read():
        with httpx.stream("POST", url, json=body, headers=modern_headers(token, "subscriptions/listen",
                                                                         **{"X-Goclaw-User": user}),
                          timeout=httpx.Timeout(30, read=90)) as answer:
            for line in answer.iter_lines():
                if line.startswith("data:"):
                    seen.append(json.loads(line[5:]))
        ended.set()

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_a_listen_stream_hears_of_resource_and_prompt_changes_made_anywhere(servers):
    from tools_app.models import AgentToken
    from tools_app.services.agents import token_revoke

    agent, token = agent_with_token(agent_type="open")
    remember(agent, NOTES, "first", user_id="ada")
    notes = "goclaw://memory/memory/notes.md"
    seen: list[dict] = []
    ended = threading.Event()
    reader = _listen(servers[0].url, token, {"resourcesListChanged": True, "promptsListChanged": True,
                                              "resourceSubscriptions": [notes]}, seen, ended)
    wait_until(lambda: seen, timeout=30, message="the acknowledgement")
    honored = seen[0]["params"]["notifications"]
    assert honored == {"resourcesListChanged": True, "promptsListChanged": True, "resourceSubscriptions": [notes]}

    def heard(method, **params):
        return lambda: any(m.get("method") == method and all(m["params"].get(k) == v for k, v in params.items())
                           for m in seen)

    remember(agent, NOTES, "second", user_id="ada")  # written here: the server learns of it from PostgreSQL
    wait_until(heard("notifications/resources/updated", uri=notes), timeout=30, message="resources/updated")
    assert not heard("notifications/resources/list_changed")()  # new text is not a new list
    remember(agent, "memory/other.md", "bob's", user_id="bob")
    remember(agent, "MEMORY.md", "shared")
    wait_until(heard("notifications/resources/list_changed"), timeout=30, message="resources/list_changed")
    skill(agent, "Fresh Skill", "text")
    wait_until(heard("notifications/prompts/list_changed"), timeout=30, message="prompts/list_changed")
    assert all(m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 41 for m in seen)
    assert not any(m["method"] == "notifications/tools/list_changed" for m in seen)  # never asked for

    token_revoke(token=AgentToken.objects.get(agent=agent))
    assert ended.wait(30), "the stream outlived its token"
    reader.join(5)
