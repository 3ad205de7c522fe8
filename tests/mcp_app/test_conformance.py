"""goclaw against the official MCP conformance suite (@modelcontextprotocol/conformance, pinned in tools/conformance,
docs/mcp-conformance.md), for both protocol revisions goclaw serves: 2025-11-25 (initialize handshake, sessions)
and 2026-07-28 (stateless, per-request _meta). One `manage.py up` on the test database serves both runs, which go
at the same time.

The agent under test is an ordinary agent with a token and a catalog made through goclaw's services (the suite's
two text fixture tools as custom tools, a context file, a memory document, a skill: conformance.fixture_catalog).

The suite connects to a bare URL and has no way to send an Authorization header, and goclaw refuses every request
without an agent token. So the suite talks to a small forwarder (conformance_proxy.py) that plays the part of an
MCP client configured with the agent's token: it adds `Authorization: Bearer <token>` to each request and forwards
everything else byte for byte (request line, Host, Origin, Mcp-Session-Id, MCP-Protocol-Version, Mcp-Method, body),
and streams the answers back as they come (SSE included). What the suite judges, including its DNS-rebinding and
header-validation probes, is therefore goclaw's own behaviour; the last test here holds the forwarder to that.

Scoring (conformance.evaluate): every scenario the revision's requirement set requires must pass, except those
conformance_not_applicable.yaml sets aside with the reason (what the scenario needs that goclaw by design does not
have). The table of every scenario (pass / FAIL / n/a / not scored) is printed, and is the failure message."""
from __future__ import annotations

import socket
import threading

import pytest

from tests.factories import make_agent
from tests.mcp_app.conformance import (REVISIONS, conformance_run, fixture_catalog, not_applicable_entries, render,
                                       start_goclaw)
from tests.mcp_app.conformance_proxy import TokenProxy
from tests.servers import DaphneProcess, up_env


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_goclaw_passes_every_applicable_required_scenario_of_both_protocol_revisions(tmp_path):
    from tools_app.services.agents import token_issue

    not_applicable_entries()  # a stale or unjustified entry fails before anything starts
    agent = make_agent(key="conformance")
    fixture_catalog(agent)
    _, token = token_issue(agent=agent, name="conformance")
    env = up_env(tmp_path / "var", DATABASE_URL=DaphneProcess.database_url(), GOCLAW_LOG_LEVEL="warning",
                 GOCLAW_ADMIN_PASSWORD="conformance-admin-pw-1")
    up, mcp_port = start_goclaw(env, tmp_path / "up.log")
    try:
        reports = conformance_run(mcp_port, token, tmp_path / "conformance")
    finally:
        assert up.stop() == 0

    tables = "\n\n".join(render(report) for report in reports.values())
    print(tables)
    failing = [f"{revision} {row.scenario}:\n    " + "\n    ".join(row.failures)
               for revision, report in reports.items() for row in report.failing]
    assert not failing, ("applicable required MCP conformance scenarios fail:\n" + "\n".join(failing)
                         + f"\n\n{tables}\n\n(suite output: {tmp_path / 'conformance'}/<revision>.log)")
    for revision in REVISIONS:  # the not-applicable list never sets a whole revision aside
        assert reports[revision].applicable > 0, render(reports[revision])


# --- the forwarder changes nothing but the token ----------------------------------------------------------------
class RecordingUpstream:
    """A raw HTTP/1.1 server on 127.0.0.1 that records the bytes of the requests it receives (one keep-alive
    connection, `requests` of them) and answers each with a chunked SSE stream in two parts, the second sent only
    once the test sets `release`."""

    def __init__(self, requests: int) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.requests, self.received = requests, bytearray()
        self.release = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn, conn.makefile("rb") as incoming:
            for _ in range(self.requests):
                length = 0
                while (line := incoming.readline()) not in (b"\r\n", b""):
                    self.received += line
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                self.received += line + incoming.read(length)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                             + _chunk(b"data: first\n\n"))
                assert self.release.wait(10)
                self.release.clear()
                conn.sendall(_chunk(b"data: second\n\n") + b"0\r\n\r\n")
        self.sock.close()


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _receive_until(sock: socket.socket, marker: bytes) -> bytes:
    received = b""
    while marker not in received:
        data = sock.recv(65536)
        assert data, f"the connection closed before {marker!r}"
        received += data
    return received


def test_the_forwarder_adds_only_the_token_and_streams_answers_as_they_come():
    upstream = RecordingUpstream(requests=2)
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}'
    first = (b"POST /mcp HTTP/1.1\r\nHost: evil.example.com\r\nOrigin: http://evil.example.com\r\n"
             b"Mcp-Session-Id: abc\r\nMCP-Protocol-Version: 2025-11-25\r\nContent-Type: application/json\r\n"
             b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    second = b"DELETE /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer the-clients-own\r\n\r\n"
    with TokenProxy(upstream.port, "gclw_token") as proxy, socket.create_connection(("127.0.0.1", proxy.port)) as client:
        for request in (first, second):
            client.sendall(request)
            streamed = _receive_until(client, b"data: first")  # reaches the client while the stream is still open
            assert b"second" not in streamed
            upstream.release.set()
            _receive_until(client, b"0\r\n\r\n")
        upstream.thread.join(10)

    request_line, rest = first.split(b"\r\n", 1)
    # byte for byte but the one header line; a request that carries its own Authorization is left as it is
    assert bytes(upstream.received) == request_line + b"\r\nAuthorization: Bearer gclw_token\r\n" + rest + second
