"""goclaw as an MCP server: real uvicorn processes serving `mcp_app.server.asgi` against the test database, driven
by the SDK's client. One server (two for revival) for the whole module keeps the suite fast."""
from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.factories import make_agent
from tests.servers import PROPAGATION_SECONDS, ROOT, DaphneProcess, free_port, up_env, wait_until

pytestmark = [pytest.mark.django_db(transaction=True)]
APPROVAL_WAIT = 3  # GOCLAW_MCP_APPROVAL_WAIT of the servers under test


class UvicornProcess:
    """uvicorn serving goclaw's MCP endpoint on a free port, sharing the test database."""

    def __init__(self, env: dict[str, str], log: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.log = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "mcp_app.server.asgi:application", "--host", "127.0.0.1",
             "--port", str(self.port), "--no-access-log", "--lifespan", "on"],
            cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_listening(self) -> "UvicornProcess":
        def answers():
            assert self.proc.poll() is None, Path(self.log.name).read_text(errors="replace")[-3000:]
            try:
                return httpx.post(self.url, timeout=2).status_code == 401
            except httpx.HTTPError:
                return False
        wait_until(answers, timeout=60, message="the MCP server")
        return self

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


@pytest.fixture(scope="module")
def servers(django_db_setup, django_db_blocker, tmp_path_factory):
    """Two MCP server processes on the same database."""
    with django_db_blocker.unblock():
        url = DaphneProcess.database_url()
    home = tmp_path_factory.mktemp("mcp-server")
    env = up_env(home / "var", DATABASE_URL=url, GOCLAW_MCP_APPROVAL_WAIT=str(APPROVAL_WAIT), GOCLAW_LOG_LEVEL="warning")
    started = [UvicornProcess(env, home / f"uvicorn-{i}.log") for i in range(2)]
    try:
        yield [server.wait_listening() for server in started]
    finally:
        for server in started:
            server.stop()


@pytest.fixture(autouse=True)
def _generations_past_what_the_servers_saw(db):
    """Flushing the database between tests restarts the cache counters, so a change could land on a value the
    servers already saw (and they would keep serving their cache): start each test's counters at a new value."""
    from goclaw.models import CacheGeneration
    from mcp_app.server.services import RESUMES_CACHE, SESSIONS_CACHE
    from tools_app.policy import POLICY_CACHE
    from tools_app.toolsets import TOOLSETS_CACHE

    for name in (POLICY_CACHE, TOOLSETS_CACHE, RESUMES_CACHE, SESSIONS_CACHE):
        CacheGeneration.objects.update_or_create(name=name, defaults={"value": time.time_ns()})


@pytest.fixture
def server(servers):
    return servers[0]


def agent_with_token(**fields):
    from tools_app.services.agents import token_issue

    agent = make_agent(**fields)
    return agent, token_issue(agent=agent, name="mcp")[1]


def client(url: str, token: str, **kwargs) -> Client:
    """The SDK's client with the agent's token, in the session era (initialize) unless `mode` says otherwise: the
    stateless era (2026-07-28) has its own tests (test_mcp_server_stateless.py)."""
    headers = {"Authorization": f"Bearer {token}", **kwargs.pop("headers", {})}
    kwargs.setdefault("mode", "legacy")
    return Client(streamable_http_client(url, http_client=httpx_client(headers)), **kwargs)


def httpx_client(headers: dict):
    import httpx2

    return httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60, read=60))


def rest_catalog(token: str, **query) -> list[dict]:
    from rest_framework.test import APIClient

    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    response = api.get("/api/v1/tools", query)
    assert response.status_code == 200, response.content
    return response.json()["tools"]


def session_of(agent) -> str:
    from mcp_app.models import MCPServerSession

    return MCPServerSession.objects.filter(agent=agent).values_list("session_id", flat=True).first()


def run(coro):
    return asyncio.run(coro)


def cautious(agent):
    from tools_app.services.agents import agent_update

    return agent_update(agent=agent, mode="cautious")


def decide_when_requested(agent, decision: str) -> threading.Thread:
    """A person decides the agent's next approval request from another thread, as soon as it exists."""
    from django.db import connection

    from tools_app.models import ApprovalRequest
    from tools_app.services import approvals as svc

    def decide():
        try:
            req = wait_until(lambda: ApprovalRequest.objects.filter(agent=agent, status="pending").first(),
                             timeout=30, message="the approval request")
            svc.approval_decide(approval_id=req.pk, decision=decision, actor=None)
        finally:
            connection.close()

    thread = threading.Thread(target=decide)
    thread.start()
    return thread


# --- the endpoint ------------------------------------------------------------------------------------------
def test_tools_list_is_exactly_the_rest_catalog_in_the_same_order(server):
    agent, token = agent_with_token()

    async def listed():
        async with client(server.url, token, headers={"X-Goclaw-User": "u-1"}) as c:
            assert c.server_capabilities.tools.list_changed is True
            return (await c.list_tools()).tools

    tools = run(listed())
    rest = rest_catalog(token, user_id="u-1")
    assert [t.name for t in tools] == [t["name"] for t in rest]
    assert [t.description for t in tools] == [t["description"] for t in rest]
    assert [t.input_schema for t in tools] == [t["parameters"] for t in rest]


def test_a_call_runs_through_the_pipeline_and_is_audited(server):
    from tools_app.models import ToolInvocation

    agent, token = agent_with_token()

    async def call():
        async with client(server.url, token) as c:
            return await c.call_tool("datetime", {}, meta={"goclaw/session_key": "s-meta"})

    result = run(call())
    assert result.is_error is False and result.structured_content["status"] == "ok"
    assert result.content[0].text == result.structured_content["for_llm"] and "for_user" not in result.structured_content
    row = ToolInvocation.objects.get(pk=result.structured_content["invocation_id"])
    assert (row.agent_key, row.tool_name, row.session_key) == (agent.key, "datetime", "s-meta")


def test_a_denied_call_and_an_unknown_tool_are_error_results_not_protocol_errors(server):
    from tools_app.models import ToolPolicy
    from tools_app.services.policy import tool_policy_save

    agent, token = agent_with_token()
    tool_policy_save(actor=None, policy=ToolPolicy(scope="agent", agent=agent, deny=["datetime"]))

    async def calls():
        async with client(server.url, token) as c:
            return await c.call_tool("datetime", {}), await c.call_tool("no_such_tool", {})

    denied, unknown = run(calls())
    assert denied.is_error is True and denied.structured_content["status"] == "denied"
    assert unknown.is_error is True and unknown.structured_content["status"] != "ok"


def test_unauthenticated_requests_get_401_with_the_error_envelope(server):
    response = httpx.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    assert challenge.startswith('Bearer realm="goclaw", resource_metadata="') and "error=" not in challenge
    metadata = httpx.get(challenge.split('resource_metadata="')[1].split('"')[0]).json()
    assert metadata["resource"] == server.url and metadata["authorization_servers"]  # RFC 9728: where to authorize
    assert response.json()["error"]["code"] == "not_authenticated"
    wrong = httpx.post(server.url, json={}, headers={"Authorization": "Bearer gclw_nope_nope"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "not_authenticated"
    assert 'error="invalid_token"' in wrong.headers["www-authenticate"]


def test_two_agents_on_one_server_see_only_their_own_catalogs_and_sessions(server):
    from tools_app.models import ToolPolicy
    from tools_app.services.policy import tool_policy_save

    first, first_token = agent_with_token()
    second, second_token = agent_with_token()
    tool_policy_save(actor=None, policy=ToolPolicy(scope="agent", agent=second, deny=["datetime"]))

    async def both():
        async with client(server.url, first_token) as a, client(server.url, second_token) as b:
            names_a = [t.name for t in (await a.list_tools()).tools]
            names_b = [t.name for t in (await b.list_tools()).tools]
            return names_a, names_b, a.session.session_id if hasattr(a.session, "session_id") else None

    names_a, names_b, _ = run(both())
    assert "datetime" in names_a and "datetime" not in names_b
    assert names_a == [t["name"] for t in rest_catalog(first_token)]
    assert names_b == [t["name"] for t in rest_catalog(second_token)]


def test_another_agents_token_on_a_session_id_is_answered_as_unknown(server):
    from mcp_app.models import MCPServerSession

    first, first_token = agent_with_token()
    _, second_token = agent_with_token()

    async def open_session():
        async with client(server.url, first_token) as c:
            await c.list_tools()
            session_id = await asyncio.to_thread(
                lambda: MCPServerSession.objects.filter(agent=first).values_list("session_id", flat=True).first())
            async with httpx.AsyncClient() as raw:
                return await raw.post(server.url, json={"jsonrpc": "2.0", "id": 9, "method": "tools/list"},
                                      headers={"Authorization": f"Bearer {second_token}", "Mcp-Session-Id": session_id,
                                               "Accept": "application/json, text/event-stream"})

    response = run(open_session())
    assert response.status_code == 404


def test_a_revoked_token_is_refused_mid_session(server):
    from tools_app.models import AgentToken
    from tools_app.services.agents import token_revoke

    agent, token = agent_with_token()

    async def session():
        async with client(server.url, token) as c:
            assert (await c.call_tool("datetime", {})).is_error is False
            await asyncio.to_thread(lambda: token_revoke(token=AgentToken.objects.get(agent=agent)))
            return await asyncio.to_thread(session_of, agent)

    session_id = run(session())

    def refused():  # the client's next request, once the revocation reached the server process (within a second)
        answer = httpx.post(server.url, json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
                            headers={"Authorization": f"Bearer {token}", "Mcp-Session-Id": session_id,
                                     "Accept": "application/json, text/event-stream"})
        return answer if answer.status_code == 401 else None

    answer = wait_until(refused, timeout=PROPAGATION_SECONDS + 5, message="the revoked token refused")
    assert answer.json()["error"]["code"] == "not_authenticated"


def test_a_session_opened_on_one_process_is_served_by_another(servers):
    from mcp_app.models import MCPServerSession

    agent, token = agent_with_token()
    first, second = servers

    holder: list[str] = []

    async def revive():  # the SDK client binds one URL: the second process gets the session's id over raw HTTP
        async with client(first.url, token) as c:
            await c.list_tools()
            holder.append(await asyncio.to_thread(session_of, agent))
            return await asyncio.to_thread(raw_call, second.url, token, holder[0], c.protocol_version)

    response = run(revive())
    assert response.status_code == 200, response.text
    result = next(message["result"] for message in sse_messages(response.text) if message.get("id") == 5)
    assert result["isError"] is False and result["structuredContent"]["status"] == "ok"
    assert not MCPServerSession.objects.filter(agent=agent).exists()  # the client's closing DELETE ended it
    time.sleep(PROPAGATION_SECONDS)
    assert raw_call(second.url, token, holder[0], "2025-06-18").status_code == 404  # ended for the other process too


def raw_call(url: str, token: str, session_id: str, version: str) -> httpx.Response:
    return httpx.post(url, json={"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "datetime", "arguments": {}}},
                      headers={"Authorization": f"Bearer {token}", "Mcp-Session-Id": session_id, "Mcp-Protocol-Version": version,
                               "Accept": "application/json, text/event-stream"}, timeout=30)


def sse_messages(text: str) -> list[dict]:
    """The JSON-RPC messages of an answer: an SSE stream's events, or one JSON body."""
    if text.lstrip().startswith("{"):
        return [json.loads(text)]
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:") and line[5:].strip()]


# --- approvals over MCP ------------------------------------------------------------------------------------
def test_an_approval_granted_while_the_client_waits_runs_the_call_with_progress(server):
    agent, token = agent_with_token()
    cautious(agent)
    progress = []

    async def call():
        async with client(server.url, token) as c:
            return await c.call_tool("exec", {"command": "echo granted-run"},
                                     progress_callback=lambda p, total, message: progress.append(message))

    thread = decide_when_requested(agent, "allow_once")
    result = run(call())
    thread.join()
    assert result.is_error is False and result.structured_content["status"] == "ok"
    assert "granted-run" in result.content[0].text and result.structured_content["approval_id"]
    assert progress and "waiting for a person" in progress[0]


def test_a_denied_approval_is_an_error_result(server):
    agent, token = agent_with_token()
    cautious(agent)

    async def call():
        async with client(server.url, token) as c:
            return await c.call_tool("exec", {"command": "touch nope"})

    thread = decide_when_requested(agent, "deny")
    result = run(call())
    thread.join()
    assert result.is_error is True and result.structured_content["status"] == "denied"
    assert not (agent.workspace_path / "nope").exists()


def test_a_call_still_pending_at_the_deadline_resumes_once_with_the_wait_tool(server):
    from mcp_app.models import MCPApprovalResume
    from tools_app.services import approvals as svc

    agent, token = agent_with_token()
    cautious(agent)

    async def session():
        async with client(server.url, token) as c:
            assert "goclaw_approval_wait" not in [t.name for t in (await c.list_tools()).tools]
            pending = await c.call_tool("exec", {"command": "echo resumed-run"})
            approval_id = pending.structured_content["approval_id"]
            listed = [t.name for t in (await c.list_tools()).tools]
            sealed = await asyncio.to_thread(lambda: MCPApprovalResume.objects.get(approval_id=approval_id).sealed_arguments)
            await asyncio.to_thread(svc.approval_decide, approval_id=approval_id, decision="allow_once", actor=None)
            resumed = await c.call_tool("goclaw_approval_wait", {"approval_id": approval_id})
            again = await c.call_tool("goclaw_approval_resume", {"approval_id": approval_id})
            after = [t.name for t in (await c.list_tools()).tools]
            return pending, listed, sealed, resumed, again, after

    pending, listed, sealed, resumed, again, after = run(session())
    assert pending.is_error is False and pending.structured_content["status"] == "pending_approval"
    assert "goclaw_approval_wait" in pending.content[0].text
    assert {"goclaw_approval_wait", "goclaw_approval_resume"} <= set(listed)
    assert "resumed-run" not in sealed  # the exact arguments are kept sealed
    assert resumed.is_error is False and "resumed-run" in resumed.content[0].text
    assert again.is_error is True  # ran once: the second resume is refused
    assert "goclaw_approval_wait" not in after and not MCPApprovalResume.objects.exists()


def test_another_agents_approval_id_is_not_found_by_the_resume_tools(server):
    from mcp_app.server.services import resume_store
    from tools_app.models import ApprovalRequest

    owner, owner_token = agent_with_token()
    cautious(owner)
    other, other_token = agent_with_token()

    async def owner_call():
        async with client(server.url, owner_token) as c:
            return await c.call_tool("exec", {"command": "echo mine"})

    approval_id = run(owner_call()).structured_content["approval_id"]
    resume_store(approval_id=approval_id, agent=owner, arguments={"command": "echo mine"})

    async def steal():
        async with client(server.url, other_token) as c:
            return await c.call_tool("goclaw_approval_resume", {"approval_id": approval_id})

    stolen = run(steal())
    assert stolen.is_error is True and "no call of yours" in stolen.content[0].text
    assert ApprovalRequest.objects.get(pk=approval_id).consumed_at is None


# --- listChanged -------------------------------------------------------------------------------------------
def test_a_policy_change_sends_tools_list_changed(server):
    from tools_app.models import ToolPolicy
    from tools_app.services.policy import tool_policy_save

    agent, token = agent_with_token()

    async def session():
        notified = asyncio.Event()

        async def on_message(message):
            if getattr(message, "method", None) == "notifications/tools/list_changed" or \
                    type(message).__name__ == "ToolListChangedNotification":
                notified.set()

        async with client(server.url, token, message_handler=on_message) as c:
            assert "datetime" in [t.name for t in (await c.list_tools()).tools]
            await asyncio.to_thread(tool_policy_save, actor=None,
                                    policy=ToolPolicy(scope="agent", agent=agent, deny=["datetime"]))
            await asyncio.wait_for(notified.wait(), timeout=20)
            return [t.name for t in (await c.list_tools()).tools]

    assert "datetime" not in run(session())


def test_a_stale_session_is_told_on_its_next_post_before_the_result(server):
    """Clients without a standalone stream (behind the main-port proxy) learn of the change on their next call."""
    from tools_app.models import ToolPolicy
    from tools_app.services.policy import tool_policy_save

    agent, token = agent_with_token()
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
    with httpx.Client(timeout=30) as raw:
        opened = raw.post(server.url, json=init, headers=headers)
        headers.update({"Mcp-Session-Id": opened.headers["mcp-session-id"], "Mcp-Protocol-Version": "2025-06-18"})
        raw.post(server.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        raw.post(server.url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=headers)
        tool_policy_save(actor=None, policy=ToolPolicy(scope="agent", agent=agent, deny=["exec"]))
        time.sleep(PROPAGATION_SECONDS)  # the contract: other processes see a catalog change within this
        call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "datetime", "arguments": {}}}
        first = sse_messages(raw.post(server.url, json=call, headers=headers).text)
        second = sse_messages(raw.post(server.url, json={**call, "id": 4}, headers=headers).text)
        ended = raw.delete(server.url, headers=headers)
    assert [m.get("method") or m["id"] for m in first] == ["notifications/tools/list_changed", 3]
    assert [m.get("method") or m["id"] for m in second] == [4]  # told once
    assert ended.status_code == 200 and session_of(agent) is None


# --- the main port and the stdio proxy ---------------------------------------------------------------------
def test_the_main_port_proxies_posts_and_declines_the_get_stream(server, settings):
    from django.test import Client as DjangoClient

    settings.HOST, settings.MCP_PORT = "127.0.0.1", server.port
    agent, token = agent_with_token()
    browser = DjangoClient()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}", "HTTP_ACCEPT": "application/json, text/event-stream"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "proxied", "version": "0"}}}
    opened = browser.post("/mcp", json.dumps(init), content_type="application/json", **auth)
    assert opened.status_code == 200 and opened["Mcp-Session-Id"]
    assert sse_messages(b"".join(opened.streaming_content).decode())[0]["result"]["serverInfo"]["name"] == "goclaw"
    get = browser.get("/mcp", **auth)
    assert get.status_code == 405 and get["Allow"] == "POST, DELETE" and get.json()["error"]["code"] == "method_not_allowed"
    anonymous = browser.post("/mcp", json.dumps(init), content_type="application/json")
    assert anonymous.status_code == 401 and json.loads(b"".join(anonymous.streaming_content))["error"]["code"] == "not_authenticated"


def test_the_stdio_proxy_lists_and_calls_with_the_token_from_the_environment(server, django_db_blocker):
    from mcp import StdioServerParameters

    agent, token = agent_with_token()
    env = up_env(Path(agent.workspace) / "var", DATABASE_URL=DaphneProcess.database_url(), GOCLAW_AGENT_TOKEN=token,
                 GOCLAW_LOG_LEVEL="warning")
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=env,
                                   args=["manage.py", "mcp_stdio", "--agent", agent.key, "--url", server.url])

    async def session():
        async with Client(params) as c:
            names = [t.name for t in (await c.list_tools()).tools]
            return names, await c.call_tool("datetime", {}, meta={"goclaw/session_key": "via-stdio"})

    names, result = run(session())
    assert names == [t["name"] for t in rest_catalog(token)]
    assert result.is_error is False and result.structured_content["status"] == "ok"


def test_the_stdio_proxy_refuses_a_token_of_another_agent(server):
    agent, _ = agent_with_token()
    _, other_token = agent_with_token()
    env = up_env(Path(agent.workspace) / "var", DATABASE_URL=DaphneProcess.database_url(), GOCLAW_AGENT_TOKEN=other_token)
    done = subprocess.run([sys.executable, "manage.py", "mcp_stdio", "--agent", agent.key], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode != 0 and "not an active token of agent" in done.stderr


def test_the_stdio_proxy_names_the_endpoint_it_cannot_reach_without_a_traceback(server):
    agent, token = agent_with_token()
    env = up_env(Path(agent.workspace) / "var", DATABASE_URL=DaphneProcess.database_url(), GOCLAW_AGENT_TOKEN=token)
    for url, expected in ((f"http://127.0.0.1:{free_port()}/mcp", "could not reach goclaw's MCP endpoint at"),
                          (server.url.replace("/mcp", "/not-mcp"), "refused the session (Not Found); check --url")):
        done = subprocess.run([sys.executable, "manage.py", "mcp_stdio", "--agent", agent.key, "--url", url], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        assert done.returncode != 0 and expected in done.stderr and url in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) <= 2, done.stderr


def test_the_purge_forgets_idle_sessions_and_calls_that_can_no_longer_resume():
    from datetime import timedelta

    from django.utils import timezone

    from mcp_app.models import MCPApprovalResume, MCPServerSession
    from mcp_app.server.services import resume_store, session_open, sessions_purge_idle
    from tools_app.models import AgentToken, ApprovalRequest

    agent, _ = agent_with_token()
    token = AgentToken.objects.get(agent=agent)
    for sid in ("idle", "fresh"):
        session_open(session_id=sid, token=token, context={}, protocol_version="2025-06-18", client_info={})
    MCPServerSession.objects.filter(pk="idle").update(last_seen_at=timezone.now() - timedelta(days=2))
    now = timezone.now()
    pending, denied = (ApprovalRequest.objects.create(agent=agent, tool_name="exec", arguments={}, args_hash="x", status=status,
                                                      requested_at=now, expires_at=now + timedelta(hours=1))
                       for status in ("pending", "denied"))
    for approval in (pending, denied):
        resume_store(approval_id=approval.pk, agent=agent, arguments={"command": "echo"})
    sessions_purge_idle()
    assert list(MCPServerSession.objects.values_list("pk", flat=True)) == ["fresh"]
    assert list(MCPApprovalResume.objects.values_list("approval_id", flat=True)) == [pending.pk]
