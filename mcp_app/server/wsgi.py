"""The main port's `/mcp` in front of Django (`answered`, registered with goclaw.fronts by mcp_app's ready()): a
stateless (2026-07-28) `tools/call` answered with JSON, nearly all of an agent's traffic, is answered here in the
request's thread (mcp_app.server.direct.answer_here) without Django's request handling (middleware for browsers, URL
resolution), which it does not use: as on the MCP port's own app, the bearer token is its only credential. What
Django would refuse first is left to Django (a Host not in ALLOWED_HOSTS, a body over the limit), as is every request
this does not answer: the view at `/mcp` (mcp_app.server.proxy) proxies it to the MCP port."""
from __future__ import annotations

import io
import logging

from django.core import signals

from mcp_app.server.security import host_allowed, origin_allowed

logger = logging.getLogger("goclaw.mcp.server")
MAX_BODY = 4 * 1024 * 1024  # the SDK's DEFAULT_MAX_REQUEST_BODY_SIZE (not imported: web processes load the SDK lazily)


def _headers(environ) -> list[tuple[bytes, bytes]]:
    """The request's headers as an ASGI scope holds them (lower-case names, latin-1 bytes)."""
    headers = [(name[5:].replace("_", "-").lower().encode("latin-1"), value.encode("latin-1"))
               for name, value in environ.items() if name.startswith("HTTP_")]
    return [*headers, *((name.replace("_", "-").lower().encode("latin-1"), environ[name].encode("latin-1"))
                        for name in ("CONTENT_TYPE", "CONTENT_LENGTH") if environ.get(name))]


def answered(environ) -> tuple[int, bytes] | None:
    """(status, JSON body) when this POST to `/mcp` is answered here; None leaves it to Django, body intact."""
    if not host_allowed(environ.get("HTTP_HOST")) or not origin_allowed(environ.get("HTTP_ORIGIN")):
        return None
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return None
    if not 0 < length <= MAX_BODY:
        return None
    body = environ["wsgi.input"].read(length)
    environ["wsgi.input"] = io.BytesIO(body)  # Django reads it again when it serves the request
    from mcp_app.server.direct import answer_here  # here: the SDK loads on a process's first MCP call

    signals.request_started.send(sender=None, environ=environ)  # stale DB connections closed, as Django does
    try:
        return answer_here(_headers(environ), body)
    except Exception:  # before any call ran (the handler's own failures are answered): Django's view proxies it
        logger.exception("MCP request on the main port could not be answered here")
        return None
    finally:
        signals.request_finished.send(sender=None)
