"""DRF plumbing shared by every app: the error envelope, permissions, pagination."""
from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django import db
from django.http import Http404, JsonResponse
from rest_framework import exceptions as drf_exceptions
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.permissions import BasePermission

from goclaw.errors import ApplicationError, ValidationError

logger = logging.getLogger("goclaw.api")

_DRF_CODES = {
    drf_exceptions.ParseError: "malformed_request",
    drf_exceptions.AuthenticationFailed: "not_authenticated",
    drf_exceptions.NotAuthenticated: "not_authenticated",
    drf_exceptions.PermissionDenied: "permission_denied",
    drf_exceptions.NotFound: "not_found",
    drf_exceptions.MethodNotAllowed: "method_not_allowed",
    drf_exceptions.NotAcceptable: "not_acceptable",
    drf_exceptions.UnsupportedMediaType: "unsupported_media_type",
    drf_exceptions.Throttled: "throttled",
    drf_exceptions.ValidationError: "validation_error",
}


def error_response(status: int, code: str, message: str, details=None, headers: dict | None = None) -> JsonResponse:
    response = JsonResponse({"error": {"code": code, "message": message, "details": details}}, status=status)
    for key, value in (headers or {}).items():
        response[key] = value
    return response


def validated(serializer_class, data) -> dict:
    """Validate a request body with a DRF serializer; problems become one `invalid_request` 400."""
    serializer = serializer_class(data=data)
    if not serializer.is_valid():
        raise ValidationError("invalid request", code="invalid_request", details=serializer.errors)
    return serializer.validated_data


def exception_handler(exc, context):
    """Render every exception raised under DRF as the one envelope; unknown ones become a logged 500."""
    if isinstance(exc, ApplicationError):
        return error_response(exc.http_status, exc.code, exc.message, exc.details)
    if isinstance(exc, Http404):
        return error_response(404, "not_found", "not found")
    if isinstance(exc, DjangoPermissionDenied):
        return error_response(403, "permission_denied", "permission denied")
    if isinstance(exc, RequestDataTooBig):
        return error_response(413, "request_too_large", "request body is too large")
    if isinstance(exc, (db.OperationalError, db.InterfaceError)):
        # Nothing ran past the failing step; the client may retry.
        logger.error("database unavailable: %s", str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)
        return error_response(503, "database_unavailable", "the database is unavailable; retry later", headers={"Retry-After": "5"})
    if isinstance(exc, drf_exceptions.APIException):
        code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error")
        if isinstance(exc, drf_exceptions.ValidationError):
            return error_response(400, code, "invalid input", exc.detail)
        if isinstance(exc, drf_exceptions.ParseError):
            return error_response(400, code, f"malformed request body: {exc.detail}")
        headers = {}
        if isinstance(exc, (drf_exceptions.NotAuthenticated, drf_exceptions.AuthenticationFailed)):
            headers["WWW-Authenticate"] = 'Bearer realm="goclaw"'
            return error_response(401, code, str(exc.detail), headers=headers)
        return error_response(exc.status_code, code, str(exc.detail))
    logger.exception("unhandled API error", exc_info=exc)
    return error_response(500, "internal_error", "internal server error")


def json_404(request, exception=None):
    return error_response(404, "not_found", f"no route for {request.path}")


def json_500(request):
    return error_response(500, "internal_error", "internal server error")


def agent_of(request):
    """The authenticated Agent for an agent-token request, else None."""
    return getattr(getattr(request, "user", None), "agent", None)


def is_staff_request(request) -> bool:
    user = getattr(request, "user", None)
    return bool(user is not None and getattr(user, "is_staff", False) and getattr(user, "is_active", False))


class IsAgent(BasePermission):
    def has_permission(self, request, view):
        return agent_of(request) is not None


class IsStaff(BasePermission):
    def has_permission(self, request, view):
        return is_staff_request(request)


class IsAgentOrStaff(BasePermission):
    def has_permission(self, request, view):
        return agent_of(request) is not None or is_staff_request(request)


class Pagination(LimitOffsetPagination):
    default_limit = 50
    max_limit = 500
