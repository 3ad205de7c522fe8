"""The stateless `tools/call` served without the SDK's per-request scaffolding (mcp_app.server.direct) answers
exactly as the SDK's own stateless entry does: each request goes through goclaw's MCP app twice, once as it runs and
once with the direct path turned off, and the two answers (status, content type, JSON body) must be the same, up to
what differs between any two runs of a call (its invocation id, the time it ran). Requests the direct path does not
cover reach the SDK untouched."""
from __future__ import annotations

import asyncio
import json
import re

import httpx
import pytest
from mcp_types import CLIENT_CAPABILITIES_META_KEY

from tools_app.models import ToolInvocation

from tests.mcp_app.test_mcp_server import _generations_past_what_the_servers_saw, agent_with_token  # noqa: F401
from tests.mcp_app.test_mcp_server_stateless import META, modern_headers, request
from tests.servers import free_port

pytestmark = [pytest.mark.django_db(transaction=True)]
VOLATILE = re.compile(r'"(invocation_id|duration_ms|started_at|finished_at|created_at)":\s*("[^"]*"|[0-9.]+|null)'
                      r'|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[^"\\ )]*')


def call(name, arguments=None, *, request_id=1, meta=None) -> dict:
    """A stateless tools/call (with `meta` added to its `_meta`)."""
    return request("tools/call", request_id, _meta={**META, **(meta or {})}, name=name,
                   **({"arguments": arguments} if arguments is not None else {}))


def headers(token: str, name, method: str = "tools/call", **extra) -> dict[str, str]:
    """The stateless request headers with the JSON body's Content-Type (the body is sent as bytes)."""
    return modern_headers(token, method, name if isinstance(name, str) else None,
                          **{"Content-Type": "application/json", **extra})


@pytest.fixture
def one_thread(monkeypatch):
    """The app's synchronous code in one thread of the test's own, whose database connection is closed at the end
    (the test database is dropped after the run)."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connections

    from mcp_app.server import handlers

    pool = ThreadPoolExecutor(max_workers=1)
    monkeypatch.setattr(handlers, "_THREADS", pool)
    yield
    pool.submit(connections.close_all).result()
    pool.shutdown()


@pytest.fixture
def exchange(monkeypatch, one_thread):
    """`exchange(body, headers, direct=...)`: (status, content type, body text, whether the direct path answered)
    from a fresh instance of goclaw's MCP app, in process."""
    from mcp_app.server import asgi, direct

    answered = direct.answered
    taken: list[bool] = []

    async def observed(*args, **kwargs):
        taken.append(await answered(*args, **kwargs) if use_direct[0] else False)
        return taken[-1]

    use_direct = [True]
    monkeypatch.setattr(direct, "answered", observed)

    async def run(body, request_headers):
        app = asgi.MCPApplication()
        async with app.manager.run():
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8002") as http:
                answer = await http.post("/mcp", content=body if isinstance(body, bytes) else json.dumps(body),
                                         headers=request_headers, timeout=30)
        return answer.status_code, answer.headers.get("content-type"), answer.text

    def exchange(body, request_headers, *, direct: bool = True):
        use_direct[0] = direct
        taken.clear()
        status, content_type, text = asyncio.run(run(body, request_headers))
        return status, content_type, text, bool(taken and taken[-1])

    return exchange


def same_answer(exchange, body, request_headers) -> tuple[int, dict | list | None, bool]:
    """The answer, asserted identical with and without the direct path; (status, parsed body, whether the direct
    path answered)."""
    direct_status, direct_type, direct_text, direct_taken = exchange(body, request_headers)
    sdk_status, sdk_type, sdk_text, taken = exchange(body, request_headers, direct=False)
    assert not taken
    assert (direct_status, direct_type) == (sdk_status, sdk_type)
    assert VOLATILE.sub("<volatile>", direct_text) == VOLATILE.sub("<volatile>", sdk_text)
    try:
        return direct_status, json.loads(direct_text), direct_taken
    except ValueError:
        return direct_status, None, direct_taken


def test_the_direct_path_answers_calls_exactly_as_the_sdk_does(exchange, subtests):
    _, token = agent_with_token()
    cases = {
        "a call that runs": (call("datetime", {}), "datetime", "ok"),
        "a call without arguments": (call("datetime"), "datetime", "ok"),
        "a string request id": (call("datetime", {}, request_id="r-1"), "datetime", "ok"),
        "arguments the tool rejects": (call("datetime", {"timezone": 5}), "datetime", "error"),
        "an unknown tool": (call("no_such_tool", {}), "no_such_tool", "error"),
        "an invalid context in _meta": (call("datetime", {}, meta={"goclaw/user_id": {"not": "a string"}}), "datetime", "error"),
        "arguments that are not an object": (call("datetime", "now"), "datetime", "-32602"),
        "a name that is not a string": (call(7, {}), "7", "-32020"),
        "a Mcp-Name that is not the body's": (call("datetime", {}), "other", "-32020"),
    }
    for label, (body, name, expected) in cases.items():
        with subtests.test(label):
            status, answer, taken = same_answer(exchange, body, headers(token, name))
            if expected == "ok":
                assert status == 200 and answer["result"]["isError"] is False and taken
                assert answer["result"]["resultType"] == "complete"
                assert answer["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "goclaw"
            elif expected == "error":
                assert status == 200 and answer["result"]["isError"] is True and taken
            else:
                assert answer["error"]["code"] == int(expected) and answer["id"] == body["id"]


def main_port(body, request_headers: dict, host: str = "127.0.0.1:8000") -> tuple[int, str, str]:
    """(status, content type, body text) of a POST to `/mcp` through the main port's WSGI application."""
    from goclaw.wsgi import application

    with httpx.Client(transport=httpx.WSGITransport(app=application), base_url=f"http://{host}") as http:
        answer = http.post("/mcp", content=body if isinstance(body, bytes) else json.dumps(body), headers=request_headers)
    return answer.status_code, answer.headers.get("content-type"), answer.text


def test_the_main_port_answers_stateless_calls_in_its_own_thread_as_the_mcp_port_does(exchange, subtests, settings):
    settings.MCP_PORT = free_port()  # nothing listens there: a proxied request would be a 503
    _, token = agent_with_token()
    cases = {
        "a call that runs": (call("datetime", {}), "datetime"),
        "a string request id": (call("datetime", {}, request_id="r-1"), "datetime"),
        "arguments the tool rejects": (call("datetime", {"timezone": 5}), "datetime"),
        "an unknown tool": (call("no_such_tool", {}), "no_such_tool"),
        "an invalid context in _meta": (call("datetime", {}, meta={"goclaw/user_id": {"not": "a string"}}), "datetime"),
        "arguments that are not an object": (call("datetime", "now"), "datetime"),
        "routing headers with surrounding spaces": (call("datetime", {}), " datetime "),
    }
    for label, (body, name) in cases.items():
        with subtests.test(label):
            status, content_type, text = main_port(body, headers(token, name))
            mcp_status, mcp_type, mcp_text, taken = exchange(body, headers(token, name))
            assert taken and (status, content_type) == (mcp_status, mcp_type)
            assert VOLATILE.sub("<volatile>", text) == VOLATILE.sub("<volatile>", mcp_text)
    assert ToolInvocation.objects.filter(tool_name="datetime", status="ok").count() == 6  # both ports ran each call


def test_the_main_port_leaves_every_other_request_to_django_and_the_mcp_port(subtests, settings):
    settings.MCP_PORT = free_port()  # nothing listens there: a proxied request is answered 503 mcp_unavailable
    _, token = agent_with_token()
    tasks = {CLIENT_CAPABILITIES_META_KEY: {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
    proxied = {
        "no token": (call("datetime", {}), {k: v for k, v in headers(token, "datetime").items() if k != "Authorization"}),
        "a token that is not one": (call("datetime", {}), headers("gclw_not-a-token", "datetime")),
        "a declared tasks extension": (call("datetime", {}, meta=tasks), headers(token, "datetime")),
        "a progress token (answered with SSE)": (call("datetime", {}, meta={"progressToken": "p"}), headers(token, "datetime")),
        "a Mcp-Name that is not the body's": (call("datetime", {}), headers(token, "other")),
        "a session-era request": (call("datetime", {}), {**headers(token, "datetime"), "Mcp-Protocol-Version": "2025-11-25"}),
        "an unsupported version": (call("datetime", {}), {**headers(token, "datetime"), "Mcp-Protocol-Version": "2099-01-01"}),
        "an invalid context header": (call("datetime", {}), headers(token, "datetime", **{"X-Goclaw-User": "x" * 5000})),
        "a body that is not JSON": (b"{not json", headers(token, "datetime")),
        "no JSON in Accept": (call("datetime", {}), headers(token, "datetime", Accept="text/event-stream")),
        "tools/list": (request("tools/list", 4), headers(token, None, "tools/list")),
    }
    for label, (body, request_headers) in proxied.items():
        with subtests.test(label):
            status, _, text = main_port(body, request_headers)
            assert status == 503 and json.loads(text)["error"]["code"] == "mcp_unavailable"
    with subtests.test("a foreign Origin"):
        status, _, text = main_port(call("datetime", {}), headers(token, "datetime", Origin="http://evil.example"))
        assert status == 403 and json.loads(text)["error"]["code"] == "origin_not_allowed"
    with subtests.test("a Host not in ALLOWED_HOSTS"):
        assert main_port(call("datetime", {}), headers(token, "datetime"), host="evil.example")[0] == 400
    assert not ToolInvocation.objects.exists()


def test_a_failing_handler_is_an_internal_error_without_its_text_on_both_paths(exchange, monkeypatch):
    from mcp_app.server import handlers

    def broken(call):
        raise RuntimeError("SELECT secret FROM internals")

    monkeypatch.setattr(handlers, "tool_execute", broken)
    _, token = agent_with_token()
    status, answer, taken = same_answer(exchange, call("datetime", {}), headers(token, "datetime"))
    assert taken and status == 200 and answer["error"]["code"] == -32603 and "secret" not in json.dumps(answer)


def test_requests_the_direct_path_does_not_cover_reach_the_sdk(exchange, subtests):
    _, token = agent_with_token()
    tasks = {CLIENT_CAPABILITIES_META_KEY: {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
    cases = {
        "a declared tasks extension": (call("datetime", {}, meta=tasks), headers(token, "datetime")),
        "a progress token (answered with SSE)": (call("datetime", {}, meta={"progressToken": "p"}), headers(token, "datetime")),
        "a request id written as a decimal": (call("datetime", {}, request_id=2.0), headers(token, "datetime")),
        "a body that is not JSON": (b"{not json", headers(token, "datetime")),
        "a notification": ({"jsonrpc": "2.0", "method": "tools/call", "params": {"_meta": META, "name": "datetime"}},
                           headers(token, "datetime")),
        "a text/plain content type": (call("datetime", {}), headers(token, "datetime", **{"Content-Type": "text/plain"})),
        "a Content-Type given twice, JSON second": (call("datetime", {}), [
            *[(k, v) for k, v in headers(token, "datetime").items() if k != "Content-Type"],
            ("Content-Type", "text/plain"), ("Content-Type", "application/json")]),
        "no JSON in Accept": (call("datetime", {}), headers(token, "datetime", Accept="text/event-stream")),
        "no _meta envelope": ({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "datetime"}},
                              headers(token, "datetime")),
        "tools/list": (request("tools/list", 4), headers(token, None, "tools/list")),
    }
    for label, (body, request_headers) in cases.items():
        with subtests.test(label):
            status, content_type, _, taken = exchange(body, request_headers)
            assert not taken
            assert (status, content_type) == exchange(body, request_headers, direct=False)[:2]
