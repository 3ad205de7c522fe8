from dataclasses import dataclass
from typing import Any, Callable

from django.core.exceptions import ImproperlyConfigured
from drf_spectacular.utils import OpenApiResponse, extend_schema_field
from rest_framework import serializers

from goclaw.api import ClosedBody, StrictCharField, StrictIntegerField, unknown_fields
from goclaw.db import pg_text
from goclaw.errors import ValidationError

from tools_app.calls import CONTEXT_FIELDS, CallContext
from tools_app.choices import ApprovalStatus, InvocationStatus
from tools_app.models import Agent, ToolInvocation


def _text(max_length: int | None = None, **kwargs) -> StrictCharField:
    """An optional string parameter; empty means "not given"."""
    return StrictCharField(required=False, allow_blank=True, max_length=max_length, **kwargs)


# --- query strings (validated by the views with goclaw.api.validated_query, documented as the parameters) ---
class PolicyQuerySerializer(serializers.Serializer):
    """The call context a catalog query describes (the same inputs an execute call carries)."""

    allow = _text(help_text="comma-separated per-request allow list (tool names or group:x)")
    user_id = _text(255)
    provider = _text(64, help_text="default: the agent's provider")
    channel = _text(64)
    chat_id = _text(255)
    depth = StrictIntegerField(required=False, min_value=0, max_value=16, default=0, help_text="subagent depth")


class CatalogQuerySerializer(PolicyQuerySerializer):
    agent = StrictCharField(required=False, max_length=64,
                            help_text="staff: whose catalog (required for staff); an agent token may only name itself")


class ExplainQuerySerializer(PolicyQuerySerializer):
    agent = StrictCharField(max_length=64, help_text="whose catalog to explain")


class InvocationFilterSerializer(serializers.Serializer):
    agent_key = _text(64, help_text="staff: only this agent's rows (an agent sees only its own anyway)")
    tool_name = _text()
    status = serializers.ChoiceField(choices=InvocationStatus.choices, required=False)
    session_key = _text()
    user_id = _text()


class AgentSerializer(serializers.ModelSerializer):
    class Meta:
        model = Agent
        fields = ["key", "display_name", "agent_type", "provider", "model", "enabled", "created_at", "updated_at"]


def agent_public(agent: Agent) -> dict:
    """AgentSerializer's output without DRF's per-request field construction (hot path)."""
    return {"key": agent.key, "display_name": agent.display_name, "agent_type": agent.agent_type,
            "provider": agent.provider, "model": agent.model, "enabled": agent.enabled,
            "created_at": agent.created_at, "updated_at": agent.updated_at}


class ToolDefinitionSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    parameters = serializers.JSONField()
    group = serializers.CharField()


class ToolCatalogSerializer(serializers.Serializer):
    tools = ToolDefinitionSerializer(many=True)


class ExplainTrailSerializer(serializers.Serializer):
    step = serializers.CharField()
    effect = serializers.ChoiceField(choices=["added", "removed"])


class ExplainToolSerializer(serializers.Serializer):
    name = serializers.CharField()
    allowed = serializers.BooleanField()
    decided_by = serializers.CharField(allow_null=True)
    trail = ExplainTrailSerializer(many=True)


class ExplainStepSerializer(serializers.Serializer):
    step = serializers.CharField()
    op = serializers.ChoiceField(choices=["base", "intersect", "subtract", "union"])
    tools = serializers.IntegerField()


class ExplainSerializer(serializers.Serializer):
    agent = serializers.CharField()
    inputs = serializers.JSONField()
    steps = ExplainStepSerializer(many=True)
    tools = ExplainToolSerializer(many=True)


# --- the execute request -------------------------------------------------------------------------------
# One declaration per field, its OpenAPI schema beside its check, drives both the hot-path parser and the
# documented body (a DRF serializer measured ~190 µs per request here; this parser ~3 µs). The context fields
# are those of tools_app.calls.CallContext, checked against it at import.
class _Invalid(Exception):
    """A field's check failed: `detail` is its message, or {sub-field: [message]} for an object."""

    def __init__(self, detail: str | dict) -> None:
        super().__init__(detail)
        self.detail = [detail] if isinstance(detail, str) else detail


@dataclass(frozen=True)
class BodyField:
    """One field of a JSON body: the schema it is documented with, and `parse(value)` -> the cleaned value
    (raises _Invalid). `default()` gives the value of an absent optional field."""

    schema: dict
    parse: Callable[[Any], Any]
    required: bool = False
    default: Callable[[], Any] = lambda: None


def _storable(value: str) -> str:
    if pg_text(value) != value:
        raise _Invalid("Must not contain NUL characters or unpaired surrogates.")
    return value


def _string(max_length: int, *, integers: bool = False) -> BodyField:
    """A string of at most `max_length` characters; with `integers`, a number too (chat platforms number their
    users and chats), kept as its decimal string."""
    text = {"type": "string", "maxLength": max_length}
    accepted = (str, int) if integers else str
    message = f"Must be a string of at most {max_length} characters" + (" or an integer." if integers else ".")

    def parse(value):
        if not isinstance(value, accepted) or isinstance(value, bool) or len(str(value)) > max_length:
            raise _Invalid(message)
        return _storable(str(value))

    return BodyField({"oneOf": [text, {"type": "integer"}]} if integers else text, parse, default=str)


def _integer(low: int, high: int, default: int, description: str | None = None) -> BodyField:
    schema = {"type": "integer", "minimum": low, "maximum": high, "default": default}
    message = f"Must be an integer from {low} to {high}."

    def parse(value):
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise _Invalid(message)
        return value

    return BodyField(schema | ({"description": description} if description else {}), parse, default=lambda: default)


def _name_list(max_length: int, description: str) -> BodyField:
    """A list of tool names / `group:x` entries, or null for "no list"."""

    def parse(value):
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) and len(v) <= max_length for v in value)):
            raise _Invalid("Must be a list of tool or group names.")
        return value

    schema = {"type": "array", "nullable": True, "items": {"type": "string", "maxLength": max_length}, "description": description}
    return BodyField(schema, parse)


# JSON name -> (CallContext attribute, field). The caller sets every context field but request_id (the
# X-Request-Id header); the per-request allow list is `allow` on the wire.
CALL_CONTEXT_FIELDS: dict[str, tuple[str, BodyField]] = {
    "user_id": ("user_id", _string(255, integers=True)),
    "session_key": ("session_key", _string(255)),
    "channel": ("channel", _string(64)),
    "chat_id": ("chat_id", _string(255, integers=True)),
    "peer_kind": ("peer_kind", _string(32)),
    "provider": ("provider", _string(64)),
    "subagent_depth": ("subagent_depth", _integer(0, 16, 0)),
    "allow": ("request_allow", _name_list(200, "per-request allow list: the catalog is intersected with these names/groups")),
}
# request_id is the platform's; actor names the person behind a console run and is never caller-set.
if {attr for attr, _ in CALL_CONTEXT_FIELDS.values()} != CONTEXT_FIELDS - {"request_id", "actor"}:
    raise ImproperlyConfigured("CALL_CONTEXT_FIELDS must declare every caller-set field of tools_app.calls.CallContext")

CALL_CONTEXT_SCHEMA = {
    "type": "object",
    "nullable": True,
    "additionalProperties": False,
    "description": "who and where the call comes from; unknown fields are rejected",
    "properties": {name: field.schema for name, (_, field) in CALL_CONTEXT_FIELDS.items()},
}


def _call_context(raw) -> CallContext:
    if raw is None:
        return CallContext()
    if not isinstance(raw, dict):
        raise _Invalid("Must be an object.")
    values, errors = {}, {}
    for name, value in raw.items():
        declared = CALL_CONTEXT_FIELDS.get(name)
        if declared is None:
            errors[name] = ["Unknown context field."]
            continue
        try:
            values[declared[0]] = declared[1].parse(value)
        except _Invalid as exc:
            errors[name] = exc.detail
    if errors:
        raise _Invalid(errors)
    return CallContext(**values)


def call_context_parse(raw) -> CallContext:
    """A `context` object checked by the REST rules (the MCP endpoint's headers and `_meta` use the same):
    ValidationError (code invalid_context) names the offending fields."""
    try:
        return _call_context(raw)
    except _Invalid as exc:
        raise ValidationError("invalid call context", code="invalid_context", details=exc.detail) from None


def _tool_name(value) -> str:
    if value is None:
        raise _Invalid("This field is required.")
    if not isinstance(value, str) or not value.strip():
        raise _Invalid("Must be a non-empty string.")
    if len(value) > 200:
        raise _Invalid("Ensure this field has no more than 200 characters.")
    return _storable(value).strip()


def _agent_key(value) -> str | None:
    if value is not None and (not isinstance(value, str) or not value or pg_text(value) != value):
        raise _Invalid("Must be an agent key.")
    return value


EXECUTE_REQUEST_FIELDS: dict[str, BodyField] = {
    "tool": BodyField({"type": "string", "minLength": 1, "maxLength": 200, "pattern": r"\S",
                       "description": "tool name (surrounding blanks are ignored)"}, _tool_name, required=True),
    "arguments": BodyField({"description": "the tool's arguments; anything but a valid object is answered in-band with "
                                           "status invalid_arguments"}, lambda value: value, default=dict),
    "context": BodyField(CALL_CONTEXT_SCHEMA, _call_context, default=CallContext),
    "agent": BodyField({"type": "string", "nullable": True, "minLength": 1,
                        "description": "staff: the agent to act as (required); an agent token may only name itself"}, _agent_key),
    "wait_seconds": _integer(0, 60, 0, "when a person must approve: wait this long for the decision "
                                       "(0 = answer 202 pending_approval at once)"),
}


def unknown_execute_field(name: str) -> str:
    """What to tell a caller who sent `name` at the top level of an execute body: most often a call-context field
    that belongs inside `context` (a user id sent there would otherwise be dropped, and the call go unattributed)."""
    shown = name[:100]
    if name in CALL_CONTEXT_FIELDS:
        return f'unknown field {shown!r}: call-context fields go inside "context": {{"{shown}": …}}'
    if name == "request_id":
        return "unknown field 'request_id': the request id is the X-Request-Id header"
    return f"unknown field {shown!r}: the body takes {', '.join(EXECUTE_REQUEST_FIELDS)}"


def parse_execute_request(data) -> dict:
    """Validate an execute body against EXECUTE_REQUEST_FIELDS: {"tool", "arguments", "context" (a CallContext
    without request_id), "agent", "wait_seconds"}. Errors use DRF's {field: [messages]} shape; an unknown key, at
    the top level or in `context`, is an error naming it (never dropped)."""
    if not isinstance(data, dict):
        raise ValidationError("invalid request", code="invalid_request", details={"non_field_errors": ["expected a JSON object"]})
    parsed, errors, present = {}, {}, 0
    for name, field in EXECUTE_REQUEST_FIELDS.items():
        if name not in data:
            if field.required:
                errors[name] = ["This field is required."]
            else:
                parsed[name] = field.default()
            continue
        present += 1
        try:
            parsed[name] = field.parse(data[name])
        except _Invalid as exc:
            errors[name] = exc.detail
    message = "invalid request"
    if present != len(data):  # the usual body has only known keys: this costs one comparison
        unknown = {name[:100]: unknown_execute_field(name) for name in unknown_fields(data, EXECUTE_REQUEST_FIELDS)}
        errors.update({name: [text] for name, text in unknown.items()})
        texts = list(unknown.values())
        message = texts[0] if len(texts) == 1 else f"{len(texts)} unknown fields: " + "; ".join(texts[:5])
    if errors:
        raise ValidationError(message, code="invalid_request", details=errors)
    return parsed


def _documented(name: str, doc: str, fields: dict[str, BodyField], parse: Callable[[Any], dict]) -> type[serializers.Serializer]:
    """A serializer that documents `fields` with their own schemas and validates through `parse`, so the
    OpenAPI schema and the accepted input cannot drift apart."""
    attrs: dict[str, Any] = {"__doc__": doc, "__module__": __name__, "closed_body": True}  # additionalProperties: false
    for field_name, field in fields.items():
        documented = extend_schema_field(field.schema)(type(f"{name}_{field_name}", (serializers.JSONField,), {}))
        attrs[field_name] = documented(required=field.required)

    def to_internal_value(self, data):
        try:
            return parse(data)
        except ValidationError as exc:
            raise serializers.ValidationError(exc.details) from None

    attrs["to_internal_value"] = to_internal_value
    return type(name, (serializers.Serializer,), attrs)


ExecuteRequestSerializer = _documented(
    "ExecuteRequestSerializer", "The execute body (declared in EXECUTE_REQUEST_FIELDS; parse_execute_request validates it).",
    EXECUTE_REQUEST_FIELDS, parse_execute_request)


# --- the execute answer (tools_app.calls.Outcome.as_dict(), extras included) ----------------------------
class _OutcomeSerializer(serializers.Serializer):
    """What every execute answer carries."""

    for_llm = serializers.CharField(allow_blank=True)
    for_user = serializers.CharField(allow_null=True, allow_blank=True)
    is_error = serializers.BooleanField()
    invocation_id = serializers.CharField(allow_blank=True)
    duration_ms = serializers.FloatField()


# How a call waited for with wait_seconds ends when nobody approved it (it is then answered as `denied`).
_WAIT_ENDINGS = [ApprovalStatus.DENIED.value, ApprovalStatus.EXPIRED.value, ApprovalStatus.CANCELLED.value]


class ExecuteResponseSerializer(_OutcomeSerializer):
    """HTTP 200: the call ran, or was refused in a way the model should see."""

    status = serializers.ChoiceField(choices=[s for s in InvocationStatus.values if s != InvocationStatus.PENDING_APPROVAL])
    approval_id = serializers.UUIDField(required=False, help_text="the call ran (or was refused) on this approval")
    # A plain string: drf-spectacular folds any enum on a field of this name into ApprovalStatusEnum (all five statuses).
    approval_status = serializers.CharField(required=False, help_text="why a waited-for call was denied: " + " / ".join(_WAIT_ENDINGS))


class PendingApprovalResponseSerializer(_OutcomeSerializer):
    """HTTP 202: a person must approve the call, or accept the file change it would make, before it runs."""

    status = serializers.ChoiceField(choices=[InvocationStatus.PENDING_APPROVAL.value])
    for_llm = serializers.CharField(help_text="what the model should do next (poll, then execute the approval)")
    approval_id = serializers.UUIDField(required=False, help_text="a person must approve this request")
    expires_at = serializers.DateTimeField(required=False, help_text="when the request expires (the call is then denied)")
    pending_change_id = serializers.UUIDField(required=False, help_text="a file change held for review (review/audit mode)")


EXECUTE_RESPONSES = {
    200: ExecuteResponseSerializer,
    202: OpenApiResponse(PendingApprovalResponseSerializer,
                         description="a person must approve the call (or accept the held file change) first"),
}


def execute_http_status(outcome) -> int:
    """202 while a person must approve the call or accept its held change; 200 for every other outcome."""
    return 202 if outcome.status == InvocationStatus.PENDING_APPROVAL else 200


class CheckCommandRequestSerializer(ClosedBody, serializers.Serializer):
    command = StrictCharField(max_length=100_000)


class CheckCommandResponseSerializer(serializers.Serializer):
    verdict = serializers.ChoiceField(choices=["allow", "deny"])
    observe = serializers.BooleanField()
    reasons = serializers.ListField(child=serializers.CharField())


class ScrubRequestSerializer(ClosedBody, serializers.Serializer):
    text = StrictCharField(allow_blank=True, max_length=5_000_000)


class ScrubResponseSerializer(serializers.Serializer):
    text = serializers.CharField()
    redactions = serializers.IntegerField()


class InvocationSerializer(serializers.ModelSerializer):
    class Meta:
        model = ToolInvocation
        fields = ["id", "agent_key", "user_id", "session_key", "channel", "tool_name", "arguments", "status", "observed",
                  "observe_reasons", "duration_ms", "result_size", "error", "output_id", "request_id", "created_at"]
