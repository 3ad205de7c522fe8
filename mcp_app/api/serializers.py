"""Bodies, query strings and responses of the MCP API (docs/mcp.md). Secrets are write-only: a response carries the
names of the headers / env / credentials that are set, never a value. Fields take exactly the JSON type they
document (goclaw.api's strict fields), so the OpenAPI schema and the validation agree."""
from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from goclaw.api import ClosedBody, StrictBooleanField, StrictCharField, StrictIntegerField
from mcp_app.choices import AccessScope, AccessStatus, ToolStatus, Transport
from mcp_app.models import (MAX_TIMEOUT, MCPAccessRequest, MCPAgentGrant, MCPLauncher, MCPServer, MCPTool,
                            MCPUserGrant)

HASH_PREFIX = 12  # how much of a pinned hash responses show: enough to compare, not a whole fingerprint


def _text(max_length: int | None = None, **kwargs) -> StrictCharField:
    return StrictCharField(required=False, allow_blank=True, max_length=max_length, **kwargs)


def _names(**kwargs) -> serializers.ListField:
    return serializers.ListField(child=StrictCharField(max_length=200), **kwargs)


def _secrets(help_text: str) -> serializers.DictField:
    return serializers.DictField(child=StrictCharField(allow_null=True, allow_blank=True, max_length=8192),
                                 required=False, help_text=help_text)


# --- servers -------------------------------------------------------------------------------------------------------
class ToolCountsSerializer(serializers.Serializer):
    approved = serializers.IntegerField()
    pending = serializers.IntegerField()
    quarantined = serializers.IntegerField()
    rejected = serializers.IntegerField()


class MCPServerSerializer(serializers.ModelSerializer):
    headers = serializers.ListField(child=serializers.CharField(), source="headers_names", read_only=True,
                                    help_text="the header names set (values are write-only, never returned)")
    env = serializers.ListField(child=serializers.CharField(), source="env_names", read_only=True,
                                help_text="the env variable names set (values are write-only, never returned)")
    prefix = serializers.CharField(read_only=True, help_text="what every tool name of this server starts with")
    sandbox_profile = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    tool_counts = serializers.SerializerMethodField(help_text="this server's tools by review status")

    class Meta:
        model = MCPServer
        fields = ["id", "name", "display_name", "transport", "command", "args", "url", "headers", "env", "tool_prefix",
                  "prefix", "allow_private_network", "enabled", "timeout_seconds", "sandbox_profile",
                  "review_new_tools", "state", "last_ok_at", "last_checked_at", "last_error", "attempts",
                  "next_attempt_at", "listed_at", "tool_counts", "created_by", "created_at", "updated_at"]

    @extend_schema_field(ToolCountsSerializer)
    def get_tool_counts(self, server: MCPServer) -> dict[str, int]:
        if hasattr(server, "tools_approved"):  # annotated by servers_with_tool_counts (no query per row)
            return {status: getattr(server, f"tools_{status}") for status in ToolStatus.values}
        counts = dict.fromkeys(ToolStatus.values, 0)
        for status in server.tools.values_list("status", flat=True):
            counts[status] = counts.get(status, 0) + 1
        return counts


class MCPServerWriteSerializer(serializers.Serializer):
    """A new server; the service checks the whole definition (launcher allowlist, URL rules, prefix)."""

    name = StrictCharField(max_length=48)
    transport = serializers.ChoiceField(choices=Transport.choices)
    display_name = _text(200)
    command = _text(512, help_text="stdio: an allowed launcher (see /api/v1/mcp/launchers)")
    args = serializers.ListField(child=StrictCharField(allow_blank=True, max_length=4096), required=False,
                                 max_length=64, help_text="stdio: the argument list (an argv, never a shell string)")
    url = _text(2000, help_text="sse / streamable-http: the endpoint URL")
    headers = _secrets("write-only: header name → value (null removes one on PATCH)")
    env = _secrets("write-only: variable name → value (null removes one on PATCH)")
    tool_prefix = _text(48, help_text="empty: mcp_<name>__")
    allow_private_network = StrictBooleanField(required=False, help_text="the URL may point at loopback / private addresses")
    enabled = StrictBooleanField(required=False)
    timeout_seconds = StrictIntegerField(required=False, min_value=1, max_value=MAX_TIMEOUT)
    sandbox_profile = StrictCharField(required=False, allow_null=True, max_length=64,
                                      help_text="stdio: a sandbox profile name; null: the default profile")
    review_new_tools = StrictBooleanField(required=False)


class MCPServerPatchSerializer(MCPServerWriteSerializer):
    """The fields to change (a server's name is its identity and does not change)."""

    name = None
    transport = serializers.ChoiceField(choices=Transport.choices, required=False)


class ConnectionReportSerializer(serializers.Serializer):
    ok = serializers.BooleanField()
    tools = serializers.ListField(child=serializers.CharField(), help_text="the tool names the server listed")
    changes = serializers.DictField(help_text="what the listing changed (new, changed, removed, … → tool names)")
    error = serializers.CharField(allow_blank=True)
    code = serializers.CharField(allow_blank=True, help_text="the bridge's error code when ok is false")


# --- tools ---------------------------------------------------------------------------------------------------------
class MCPToolSerializer(serializers.ModelSerializer):
    server = serializers.SlugRelatedField(slug_field="name", read_only=True)
    prefixed_name = serializers.SerializerMethodField(help_text="the name agents see")
    definition_hash = serializers.SerializerMethodField(help_text="prefix of the latest listing's hash")
    approved_hash = serializers.SerializerMethodField(help_text="prefix of the pinned hash ('' before approval)")
    usable = serializers.BooleanField(read_only=True, help_text="approved, listed, and the listing is the pinned one")
    # A plain string in the schema: two components (list and detail) sharing one enum is a naming collision there.
    status = serializers.CharField(read_only=True, help_text=" | ".join(ToolStatus.values))

    class Meta:
        model = MCPTool
        fields = ["id", "server", "name", "prefixed_name", "status", "flags", "present", "usable", "definition_hash",
                  "approved_hash", "description", "input_schema", "first_seen_at", "last_seen_at", "changed_at",
                  "reviewed_by", "reviewed_at"]

    def get_prefixed_name(self, tool: MCPTool) -> str:
        return tool.server.prefix + tool.name

    def get_definition_hash(self, tool: MCPTool) -> str:
        return tool.definition_hash[:HASH_PREFIX]

    def get_approved_hash(self, tool: MCPTool) -> str:
        return tool.approved_hash[:HASH_PREFIX]


class ToolDiffSerializer(serializers.Serializer):
    description = serializers.ListField(child=serializers.CharField(allow_blank=True),
                                        help_text="unified diff of the pinned and the listed description")
    input_schema = serializers.ListField(child=serializers.CharField(allow_blank=True),
                                         help_text="unified diff of the pinned and the listed input schema (JSON)")
    flags = serializers.ListField(child=serializers.JSONField(), help_text="what the scanner found")
    launch_changed = serializers.BooleanField(allow_null=True, help_text="stdio: the launched command changed (null: unknown)")
    approved_hash = serializers.CharField(allow_blank=True, help_text="the pinned hash (whole)")
    definition_hash = serializers.CharField(help_text="the listed hash (whole): pass it as expected_hash to approve")


class MCPToolDetailSerializer(MCPToolSerializer):
    diff = serializers.SerializerMethodField(help_text="pinned against listed definition")

    class Meta(MCPToolSerializer.Meta):
        fields = [*MCPToolSerializer.Meta.fields, "diff"]

    @extend_schema_field(ToolDiffSerializer)
    def get_diff(self, tool: MCPTool) -> dict[str, Any]:
        from mcp_app.services.tools import mcp_tool_diff

        return mcp_tool_diff(tool)


class ToolApproveSerializer(serializers.Serializer):
    expected_hash = StrictCharField(required=False, max_length=64,
                                    help_text="the definition_hash you reviewed: refused (409) if a newer listing came")


class ToolRejectSerializer(serializers.Serializer):
    note = _text(4000, default="")


# --- grants --------------------------------------------------------------------------------------------------------
class MCPAgentGrantSerializer(serializers.ModelSerializer):
    server = serializers.SlugRelatedField(slug_field="name", read_only=True)
    agent = serializers.SlugRelatedField(slug_field="key", read_only=True)
    config_overrides = serializers.JSONField(source="overrides_summary", read_only=True,
                                             help_text="args_suffix and timeout, and the env / header names (never values)")

    class Meta:
        model = MCPAgentGrant
        fields = ["id", "server", "agent", "enabled", "tool_allow", "tool_deny", "expires_at", "config_overrides",
                  "granted_by", "created_at", "updated_at"]


class _GrantFields(serializers.Serializer):
    tool_allow = _names(required=False, allow_null=True, max_length=500,
                        help_text="tool names (with or without the prefix); null: every tool")
    tool_deny = _names(required=False, max_length=500, help_text="deny always wins")
    expires_at = serializers.DateTimeField(required=False, allow_null=True)
    enabled = StrictBooleanField(required=False)


class MCPAgentGrantWriteSerializer(_GrantFields):
    server = StrictCharField(max_length=48, help_text="server name")
    agent = StrictCharField(max_length=64, help_text="agent key")
    config_overrides = serializers.DictField(
        required=False, allow_null=True,
        help_text='write-only where secret: {"env": {…}, "headers": {…}, "args_suffix": […], "timeout": s}; '
                  "replaces the current overrides ({} clears them)")


class MCPAgentGrantPatchSerializer(_GrantFields):
    config_overrides = serializers.DictField(
        required=False, allow_null=True, help_text="replaces the current overrides ({} clears them; absent keeps them)")


class CredentialNamesSerializer(serializers.Serializer):
    headers = serializers.ListField(child=serializers.CharField())
    env = serializers.ListField(child=serializers.CharField())


class MCPUserGrantSerializer(serializers.ModelSerializer):
    server = serializers.SlugRelatedField(slug_field="name", read_only=True)
    agent = serializers.SlugRelatedField(slug_field="key", read_only=True, allow_null=True,
                                         help_text="null: every agent")
    credentials = serializers.SerializerMethodField(help_text="the credential names set (values are write-only)")

    class Meta:
        model = MCPUserGrant
        fields = ["id", "server", "agent", "user_id", "enabled", "tool_allow", "tool_deny", "expires_at", "credentials",
                  "granted_by", "created_at", "updated_at"]

    @extend_schema_field(CredentialNamesSerializer)
    def get_credentials(self, grant: MCPUserGrant) -> dict[str, list[str]]:
        names = grant.credentials_names or {}
        return {"headers": list(names.get("headers", [])), "env": list(names.get("env", []))}


class CredentialsWriteSerializer(serializers.Serializer):
    headers = _secrets("write-only: header name → value; null removes one")
    env = _secrets("write-only: variable name → value; null removes one")


class MCPUserGrantPatchSerializer(_GrantFields):
    credentials = CredentialsWriteSerializer(required=False, help_text="write-only; names not given are kept")


class MCPUserGrantWriteSerializer(MCPUserGrantPatchSerializer):
    server = StrictCharField(max_length=48, help_text="server name")
    agent = StrictCharField(required=False, allow_null=True, max_length=64, help_text="agent key; null: every agent")
    user_id = StrictCharField(max_length=255)


# --- access requests -----------------------------------------------------------------------------------------------
class MCPAccessRequestSerializer(serializers.ModelSerializer):
    server = serializers.SlugRelatedField(slug_field="name", read_only=True)
    agent = serializers.SlugRelatedField(slug_field="key", read_only=True, allow_null=True)

    class Meta:
        model = MCPAccessRequest
        fields = ["id", "scope", "server", "agent", "user_id", "tool_allow", "reason", "status", "requested_by",
                  "reviewed_by", "reviewed_at", "review_note", "created_at"]


class MCPAccessRequestWriteSerializer(ClosedBody, serializers.Serializer):
    server = StrictCharField(max_length=48, help_text="server name")
    scope = serializers.ChoiceField(choices=AccessScope.choices, default=AccessScope.AGENT)
    agent = StrictCharField(required=False, allow_null=True, max_length=64,
                            help_text="staff: the agent (key) it is for; an agent token always asks for itself")
    user_id = _text(255, help_text="scope user: whose access")
    tool_allow = _names(required=False, allow_null=True, max_length=500, help_text="the tools asked for; null: all")
    reason = _text(4000)


class AccessReviewSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=["approve", "reject"])
    note = _text(4000, default="")


# --- launchers -----------------------------------------------------------------------------------------------------
class MCPLauncherSerializer(serializers.ModelSerializer):
    class Meta:
        model = MCPLauncher
        fields = ["id", "command", "description", "denied_args", "enabled", "created_at"]


class MCPLauncherWriteSerializer(serializers.Serializer):
    command = StrictCharField(max_length=512, help_text="a bare program name or an absolute path")
    description = _text(300, default="")
    denied_args = serializers.ListField(child=StrictCharField(max_length=200), required=False, allow_null=True,
                                        help_text='arguments refused for this launcher, e.g. ["-c"]; absent keeps them')
    enabled = StrictBooleanField(required=False, default=True)


# --- query strings -------------------------------------------------------------------------------------------------
class GrantFilterSerializer(serializers.Serializer):
    server = _text(48, help_text="only this server's grants")
    agent = _text(64, help_text="only this agent's grants (key)")


class UserGrantFilterSerializer(GrantFilterSerializer):
    user_id = _text(255)


class AccessRequestFilterSerializer(serializers.Serializer):
    status = serializers.ChoiceField(choices=AccessStatus.choices, required=False)
    server = _text(48)
