from rest_framework import serializers

from goclaw.db import pg_text
from goclaw.errors import ValidationError

from tools_app.models import Agent, ToolInvocation


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


class CallContextSerializer(serializers.Serializer):
    user_id = serializers.CharField(required=False, allow_blank=True, max_length=255, default="")
    session_key = serializers.CharField(required=False, allow_blank=True, max_length=255, default="")
    channel = serializers.CharField(required=False, allow_blank=True, max_length=64, default="")
    chat_id = serializers.CharField(required=False, allow_blank=True, max_length=255, default="")
    peer_kind = serializers.CharField(required=False, allow_blank=True, max_length=32, default="")
    provider = serializers.CharField(required=False, allow_blank=True, max_length=64, default="")
    subagent_depth = serializers.IntegerField(required=False, min_value=0, max_value=16, default=0)
    allow = serializers.ListField(child=serializers.CharField(max_length=200), required=False, allow_null=True, default=None,
                                  help_text="per-request allow list: the catalog is intersected with these names/groups")


class ExecuteRequestSerializer(serializers.Serializer):
    tool = serializers.CharField(max_length=200)
    arguments = serializers.JSONField(required=False, default=dict)
    context = CallContextSerializer(required=False)
    agent = serializers.SlugField(required=False, help_text="staff only: the agent to act as")
    wait_seconds = serializers.IntegerField(required=False, min_value=0, max_value=60, default=0,
                                            help_text="when a person must approve: wait this long for the decision "
                                                      "(0 = answer 202 pending_approval at once)")


_CONTEXT_STRINGS = {"user_id": 255, "session_key": 255, "channel": 64, "chat_id": 255, "peer_kind": 32, "provider": 64}


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
    if agent is not None and (not isinstance(agent, str) or not agent):
        errors["agent"] = ["Must be an agent key."]
    wait_seconds = data.get("wait_seconds", 0)
    if not isinstance(wait_seconds, int) or isinstance(wait_seconds, bool) or not 0 <= wait_seconds <= 60:
        errors["wait_seconds"] = ["Must be an integer from 0 to 60."]
    raw_ctx = data.get("context") or {}
    context: dict = {name: "" for name in _CONTEXT_STRINGS} | {"subagent_depth": 0, "allow": None}
    ctx_errors: dict = {}
    if not isinstance(raw_ctx, dict):
        errors["context"] = ["Must be an object."]
        raw_ctx = {}
    for name, value in raw_ctx.items():
        if name in _CONTEXT_STRINGS:
            if not isinstance(value, (str, int)) or isinstance(value, bool) or len(str(value)) > _CONTEXT_STRINGS[name]:
                ctx_errors[name] = [f"Must be a string of at most {_CONTEXT_STRINGS[name]} characters."]
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
    for_llm = serializers.CharField()
    for_user = serializers.CharField(allow_null=True)
    is_error = serializers.BooleanField()
    invocation_id = serializers.CharField()
    duration_ms = serializers.FloatField()


class CheckCommandRequestSerializer(serializers.Serializer):
    command = serializers.CharField(max_length=100_000, trim_whitespace=False)


class CheckCommandResponseSerializer(serializers.Serializer):
    verdict = serializers.ChoiceField(choices=["allow", "deny"])
    observe = serializers.BooleanField()
    reasons = serializers.ListField(child=serializers.CharField())


class ScrubRequestSerializer(serializers.Serializer):
    text = serializers.CharField(allow_blank=True, trim_whitespace=False, max_length=5_000_000)


class ScrubResponseSerializer(serializers.Serializer):
    text = serializers.CharField()
    redactions = serializers.IntegerField()


class InvocationSerializer(serializers.ModelSerializer):
    class Meta:
        model = ToolInvocation
        fields = ["id", "agent_key", "user_id", "session_key", "channel", "tool_name", "arguments", "status", "observed",
                  "observe_reasons", "duration_ms", "result_size", "error", "output_id", "request_id", "created_at"]
