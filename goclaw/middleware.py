"""Reject oversized API bodies before anything reads them."""
from django.conf import settings

from goclaw.api import error_response


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
