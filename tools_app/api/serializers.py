from rest_framework import serializers

from tools_app.models import Agent, ToolInvocation


class AgentSerializer(serializers.ModelSerializer):
    class Meta:
        model = Agent
        fields = ["key", "display_name", "agent_type", "provider", "model", "enabled", "created_at", "updated_at"]


class ToolDefinitionSerializer(serializers.Serializer):
    name = serializers.CharField()
    description = serializers.CharField()
    parameters = serializers.JSONField()
    group = serializers.CharField()


class ToolCatalogSerializer(serializers.Serializer):
    tools = ToolDefinitionSerializer(many=True)


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
