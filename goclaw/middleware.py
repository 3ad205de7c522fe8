"""Request middleware: oversized API bodies are rejected before anything reads them, and the middleware only
browsers need (session, CSRF, session user, messages) is skipped for agents' bearer-token API calls."""
from django.conf import settings
from django.contrib.auth import middleware as auth_middleware
from django.contrib.auth.models import AnonymousUser
from django.contrib.messages import middleware as messages_middleware
from django.contrib.sessions import middleware as sessions_middleware
from django.middleware import csrf

from goclaw.api import bearer_from_header, error_response


class ApiRequestLimitsMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path.startswith("/api/"):
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                return error_response(400, "bad_request", "Content-Length is not a number")
            if length > settings.MAX_REQUEST_BYTES:
                return error_response(
                    413, "request_too_large", f"request body is {length} bytes; the limit is {settings.MAX_REQUEST_BYTES}",
                    {"limit_bytes": settings.MAX_REQUEST_BYTES},
                )
        return self.get_response(request)


BEARER_PATHS = ("/api/", "/mcp")  # where a bearer token is the only credential (DRF views; the MCP endpoint)


def bearer_api_call(request) -> bool:
    """An agent's API call: under /api/ or to /mcp with `Authorization: Bearer …`. It is authenticated by that token
    alone (a bad one is a 401, never a fall-back to the session), so no cookie is read for it and CSRF cannot apply."""
    return request.path_info.startswith(BEARER_PATHS) and bearer_from_header(request.META.get("HTTP_AUTHORIZATION", "")) is not None


class _BrowserOnly:
    """Mixed into a Django middleware that only browsers need: a bearer-token API call goes straight past it."""

    def __call__(self, request):
        if bearer_api_call(request):
            self.skipped(request)
            return self.get_response(request)
        return super().__call__(request)

    def skipped(self, request) -> None:
        """What a skipping request gets instead of this middleware's work."""


class SessionMiddleware(_BrowserOnly, sessions_middleware.SessionMiddleware):
    """No session is loaded or saved (so no cookie is set) for a bearer-token API call."""


class CsrfViewMiddleware(_BrowserOnly, csrf.CsrfViewMiddleware):
    """CSRF protection for requests whose credentials are cookies; DRF's SessionAuthentication enforces it for
    staff API calls on its own."""

    def process_view(self, request, callback, callback_args, callback_kwargs):
        if bearer_api_call(request):
            return None
        return super().process_view(request, callback, callback_args, callback_kwargs)


class AuthenticationMiddleware(_BrowserOnly, auth_middleware.AuthenticationMiddleware):
    """The session's user; a bearer-token API call is anonymous until DRF authenticates its token."""

    def skipped(self, request) -> None:
        request.user = AnonymousUser()


class MessageMiddleware(_BrowserOnly, messages_middleware.MessageMiddleware):
    """Flash messages live in the session: none for a bearer-token API call."""
