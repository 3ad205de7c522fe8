"""Requests an app answers before Django's request handling, on the main port's WSGI application (goclaw.wsgi):
an app registers, from its AppConfig.ready(), an exact path and method with a function `answer(environ)` that
returns (status, JSON body) when it answers the request itself, or None to leave it to Django (with the request's
body still readable). For traffic whose only credential is a bearer token and that needs none of the middleware
browsers do: mcp_app's stateless `tools/call` (mcp_app.server.wsgi)."""
from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus

Answer = Callable[[dict], "tuple[int, bytes] | None"]
_FRONTS: dict[tuple[str, str], Answer] = {}


def wsgi_front_register(path: str, method: str, answer: Answer) -> None:
    _FRONTS[(path, method)] = answer


def with_fronts(django_app):
    """`django_app` with the registered requests answered first."""
    def application(environ, start_response):
        answer = _FRONTS.get((environ.get("PATH_INFO"), environ.get("REQUEST_METHOD")))
        answered = answer(environ) if answer is not None else None
        if answered is None:
            return django_app(environ, start_response)
        status, body = answered
        start_response(f"{status} {HTTPStatus(status).phrase}", [
            ("Content-Type", "application/json"), ("Content-Length", str(len(body))), ("X-Content-Type-Options", "nosniff")])
        return [body]
    return application
