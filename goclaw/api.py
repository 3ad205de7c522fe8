"""DRF plumbing shared by every app: the error envelope, permissions, pagination, and the OpenAPI schema
generator that documents every operation's security and error responses from the same classes."""
from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django import db
from django.http import Http404, JsonResponse
from rest_framework import exceptions as drf_exceptions
from rest_framework import serializers
from rest_framework.fields import empty
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.permissions import BasePermission

from goclaw import authz
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


def unknown_fields(data, known) -> list[str]:
    """The top-level keys of a JSON object body that are not in `known` (none for anything but an object)."""
    return [name for name in data if name not in known] if isinstance(data, dict) else []


class ClosedBody:
    """Mixed into a request-body serializer (first base): a top-level field it does not declare is a 400 naming
    the field instead of being silently dropped (a misspelt or misplaced field would otherwise change what the call
    means), and its OpenAPI schema says `additionalProperties: false` (ApiSchema)."""

    closed_body = True

    def to_internal_value(self, data):
        writable = [name for name, field in self.fields.items() if not field.read_only]
        unknown = unknown_fields(data, writable)
        if unknown:
            raise serializers.ValidationError({name[:100]: [f"unknown field; this body takes: {', '.join(writable)}"]
                                               for name in unknown})
        return super().to_internal_value(data)


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


def bearer_from_header(header: str) -> str | None:
    """The credential of an `Authorization: Bearer <credential>` header, else None (HTTP API and WebSocket alike)."""
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return value.strip() or None


class JsonNegotiation(DefaultContentNegotiation):
    """The API speaks JSON only: a view with one renderer answers with it, whatever `Accept` says, without DRF's
    media-type matching (a measurable share of a request). Views with several renderers (the OpenAPI schema)
    negotiate as before, and a request body still needs a parser for its Content-Type (else 415)."""

    def select_renderer(self, request, renderers, format_suffix=None):
        if len(renderers) == 1:
            return renderers[0], renderers[0].media_type
        return super().select_renderer(request, renderers, format_suffix)


def agent_of(request):
    """The authenticated Agent for an agent-token request, else None."""
    return getattr(getattr(request, "user", None), "agent", None)


def is_staff_request(request) -> bool:
    user = getattr(request, "user", None)
    return bool(user is not None and getattr(user, "is_staff", False) and getattr(user, "is_active", False))


def staff_permissions_of(view) -> dict | None:
    """What a staff session needs on `view`, per HTTP method (its `staff_permissions` attribute; goclaw.authz)."""
    return getattr(view, "staff_permissions", None)


# Permissions name the OpenAPI security schemes that can satisfy them (`AgentToken` is the agent bearer token,
# `cookieAuth` the staff session); ApiSchema documents exactly those on each operation.
class IsAgent(BasePermission):
    message = "this endpoint needs an agent token"
    openapi_security = frozenset({"AgentToken"})

    def has_permission(self, request, view):
        return agent_of(request) is not None


class _PersonPermission(BasePermission):
    """A staff session passes only with the permissions the view declares for the request's method in
    `staff_permissions` (goclaw.authz); a view or method without a declaration refuses staff (fail closed)."""

    def _person_may(self, request, view) -> bool:
        allowed, missing = authz.person_permitted(request.user, staff_permissions_of(view), request.method)
        if not allowed:
            self.message = authz.denial_message(missing)  # this instance serves this request only
        return allowed


class IsStaff(_PersonPermission):
    message = "this endpoint is for staff only"
    openapi_security = frozenset({"cookieAuth"})

    def has_permission(self, request, view):
        return is_staff_request(request) and self._person_may(request, view)


class IsAgentOrStaff(_PersonPermission):
    message = "this endpoint needs an agent token or a staff session"
    openapi_security = frozenset({"AgentToken", "cookieAuth"})

    def has_permission(self, request, view):
        if agent_of(request) is not None:
            return True  # agents keep their own rules (the views scope what a token sees)
        return is_staff_request(request) and self._person_may(request, view)


def _bounded_int(request, name: str, default: int, minimum: int, maximum: int | None) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw) if raw.strip() == raw else None
    except ValueError:
        value = None
    if value is None or value < minimum or (maximum is not None and value > maximum):
        bound = f"from {minimum} to {maximum}" if maximum is not None else f"of at least {minimum}"
        raise ValidationError(f"{name} must be an integer {bound}", code="invalid_request", details={name: [f"Must be an integer {bound}."]})
    return value


class Pagination(LimitOffsetPagination):
    """`?limit=` (1-500, default 50) and `?offset=` (>= 0); anything else is a 400, not silently the default."""

    default_limit = 50
    max_limit = 500

    def get_limit(self, request):
        return _bounded_int(request, self.limit_query_param, self.default_limit, 1, self.max_limit)

    def get_offset(self, request):
        return _bounded_int(request, self.offset_query_param, 0, 0, None)

    def get_schema_operation_parameters(self, view):
        return [
            {"name": self.limit_query_param, "required": False, "in": "query", "description": "page size",
             "schema": {"type": "integer", "minimum": 1, "maximum": self.max_limit, "default": self.default_limit}},
            {"name": self.offset_query_param, "required": False, "in": "query", "description": "rows to skip",
             "schema": {"type": "integer", "minimum": 0, "default": 0}},
        ]


# DRF's fields coerce (5 → "5", "true" → True, "5.0" → 5); the API's fields take exactly the JSON type they
# document, so the schema and the validation agree.
class StrictCharField(serializers.CharField):
    """A JSON string (or a query-string value), never a coerced number or boolean."""

    def __init__(self, **kwargs):
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer in a body, or an optionally signed run of digits in a query string."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, str)) or (isinstance(data, str) and not data.lstrip("-").isdigit()):
            self.fail("invalid")
        if isinstance(data, str) and not data.isascii():
            self.fail("invalid")
        return super().to_internal_value(data)


def validated_query(serializer_class, request) -> dict:
    """Validate the query string with a serializer (the same one the operation documents as its parameters).
    A plain dict, not the QueryDict: DRF reads an empty form value as "not given", the schema calls it empty."""
    query = request.query_params
    if not query:  # an agent's usual call: the answer is the serializer's defaults (see _defaults_of)
        return _defaults_of(serializer_class)
    return validated(serializer_class, query.dict())


_DEFAULTS: dict[type, dict] = {}


def _defaults_of(serializer_class) -> dict:
    """What an empty query validates to. When nothing can make it vary (no validation method of the serializer's
    own, no callable default) it is computed once per serializer: building a serializer costs ~0.1 ms."""
    known = _DEFAULTS.get(serializer_class)
    if known is None:
        known = validated(serializer_class, {})
        own_names = {name for klass in serializer_class.__mro__ if not klass.__module__.startswith("rest_framework")
                     for name in vars(klass)}
        validates = any(name == "validate" or name.startswith("validate_") for name in own_names)
        computed = any(field.default is not empty and callable(field.default) for field in serializer_class().fields.values())
        if not validates and not computed:
            _DEFAULTS[serializer_class] = known
    return dict(known)


# --- OpenAPI ---------------------------------------------------------------------------------------------
class ErrorBodySerializer(serializers.Serializer):
    code = serializers.CharField(help_text="stable snake_case code, e.g. `invalid_request`, `approval_expired`")
    message = serializers.CharField()
    details = serializers.JSONField(allow_null=True, help_text="per-field problems for validation errors, else null or an object")


class ErrorSerializer(serializers.Serializer):
    """The one error envelope every API failure uses."""

    error = ErrorBodySerializer()


def error_responses(described: dict[int, str]) -> dict:
    """Document operation-specific errors (`{409: "already decided"}`) with the error envelope."""
    from drf_spectacular.utils import OpenApiResponse

    return {status: OpenApiResponse(ErrorSerializer, description=text) for status, text in described.items()}


# drf_spectacular's AutoSchema and SchemaGenerator import rest_framework.views, which imports
# DEFAULT_PERMISSION_CLASSES from this module: the two classes below are built on first access (PEP 562).
def _openapi_classes() -> dict[str, type]:
    from drf_spectacular.generators import SchemaGenerator
    from drf_spectacular.openapi import AutoSchema

    class ApiSchema(AutoSchema):
        """Derives what every operation shares from the view instead of per-view copies: the security schemes its
        permission classes accept, and the error responses its shape implies (credentials → 401/403, a body →
        400/413/415, a query string → 400, a path id → 404, the database → 503). Views declare only their own
        extra errors with `error_responses`; a declared status wins over a derived one."""

        def get_auth(self):
            schemes = super().get_auth()
            permissions = self.view.get_permissions()
            if not permissions:
                return []
            accepted = None
            for permission in permissions:
                names = getattr(permission, "openapi_security", None)
                if names is not None:
                    accepted = set(names) if accepted is None else accepted & names
            return schemes if accepted is None else [req for req in schemes if set(req) <= accepted]

        def _derived_errors(self, operation: dict, method: str) -> dict[int, str]:
            errors: dict[int, str] = {}
            parameters = operation.get("parameters", [])
            if operation.get("requestBody"):
                errors[400] = "malformed JSON or invalid fields (`details` names them)"
                errors[413] = "the body is larger than GOCLAW_MAX_REQUEST_BYTES"
                errors[415] = "the body is not application/json"
            elif any(p["in"] == "query" for p in parameters):
                errors[400] = "an invalid query parameter (`details` names it)"
            schemes = {name for req in operation.get("security", []) for name in req}
            if schemes:
                errors[401] = "no credentials, or an invalid, expired or revoked agent token"
                errors[403] = {frozenset({"cookieAuth"}): "staff only: an agent token or a non-staff session may not do this",
                               frozenset({"AgentToken"}): "agents only: a session may not do this"}.get(
                    frozenset(schemes), "these credentials may not do this (e.g. a non-staff session)")
                if "cookieAuth" in schemes:
                    needed = authz.spec_required(staff_permissions_of(self.view), method)
                    errors[403] += ("; a staff session without " + ", ".join(needed[0]) if needed
                                    else "; every staff session")  # docs/permissions.md
                if "cookieAuth" in schemes and method not in ("GET", "HEAD", "OPTIONS"):
                    errors[403] += "; a session request without a CSRF token"
            if any(p["in"] == "path" for p in parameters):
                errors[404] = "no such object, or not one these credentials can see"
            errors[503] = "the database is unavailable; retry after `Retry-After` seconds"
            return errors

        def _map_basic_serializer(self, serializer, direction):
            schema = super()._map_basic_serializer(serializer, direction)
            if direction == "request" and getattr(serializer, "closed_body", False):
                schema["additionalProperties"] = False  # ClosedBody: an unknown field is a 400
            return schema

        def get_operation(self, path, path_regex, path_prefix, method, registry):
            operation = super().get_operation(path, path_regex, path_prefix, method, registry)
            if operation is None:
                return None
            component = self.resolve_serializer(ErrorSerializer, "response").ref
            responses = operation.setdefault("responses", {})
            for status, text in sorted(self._derived_errors(operation, method.upper()).items()):
                responses.setdefault(str(status), {"content": {"application/json": {"schema": component}}, "description": text})
            operation["responses"] = dict(sorted(responses.items()))
            return operation

    class ApiSchemaGenerator(SchemaGenerator):
        """drf-spectacular's generator with ApiSchema under every view (also under `@extend_schema` ones).
        Set as SPECTACULAR_SETTINGS["DEFAULT_GENERATOR_CLASS"]."""

        _combined: dict[type, type] = {}

        def create_view(self, callback, method, request=None):
            view = super().create_view(callback, method, request)
            schema_class = view.schema.__class__  # may be a weakref proxy
            if isinstance(view.schema, AutoSchema) and not isinstance(view.schema, ApiSchema):
                combined = self._combined.get(schema_class)
                if combined is None:
                    combined = self._combined[schema_class] = type(f"Api{schema_class.__name__}", (ApiSchema, schema_class), {})
                self._set_schema_to_view(view, combined())
            return view

    return {"ApiSchema": ApiSchema, "ApiSchemaGenerator": ApiSchemaGenerator}


def __getattr__(name: str):
    if name in ("ApiSchema", "ApiSchemaGenerator"):
        globals().update(_openapi_classes())
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
