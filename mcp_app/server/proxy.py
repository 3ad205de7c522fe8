"""`/mcp` on the main (WSGI) port: a thin reverse proxy to the MCP server `up` runs on GOCLAW_MCP_PORT, for POST
and DELETE, streaming the answer through as it comes (progress and notifications included). A stateless `tools/call`
the direct path covers never reaches it: the main port's WSGI application answers that first, in its own thread
(mcp_app.server.wsgi). GET is declined with 405, as the spec allows: a standalone SSE stream would hold a WSGI
thread for as long as the client keeps it.
A browser Origin that is not allowed is refused here first (DNS-rebinding protection, mcp_app.server.security);
the Host Django validated and the Origin are passed on, so the MCP port checks the same request again."""
from __future__ import annotations

import http.client
import logging

from django.conf import settings
from django.http import StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from goclaw.api import error_response
from mcp_app.server.security import origin_allowed

logger = logging.getLogger("goclaw.mcp.server")

FORWARDED_REQUEST_HEADERS = ("authorization", "content-type", "accept", "mcp-session-id", "mcp-protocol-version",
                             "mcp-method", "mcp-name", "last-event-id", "x-request-id", "origin")
FORWARDED_REQUEST_PREFIXES = ("x-goclaw-", "mcp-param-")  # call context; arguments mirrored into headers (2026-07-28)
FORWARDED_RESPONSE_HEADERS = ("content-type", "mcp-session-id", "www-authenticate", "cache-control", "allow")
CHUNK = 65536


def _upstream_host() -> str:
    """Where this machine's MCP server listens (a wildcard bind is reached on loopback)."""
    return {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(settings.HOST, settings.HOST)


def _headers(request) -> dict[str, str]:
    forwarded = {name: value for name, value in request.headers.items()
                 if name.lower() in FORWARDED_REQUEST_HEADERS or name.lower().startswith(FORWARDED_REQUEST_PREFIXES)}
    return {**forwarded, "Host": request.get_host()}  # validated by Django against ALLOWED_HOSTS


@csrf_exempt
def mcp_proxy(request):
    if not origin_allowed(request.headers.get("Origin")):
        return error_response(403, "origin_not_allowed", "requests from this Origin are refused (DNS-rebinding "
                              "protection); allow it with GOCLAW_MCP_ALLOWED_ORIGINS")
    if request.method not in ("POST", "DELETE"):
        return error_response(405, "method_not_allowed", "this port answers MCP POST and DELETE only; open the "
                              f"standalone stream on the MCP port ({settings.MCP_PORT})", headers={"Allow": "POST, DELETE"})
    # the MCP port's limit, not Django's form-sized one (which would answer an HTML 400); read without holding more.
    # The SDK is imported here, not with the URLconf: a web server process that never proxies never loads it.
    from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE

    body = request.read(DEFAULT_MAX_REQUEST_BODY_SIZE + 1)
    if len(body) > DEFAULT_MAX_REQUEST_BODY_SIZE:
        return error_response(413, "request_too_large", "request body is too large")
    upstream = http.client.HTTPConnection(_upstream_host(), settings.MCP_PORT, timeout=settings.MCP_APPROVAL_WAIT + 3700)
    try:
        upstream.request(request.method, "/mcp", body=body, headers=_headers(request))
        answer = upstream.getresponse()
    except ValueError:  # a header value HTTP forbids (a line break) that a lenient front server let through
        upstream.close()
        return error_response(400, "invalid_header", "a forwarded header holds a character HTTP forbids (a line break)")
    except (OSError, http.client.HTTPException) as exc:  # down, or answering something that is not HTTP
        upstream.close()
        logger.error("MCP server unreachable on port %s: %s", settings.MCP_PORT, exc)
        return error_response(503, "mcp_unavailable", "the MCP server is not reachable; retry later", headers={"Retry-After": "5"})

    def relay():
        try:
            while chunk := answer.read1(CHUNK):
                yield chunk
        finally:
            upstream.close()

    response = StreamingHttpResponse(relay(), status=answer.status)
    for name in FORWARDED_RESPONSE_HEADERS:
        value = answer.getheader(name)
        if value is not None:
            response[name] = value
    response["X-Accel-Buffering"] = "no"  # a front proxy must not hold back progress events
    return response
