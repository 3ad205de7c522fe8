"""The ApplicationError family: services raise these; every interface renders them the same way.

DRF renders `{"error": {"code", "message", "details"}}` with `http_status`, the admin shows `message`,
consumers send an `error` event. A tool failure is not one of these: it is a ToolResult with is_error.
"""
from __future__ import annotations

from typing import Any


class ApplicationError(Exception):
    code = "application_error"
    http_status = 400

    def __init__(self, message: str, *, code: str | None = None, details: Any = None, http_status: int | None = None):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        if http_status:
            self.http_status = http_status
        self.details = details

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details}


class ValidationError(ApplicationError):
    code = "validation_error"
    http_status = 400


class AuthenticationError(ApplicationError):
    code = "not_authenticated"
    http_status = 401


class PermissionDenied(ApplicationError):
    code = "permission_denied"
    http_status = 403


class NotFound(ApplicationError):
    code = "not_found"
    http_status = 404


class Conflict(ApplicationError):
    code = "conflict"
    http_status = 409


class Gone(ApplicationError):
    code = "gone"
    http_status = 410


class RateLimited(ApplicationError):
    code = "rate_limited"
    http_status = 429


class ServiceUnavailable(ApplicationError):
    code = "service_unavailable"
    http_status = 503


def exception_leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions at the bottom of (nested) exception groups, in order (anyio's task groups wrap what failed in
    them); `[exc]` for an exception that is not a group."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in exception_leaves(inner)]
    return [exc]
