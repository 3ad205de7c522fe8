"""goclaw's MCP endpoint attacked by a hostile client holding a real agent token: malformed JSON-RPC, oversized and
hostile context headers, another agent's session, and the main-port proxy. Every answer is a clean refusal, never
a 500 or a traceback. The uvicorn servers and helpers are the conformance module's."""
from __future__ import annotations

import json

import httpx
import pytest

from tests.mcp_app import test_mcp_server as conformance
from tests.mcp_app.test_mcp_server import agent_with_token, sse_messages

# the conformance module's fixtures: its uvicorn servers (one pair for this module) and fresh cache counters
servers, server = conformance.servers, conformance.server
_generations_past_what_the_servers_saw = conformance._generations_past_what_the_servers_saw

pytestmark = [pytest.mark.django_db(transaction=True)]
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "hostile", "version": "0"}}}


def headers_for(token: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json", **extra}


def open_session(url: str, token: str) -> str:
    opened = httpx.post(url, json=INIT, headers=headers_for(token), timeout=30)
    assert opened.status_code == 200, opened.text
    session_id = opened.headers["mcp-session-id"]
    initialized = httpx.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                             headers=headers_for(token, **{"Mcp-Session-Id": session_id}), timeout=30)
    assert initialized.status_code == 202, initialized.text
    return session_id


HOSTILE_BODIES = {
    "not json": b"{this is not json",
    "not utf-8": b"\xff\xfe\x00{",
    "a batch": json.dumps([{"jsonrpc": "2.0", "id": i, "method": "tools/list"} for i in range(50)]).encode(),
    "deep nesting": b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "datetime", "arguments": '
                    + b'{"a": ' * 5000 + b"1" + b"}" * 5000 + b"}}",
    "a deep array": b"[" * 100_000 + b"]" * 100_000,
    "a result for nothing": b'{"jsonrpc": "2.0", "id": 99, "result": {}}',
    "a method of the wrong type": b'{"jsonrpc": "2.0", "id": 1, "method": 7}',
    "arguments that are not an object": b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", '
                                        b'"params": {"name": "datetime", "arguments": [1, 2]}}',
    "an empty body": b"",
}


@pytest.mark.parametrize("body", HOSTILE_BODIES.values(), ids=HOSTILE_BODIES.keys())
def test_malformed_json_rpc_on_a_session_is_refused_cleanly(server, body):
    agent, token = agent_with_token()
    session_id = open_session(server.url, token)
    answer = httpx.post(server.url, content=body, timeout=30,
                        headers=headers_for(token, **{"Mcp-Session-Id": session_id, "Mcp-Protocol-Version": "2025-06-18"}))
    assert answer.status_code < 500, answer.text
    assert "Traceback" not in answer.text
    still = httpx.post(server.url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, timeout=30,
                       headers=headers_for(token, **{"Mcp-Session-Id": session_id, "Mcp-Protocol-Version": "2025-06-18"}))
    assert still.status_code == 200 and sse_messages(still.text)[0]["result"]["tools"]  # the session still serves


def test_a_body_larger_than_the_limit_is_a_413_envelope(server):
    agent, token = agent_with_token()
    answer = httpx.post(server.url, content=b" " * (5 * 1024 * 1024), headers=headers_for(token), timeout=60)
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "request_too_large"


@pytest.mark.parametrize("header, value", [
    ("X-Goclaw-User", "u" * 256),
    ("X-Goclaw-Channel", "c" * 65),
    ("X-Goclaw-Chat-Id", "9" * 300),
])
def test_an_oversized_context_header_is_a_400_envelope_naming_the_field(server, header, value):
    agent, token = agent_with_token()
    answer = httpx.post(server.url, json=INIT, headers=headers_for(token, **{header: value}), timeout=30)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "invalid_context" and len(error["details"]) == 1


def test_a_hostile_meta_context_is_an_error_result_not_a_protocol_error(server):
    agent, token = agent_with_token()
    session_id = open_session(server.url, token)
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "datetime", "arguments": {}, "_meta": {"goclaw/user_id": {"$ne": ""}, "goclaw/channel": "x" * 10_000}}}
    answer = httpx.post(server.url, json=call, timeout=30,
                        headers=headers_for(token, **{"Mcp-Session-Id": session_id, "Mcp-Protocol-Version": "2025-06-18"}))
    result = sse_messages(answer.text)[0]["result"]
    assert result["isError"] is True and result["structuredContent"]["status"] == "invalid_context"
    assert set(result["structuredContent"]["details"]) == {"user_id", "channel"}
    assert "x" * 100 not in answer.text  # the hostile value is not echoed back


def test_another_agents_session_id_cannot_be_ended_or_streamed(server):
    owner, owner_token = agent_with_token()
    intruder, intruder_token = agent_with_token()
    session_id = open_session(server.url, owner_token)
    for method in ("DELETE", "GET"):
        answer = httpx.request(method, server.url, timeout=30,
                               headers=headers_for(intruder_token, **{"Mcp-Session-Id": session_id}))
        assert answer.status_code == 404, (method, answer.text)
    still = httpx.post(server.url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, timeout=30,
                       headers=headers_for(owner_token, **{"Mcp-Session-Id": session_id, "Mcp-Protocol-Version": "2025-06-18"}))
    assert still.status_code == 200  # the owner's session survived the intruder


def test_a_hostile_session_id_is_answered_as_unknown(server):
    agent, token = agent_with_token()
    for session_id in ("x" * 5000, "../../etc/passwd", "' OR 1=1 --"):
        answer = httpx.post(server.url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, timeout=30,
                            headers=headers_for(token, **{"Mcp-Session-Id": session_id}))
        assert answer.status_code == 404 and "Traceback" not in answer.text


def test_the_main_port_proxy_does_not_relay_hop_by_hop_or_smuggled_headers(server, settings):
    from django.test import Client as DjangoClient

    settings.HOST, settings.MCP_PORT = "127.0.0.1", server.port
    agent, token = agent_with_token()
    answer = DjangoClient().post("/mcp", json.dumps(INIT), content_type="application/json",
                                 HTTP_AUTHORIZATION=f"Bearer {token}", HTTP_ACCEPT="application/json, text/event-stream",
                                 HTTP_CONNECTION="close, X-Goclaw-User", HTTP_TRANSFER_ENCODING="chunked",
                                 HTTP_HOST="localhost", HTTP_X_FORWARDED_HOST="169.254.169.254")
    assert answer.status_code == 200
    assert not answer.has_header("Transfer-Encoding") and not answer.has_header("Connection")
    assert sse_messages(b"".join(answer.streaming_content).decode())[0]["result"]["serverInfo"]["name"] == "goclaw"


def test_a_revoked_token_ends_its_open_get_stream_and_another_token_may_reopen_it(server):
    import asyncio

    from tools_app.services.agents import token_issue, token_revoke

    agent, token = agent_with_token()
    session_id = open_session(server.url, token)
    opened_with = agent.tokens.get()
    stream_headers = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream", "Mcp-Session-Id": session_id,
                      "Mcp-Protocol-Version": "2025-06-18"}

    async def stream_until_revoked() -> int:
        async with httpx.AsyncClient(timeout=httpx.Timeout(10, read=60)) as http:
            async with http.stream("GET", server.url, headers=stream_headers) as answer:
                assert answer.status_code == 200
                await asyncio.to_thread(token_revoke, token=opened_with)
                async for _ in answer.aiter_bytes():
                    pass  # the server ends the stream: the loop ends (a read timeout would fail the test)
                return answer.status_code

    assert asyncio.run(stream_until_revoked()) == 200
    fresh = token_issue(agent=agent, name="fresh")[1]
    with httpx.stream("GET", server.url, timeout=10, headers={**stream_headers, "Authorization": f"Bearer {fresh}"}) as again:
        assert again.status_code == 200  # the ended stream left no "one stream per session" conflict behind


def test_an_initialize_keeps_only_a_short_client_description(server):
    from mcp_app.models import MCPServerSession

    agent, token = agent_with_token()
    bloated = {**INIT, "params": {**INIT["params"], "clientInfo": {
        "name": "n" * 5000, "version": "1", "padding": "p" * 2_000_000, "nested": {"deep": ["x"] * 1000}}}}
    opened = httpx.post(server.url, json=bloated, headers=headers_for(token), timeout=60)
    assert opened.status_code == 200, opened.text
    row = MCPServerSession.objects.get(session_id=opened.headers["mcp-session-id"])
    assert row.client_info == {"name": "n" * 200, "version": "1"}


def test_the_main_port_proxy_answers_503_when_the_mcp_port_speaks_garbage(settings):
    import socket
    import threading

    from django.test import Client as DjangoClient

    listener = socket.create_server(("127.0.0.1", 0))

    def garbage():
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(b"this is not HTTP\r\n\r\n")

    threading.Thread(target=garbage, daemon=True).start()
    settings.HOST, settings.MCP_PORT = "127.0.0.1", listener.getsockname()[1]
    try:
        answer = DjangoClient().post("/mcp", json.dumps(INIT), content_type="application/json",
                                     HTTP_AUTHORIZATION="Bearer gclw_x_y")
    finally:
        listener.close()
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "mcp_unavailable"


def test_the_main_port_proxy_has_the_mcp_ports_body_limit_and_answers_it_with_the_envelope(server, settings):
    from django.test import Client as DjangoClient

    settings.HOST, settings.MCP_PORT = "127.0.0.1", server.port
    agent, token = agent_with_token()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}", "HTTP_ACCEPT": "application/json, text/event-stream"}
    padded = {**INIT, "params": {**INIT["params"], "clientInfo": {"name": "big", "version": "1", "pad": "p" * 2_000_000}}}
    opened = DjangoClient().post("/mcp", json.dumps(padded), content_type="application/json", **auth)
    assert opened.status_code == 200  # over Django's form limit, under the MCP port's: relayed
    too_big = DjangoClient().post("/mcp", b" " * (5 * 1024 * 1024), content_type="application/json", **auth)
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "request_too_large"


def test_an_unexpected_handler_failure_reaches_the_client_only_as_a_generic_internal_error():
    import asyncio

    from mcp.shared.exceptions import MCPError

    from mcp_app.server.handlers import contained

    async def broken(ctx, params):
        raise KeyError("SELECT sealed FROM internals WHERE path = '/srv/goclaw/var'")

    with pytest.raises(MCPError) as refused:
        asyncio.run(contained(broken)(None, None))
    assert refused.value.code == -32603 and "internals" not in str(refused.value) and "/srv" not in str(refused.value)


# --- DNS rebinding: Origin and Host, on the MCP port and through the main port's proxy ------------------------------
def _foreign_origins(port: int) -> dict[str, str]:
    return {
        "another site": "http://evil.example",
        "another site on the MCP port": f"http://evil.example:{port}",
        "a rebound name that starts like ours": f"http://127.0.0.1.evil.example:{port}",
        "user info before our host": f"http://evil.example@127.0.0.1:{port}",
        "localhost as a subdomain": "https://localhost.evil.example",
        "the opaque null origin": "null",
        "a path after the host": f"http://127.0.0.1:{port}/mcp",
        "two origins in one header": f"http://127.0.0.1:{port}, http://evil.example",
        "another scheme": "chrome-extension://abcdefghijklmnop",
        "an empty origin": "",
    }


def test_a_foreign_host_and_origin_are_refused_on_the_mcp_port_before_authentication(server):
    """A page on evil.example rebound to 127.0.0.1 sends its own Host and Origin: refused even with a valid token
    (the page would not have one, but nothing of the request is looked at first)."""
    agent, token = agent_with_token()
    rebound = {"Host": f"evil.example:{server.port}", "Origin": f"http://evil.example:{server.port}"}
    answer = httpx.post(server.url, json=INIT, headers=headers_for(token, **rebound), timeout=30)
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "disallowed_host"
    for origin in _foreign_origins(server.port).values():
        for credentials in (headers_for(token), {"Content-Type": "application/json"}):
            refused = httpx.post(server.url, json=INIT, headers={**credentials, "Origin": origin}, timeout=30)
            assert refused.status_code == 403, (origin, refused.text)
            assert refused.json()["error"]["code"] == "origin_not_allowed"
    two_headers = httpx.post(server.url, json=INIT, timeout=30, headers=[
        *headers_for(token).items(), ("Origin", f"http://127.0.0.1:{server.port}"), ("Origin", "http://evil.example")])
    assert two_headers.status_code == 403
    for method in ("GET", "DELETE"):
        assert httpx.request(method, server.url, headers={**headers_for(token), "Origin": "http://evil.example"},
                             timeout=30).status_code == 403


@pytest.mark.parametrize("origin", [None, "http://127.0.0.1:{port}", "http://localhost:3000", "https://LOCALHOST",
                                    "http://[::1]:{port}"])
def test_clients_without_origin_and_pages_on_our_own_hosts_are_served(server, origin):
    agent, token = agent_with_token()
    extra = {} if origin is None else {"Origin": origin.format(port=server.port)}
    answer = httpx.post(server.url, json=INIT, headers=headers_for(token, **extra), timeout=30)
    assert answer.status_code == 200, answer.text


def test_an_origin_listed_in_the_setting_is_served_and_others_still_refused(django_db_blocker, tmp_path):
    from tests.mcp_app.test_mcp_server import UvicornProcess
    from tests.servers import DaphneProcess, up_env

    with django_db_blocker.unblock():
        env = up_env(tmp_path / "var", DATABASE_URL=DaphneProcess.database_url(), GOCLAW_LOG_LEVEL="warning",
                     GOCLAW_MCP_ALLOWED_ORIGINS="https://app.example.com,http://localhost:5173")
    own = UvicornProcess(env, tmp_path / "uvicorn.log")
    try:
        own.wait_listening()
        agent, token = agent_with_token()
        for origin, status in (("https://app.example.com", 200), ("https://APP.example.com:443", 200),
                               ("http://app.example.com", 403), ("https://app.example.com:8443", 403),
                               ("https://sub.app.example.com", 403)):
            answer = httpx.post(own.url, json=INIT, headers=headers_for(token, Origin=origin), timeout=30)
            assert answer.status_code == status, (origin, answer.text)
    finally:
        own.stop()


def test_the_main_port_proxy_refuses_a_foreign_origin_and_serves_its_own(server, settings):
    from django.test import Client as DjangoClient

    settings.HOST, settings.MCP_PORT = "127.0.0.1", server.port
    agent, token = agent_with_token()
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}", "HTTP_ACCEPT": "application/json, text/event-stream"}
    for origin in _foreign_origins(8000).values():
        refused = DjangoClient().post("/mcp", json.dumps(INIT), content_type="application/json", HTTP_ORIGIN=origin, **auth)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "origin_not_allowed", origin
    served = DjangoClient().post("/mcp", json.dumps(INIT), content_type="application/json",
                                 HTTP_ORIGIN="http://testserver", **auth)
    assert served.status_code == 200
    assert sse_messages(b"".join(served.streaming_content).decode())[0]["result"]["serverInfo"]["name"] == "goclaw"


# --- JSON-RPC errors name the request they answer -------------------------------------------------------------------
def _error_of(answer: httpx.Response):
    assert answer.status_code >= 400 and answer.headers["content-type"].startswith("application/json"), answer.text
    return answer.json()


@pytest.mark.parametrize("request_id", ["req-7", 42, 0, ""])
def test_an_unsupported_protocol_version_error_echoes_the_request_id(server, request_id):
    agent, token = agent_with_token()
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/list"}
    answer = httpx.post(server.url, json=body, headers=headers_for(token, **{"Mcp-Protocol-Version": "2099-01-01"}),
                        timeout=30)
    error = _error_of(answer)
    assert answer.status_code == 400 and error["error"]["code"] == -32022 and error["id"] == request_id


def test_session_and_sdk_errors_echo_the_request_id_too(server):
    agent, token = agent_with_token()
    unknown = httpx.post(server.url, json={"jsonrpc": "2.0", "id": 5, "method": "tools/list"}, timeout=30,
                         headers=headers_for(token, **{"Mcp-Session-Id": "f" * 32}))
    assert unknown.status_code == 404 and _error_of(unknown)["id"] == 5
    no_session = httpx.post(server.url, json={"jsonrpc": "2.0", "id": "nine", "method": "tools/list"}, timeout=30,
                            headers=headers_for(token))  # the SDK's own "Missing session ID"
    assert no_session.status_code == 400 and _error_of(no_session)["id"] == "nine"
    session_id = open_session(server.url, token)
    unacceptable = httpx.post(server.url, json={"jsonrpc": "2.0", "id": 11, "method": "tools/list"}, timeout=30,
                              headers=headers_for(token, **{"Mcp-Session-Id": session_id, "Accept": "text/html",
                                                            "Mcp-Protocol-Version": "2025-06-18"}))
    assert unacceptable.status_code == 406 and _error_of(unacceptable)["id"] == 11


def test_an_error_id_is_null_only_when_the_request_could_not_be_read(server):
    agent, token = agent_with_token()
    stale = headers_for(token, **{"Mcp-Protocol-Version": "2099-01-01"})
    for body in (b"{not json", b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
                 b'{"jsonrpc": "2.0", "id": {"nested": 1}, "method": "tools/list"}',
                 b'{"jsonrpc": "2.0", "id": true, "method": "tools/list"}', b"[]", b'"just a string"'):
        answer = httpx.post(server.url, content=body, headers=stale, timeout=30)
        assert _error_of(answer)["id"] is None, body


def test_a_batch_is_answered_with_one_error_per_request_by_its_id(server):
    agent, token = agent_with_token()
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
             {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": "b", "method": "tools/call", "params": {"name": "datetime"}},
             {"jsonrpc": "2.0", "id": 3, "result": {}},
             5]
    stale = httpx.post(server.url, json=batch, headers=headers_for(token, **{"Mcp-Protocol-Version": "2099-01-01"}),
                       timeout=30)
    assert [error["id"] for error in _error_of(stale)] == [1, "b", None]
    session_id = open_session(server.url, token)
    refused = httpx.post(server.url, json=batch, timeout=30,  # the SDK refuses batches: per member too
                         headers=headers_for(token, **{"Mcp-Session-Id": session_id, "Mcp-Protocol-Version": "2025-06-18"}))
    answers = _error_of(refused)
    assert [error["id"] for error in answers] == [1, "b", None] and all("error" in a for a in answers)
