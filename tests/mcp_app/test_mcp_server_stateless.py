"""goclaw's MCP endpoint in the stateless era (protocol 2026-07-28): the SDK's client negotiates it through
`server/discover`, every request is self-contained (no session row, any process answers), routing headers must
match the body, lists are sorted and carry cache hints, and `subscriptions/listen` streams catalog changes.
The uvicorn servers and helpers are the session-era module's."""
from __future__ import annotations

import http.client
import json
import threading

import httpx
import pytest
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY

from tests.mcp_app import test_mcp_server as session_era
from tests.mcp_app.test_mcp_server import agent_with_token, cautious, client, decide_when_requested, rest_catalog, run
from tests.servers import wait_until

servers, server = session_era.servers, session_era.server
_generations_past_what_the_servers_saw = session_era._generations_past_what_the_servers_saw

pytestmark = [pytest.mark.django_db(transaction=True)]
MODERN = "2026-07-28"
META = {PROTOCOL_VERSION_META_KEY: MODERN, CLIENT_INFO_META_KEY: {"name": "raw", "version": "0"},
        CLIENT_CAPABILITIES_META_KEY: {}}


def modern_headers(token: str, method: str, name: str | None = None, **extra: str) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream",
               "Mcp-Protocol-Version": MODERN, "Mcp-Method": method, **extra}
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


def request(method: str, request_id=1, **params) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {"_meta": META, **params}}


def test_the_sdk_client_negotiates_the_stateless_revision_and_lists_a_sorted_private_catalog(servers):
    from mcp_app.models import MCPServerSession

    agent, token = agent_with_token()

    async def listed(url):
        async with client(url, token, mode="auto", headers={"X-Goclaw-User": "u-1"}) as c:
            return c.protocol_version, c.server_capabilities, await c.list_tools()

    version, capabilities, result = run(listed(servers[0].url))
    assert version == MODERN and capabilities.tools.list_changed is True
    names = [t.name for t in result.tools]
    assert names == sorted(t["name"] for t in rest_catalog(token, user_id="u-1"))
    assert result.ttl_ms > 0 and result.cache_scope == "private"
    assert not MCPServerSession.objects.filter(agent=agent).exists()  # nothing about a call lives in a session
    assert [t.name for t in run(listed(servers[1].url))[2].tools] == names  # any process answers alike


def test_a_stateless_call_runs_through_the_pipeline_with_its_meta_context_and_is_audited(server):
    from tools_app.models import ToolInvocation

    agent, token = agent_with_token()

    async def call():
        async with client(server.url, token, mode=MODERN) as c:
            return await c.call_tool("datetime", {}, meta={"goclaw/session_key": "stateless-1"})

    result = run(call())
    assert result.is_error is False and result.structured_content["status"] == "ok"
    row = ToolInvocation.objects.get(pk=result.structured_content["invocation_id"])
    assert (row.agent_key, row.tool_name, row.session_key) == (agent.key, "datetime", "stateless-1")


def test_server_discover_names_both_eras_and_the_tasks_extension(server):
    _, token = agent_with_token()
    answer = httpx.post(server.url, json=request("server/discover"), headers=modern_headers(token, "server/discover"),
                        timeout=30)
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert MODERN in result["supportedVersions"] and result["resultType"] == "complete"
    assert result["capabilities"]["tools"]["listChanged"] is True
    assert "io.modelcontextprotocol/tasks" in result["capabilities"]["extensions"]


def test_routing_headers_must_match_the_body(server):
    _, token = agent_with_token()
    call = request("tools/call", 7, name="datetime", arguments={})
    wrong_method = httpx.post(server.url, json=call, headers=modern_headers(token, "tools/list"), timeout=30)
    assert wrong_method.status_code == 400 and wrong_method.json()["error"]["code"] == -32020
    assert wrong_method.json()["id"] == 7
    wrong_name = httpx.post(server.url, json=call, headers=modern_headers(token, "tools/call", "exec"), timeout=30)
    assert wrong_name.status_code == 400 and wrong_name.json()["error"]["code"] == -32020
    right = httpx.post(server.url, json=call, headers=modern_headers(token, "tools/call", "datetime"), timeout=30)
    assert right.status_code == 200 and right.json()["result"]["resultType"] == "complete"
    raw = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)  # httpx refuses to send such a header
    raw.request("POST", "/mcp", json.dumps(call), {**modern_headers(token, " tools/call\t", " datetime "),
                                                   "Content-Type": "application/json"})
    padded = raw.getresponse()
    assert padded.status == 200, padded.read()  # whitespace around a field value is not part of it (RFC 9110)
    raw.close()


def test_an_unsupported_version_names_the_versions_discover_lists_and_the_request_id(server):
    _, token = agent_with_token()
    body = request("tools/list", "q-1")
    answer = httpx.post(server.url, json=body, headers=modern_headers(token, "tools/list", **{"Mcp-Protocol-Version": "2031-01-01"}),
                        timeout=30)
    error = answer.json()
    assert answer.status_code == 400 and error["error"]["code"] == -32022 and error["id"] == "q-1"
    assert error["error"]["data"] == {"supported": [MODERN], "requested": "2031-01-01"}  # as server/discover says


def test_unauthenticated_stateless_requests_are_refused_before_anything_runs(server):
    answer = httpx.post(server.url, json=request("tools/list"), headers={"Mcp-Protocol-Version": MODERN,
                                                                         "Mcp-Method": "tools/list"}, timeout=30)
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "not_authenticated"


def test_an_approval_in_the_stateless_era_waits_with_progress_naming_the_approval(server):
    agent, token = agent_with_token()
    cautious(agent)
    progress = []

    async def call():
        async with client(server.url, token, mode=MODERN) as c:
            return await c.call_tool("exec", {"command": "echo stateless-granted"},
                                     progress_callback=lambda p, total, message: progress.append(message))

    thread = decide_when_requested(agent, "allow_once")
    result = run(call())
    thread.join()
    assert result.is_error is False and "stateless-granted" in result.content[0].text
    approval_id = result.structured_content["approval_id"]
    assert progress and approval_id in progress[0]


def test_a_listen_stream_is_told_when_the_callers_catalog_changes_and_ends_with_its_token(server):
    from tools_app.models import AgentToken, ToolPolicy
    from tools_app.services.agents import token_revoke
    from tools_app.services.policy import tool_policy_save

    agent, token = agent_with_token()
    listen = request("subscriptions/listen", 31, notifications={"toolsListChanged": True, "promptsListChanged": True})
    seen: list[dict] = []
    ended = threading.Event()

    def read_stream():
        with httpx.stream("POST", server.url, json=listen, headers=modern_headers(token, "subscriptions/listen"),
                          timeout=httpx.Timeout(30, read=60)) as answer:
            assert answer.headers["content-type"].startswith("text/event-stream")
            for line in answer.iter_lines():
                if line.startswith("data:"):
                    seen.append(json.loads(line[5:]))
        ended.set()

    reader = threading.Thread(target=read_stream, daemon=True)
    reader.start()
    wait_until(lambda: seen, timeout=30, message="the acknowledgement")
    ack = seen[0]
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"]["toolsListChanged"] is True
    assert ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 31

    tool_policy_save(actor=None, policy=ToolPolicy(scope="agent", agent=agent, deny=["exec"]))
    wait_until(lambda: any(m.get("method") == "notifications/tools/list_changed" for m in seen), timeout=30,
               message="the list_changed notification")
    changed = next(m for m in seen if m.get("method") == "notifications/tools/list_changed")
    assert changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 31

    token_revoke(token=AgentToken.objects.get(agent=agent))
    assert ended.wait(30), "the stream outlived its token"
    reader.join(5)


def test_the_main_port_forwards_the_stateless_routing_headers(server, settings):
    from django.test import Client as DjangoClient

    settings.HOST, settings.MCP_PORT = "127.0.0.1", server.port
    _, token = agent_with_token()
    headers = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in modern_headers(token, "tools/call", "datetime").items()}
    call = request("tools/call", 3, name="datetime", arguments={})
    answer = DjangoClient().post("/mcp", json.dumps(call), content_type="application/json", **headers)
    body = json.loads(b"".join(answer.streaming_content))
    assert answer.status_code == 200 and body["result"]["structuredContent"]["status"] == "ok"
    mismatched = DjangoClient().post("/mcp", json.dumps(call), content_type="application/json",
                                     **{**headers, "HTTP_MCP_NAME": "exec"})
    assert mismatched.status_code == 400 and json.loads(b"".join(mismatched.streaming_content))["error"]["code"] == -32020
