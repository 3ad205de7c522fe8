from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from goclaw.api import StrictCharField, StrictIntegerField
from goclaw.db import pg_text
from goclaw.errors import ValidationError

from tools_app.choices import InvocationStatus
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


_CONTEXT_STRINGS = {"user_id": 255, "session_key": 255, "channel": 64, "chat_id": 255, "peer_kind": 32, "provider": 64}
_CONTEXT_NUMERIC_IDS = {"user_id", "chat_id"}  # chat platforms number their users and chats


def _context_string_schema(name: str, max_length: int) -> dict:
    text = {"type": "string", "maxLength": max_length}
    return {"oneOf": [text, {"type": "integer"}]} if name in _CONTEXT_NUMERIC_IDS else text


CALL_CONTEXT_SCHEMA = {
    "type": "object",
    "nullable": True,
    "additionalProperties": False,
    "description": "who and where the call comes from; unknown fields are rejected",
    "properties": {
        **{name: _context_string_schema(name, length) for name, length in _CONTEXT_STRINGS.items()},
        "subagent_depth": {"type": "integer", "minimum": 0, "maximum": 16, "default": 0},
        "allow": {"type": "array", "nullable": True, "items": {"type": "string", "maxLength": 200},
                  "description": "per-request allow list: the catalog is intersected with these names/groups"},
    },
}


@extend_schema_field(CALL_CONTEXT_SCHEMA)
class CallContextField(serializers.JSONField):
    """Documentation only: parse_execute_request validates the context."""


class ExecuteRequestSerializer(serializers.Serializer):
    """Documents the execute body; parse_execute_request validates it (without DRF fields: the hot path)."""

    tool = serializers.CharField(max_length=200, validators=[RegexValidator(r"\S")], help_text="tool name (surrounding blanks are ignored)")
    arguments = serializers.JSONField(required=False, default=dict,
                                      help_text="the tool's arguments; anything but a valid object is answered in-band "
                                                "with status invalid_arguments")
    context = CallContextField(required=False)
    agent = serializers.CharField(required=False, allow_null=True, min_length=1,
                                  help_text="staff: the agent to act as (required); an agent token may only name itself")
    wait_seconds = serializers.IntegerField(required=False, min_value=0, max_value=60, default=0,
                                            help_text="when a person must approve: wait this long for the decision "
                                                      "(0 = answer 202 pending_approval at once)")


def parse_execute_request(data) -> dict:
    """Validate an execute body as ExecuteRequestSerializer documents it, without building DRF fields
    on every call (this endpoint is the hot path). Errors use DRF's {field: [messages]} shape."""
    errors: dict = {}
    if not isinstance(data, dict):
        raise ValidationError("invalid request", code="invalid_request", details={"non_field_errors": ["expected a JSON object"]})
    tool = data.get("tool")
    if not isinstance(tool, str) or not tool.strip():
        errors["tool"] = ["This field is required." if tool is None else "Must be a non-empty string."]
    elif len(tool) > 200:
        errors["tool"] = ["Ensure this field has no more than 200 characters."]
    elif pg_text(tool) != tool:
        errors["tool"] = ["Must not contain NUL characters or unpaired surrogates."]
    agent = data.get("agent")
    if agent is not None and (not isinstance(agent, str) or not agent or pg_text(agent) != agent):
        errors["agent"] = ["Must be an agent key."]
    wait_seconds = data.get("wait_seconds", 0)
    if not isinstance(wait_seconds, int) or isinstance(wait_seconds, bool) or not 0 <= wait_seconds <= 60:
        errors["wait_seconds"] = ["Must be an integer from 0 to 60."]
    raw_ctx = data.get("context")
    context: dict = {name: "" for name in _CONTEXT_STRINGS} | {"subagent_depth": 0, "allow": None}
    ctx_errors: dict = {}
    if raw_ctx is None:
        raw_ctx = {}
    elif not isinstance(raw_ctx, dict):
        errors["context"] = ["Must be an object."]
        raw_ctx = {}
    for name, value in raw_ctx.items():
        if name in _CONTEXT_STRINGS:
            accepted = (str, int) if name in _CONTEXT_NUMERIC_IDS else str
            if not isinstance(value, accepted) or isinstance(value, bool) or len(str(value)) > _CONTEXT_STRINGS[name]:
                ctx_errors[name] = [f"Must be a string of at most {_CONTEXT_STRINGS[name]} characters"
                                    + (" or an integer." if name in _CONTEXT_NUMERIC_IDS else ".")]
            elif pg_text(str(value)) != str(value):
                ctx_errors[name] = ["Must not contain NUL characters or unpaired surrogates."]
            else:
                context[name] = str(value)
        elif name == "subagent_depth":
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 16:
                ctx_errors[name] = ["Must be an integer from 0 to 16."]
            else:
                context[name] = value
        elif name == "allow":
            if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) and len(v) <= 200 for v in value)):
                ctx_errors[name] = ["Must be a list of tool or group names."]
            else:
                context[name] = value
        else:
            ctx_errors[name] = ["Unknown context field."]
    if ctx_errors:
        errors["context"] = ctx_errors
    if errors:
        raise ValidationError("invalid request", code="invalid_request", details=errors)
    return {"tool": tool.strip(), "arguments": data.get("arguments", {}), "context": context, "agent": agent,
            "wait_seconds": wait_seconds}


class ExecuteResponseSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["ok", "error", "denied", "rate_limited", "invalid_arguments", "timeout"])
    for_llm = serializers.CharField(allow_blank=True)
    for_user = serializers.CharField(allow_null=True, allow_blank=True)
    is_error = serializers.BooleanField()
    invocation_id = serializers.CharField(allow_blank=True)
    duration_ms = serializers.FloatField()
    approval_id = serializers.UUIDField(required=False, help_text="the call ran (or was refused) on this approval")
    approval_status = serializers.CharField(required=False, help_text="why a waited-for call was denied: denied / expired / cancelled")


class PendingApprovalResponseSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=["pending_approval"])
    for_llm = serializers.CharField(help_text="what the model should do next (poll, then execute the approval)")
    for_user = serializers.CharField(allow_null=True)
    is_error = serializers.BooleanField()
    invocation_id = serializers.CharField(allow_blank=True)
    duration_ms = serializers.FloatField()
    approval_id = serializers.UUIDField(required=False, help_text="a person must approve this request")
    expires_at = serializers.DateTimeField(required=False)
    pending_change_id = serializers.UUIDField(required=False, help_text="a file change held for review (review/audit mode)")


class CheckCommandRequestSerializer(serializers.Serializer):
    command = StrictCharField(max_length=100_000)


class CheckCommandResponseSerializer(serializers.Serializer):
    verdict = serializers.ChoiceField(choices=["allow", "deny"])
    observe = serializers.BooleanField()
    reasons = serializers.ListField(child=serializers.CharField())


class ScrubRequestSerializer(serializers.Serializer):
    text = StrictCharField(allow_blank=True, max_length=5_000_000)


class ScrubResponseSerializer(serializers.Serializer):
    text = serializers.CharField()
    redactions = serializers.IntegerField()


class InvocationSerializer(serializers.ModelSerializer):
    class Meta:
        model = ToolInvocation
        fields = ["id", "agent_key", "user_id", "session_key", "channel", "tool_name", "arguments", "status", "observed",
                  "observe_reasons", "duration_ms", "result_size", "error", "output_id", "request_id", "created_at"]
