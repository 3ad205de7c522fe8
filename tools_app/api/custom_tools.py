"""Custom tools API, staff only (docs/custom-tools.md): CRUD, import and export. Agents never reach it (403); they see
their custom tools through the catalog. The env is write-only: requests may set or unset variables, responses carry
only the names that are set and when they last changed. Thin: parse, call a service, render."""
from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from goclaw.api import (IsStaff, StrictBooleanField, StrictCharField, StrictIntegerField, error_responses,
                        validated_query)
from goclaw.errors import NotFound, ValidationError
from tools_app.models import Agent, CustomTool
from tools_app.models.custom_tools import CUSTOM_TOOL_MAX_TIMEOUT
from tools_app.services import custom_tools as svc


class CustomToolSerializer(serializers.ModelSerializer):
    agent = serializers.SlugRelatedField(slug_field="key", read_only=True, allow_null=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    env_names = serializers.ListField(child=serializers.CharField(), read_only=True,
                                      help_text="the variables set (values are write-only and never returned)")

    class Meta:
        model = CustomTool
        fields = ["id", "name", "description", "parameters", "command", "timeout_seconds", "working_dir", "agent",
                  "enabled", "group", "requires_approval", "always_require_approval", "env_names", "env_changed_at",
                  "created_by", "created_at", "updated_at"]


class CustomToolWriteSerializer(serializers.Serializer):
    name = StrictCharField(max_length=64)
    description = StrictCharField(max_length=svc.MAX_DESCRIPTION_CHARS)
    parameters = serializers.DictField(help_text="JSON Schema of the arguments (type object)")
    command = StrictCharField(max_length=svc.MAX_COMMAND_CHARS,
                              help_text="shell template: {{.name}} becomes the quoted argument ('' when left out)")
    timeout_seconds = StrictIntegerField(required=False, min_value=1, max_value=CUSTOM_TOOL_MAX_TIMEOUT)
    working_dir = StrictCharField(required=False, allow_blank=True, max_length=1024)
    agent = StrictCharField(required=False, allow_null=True, max_length=64, help_text="agent key; null: every agent")
    enabled = StrictBooleanField(required=False)
    group = StrictCharField(required=False, max_length=64)
    requires_approval = StrictBooleanField(required=False)
    always_require_approval = StrictBooleanField(required=False)
    env = serializers.DictField(child=StrictCharField(allow_null=True, allow_blank=True), required=False,
                                help_text="write-only: sets these variables; null unsets one; others are kept")


class ExportFilterSerializer(serializers.Serializer):
    agent = StrictCharField(required=False, max_length=64, help_text="only this agent's own tools")


class ImportReportSerializer(serializers.Serializer):
    created = serializers.ListField(child=serializers.CharField())
    updated = serializers.ListField(child=serializers.CharField())


def _agent(key: str | None) -> Agent | None:
    if key is None:
        return None
    agent = Agent.objects.filter(key=key).first() if "\x00" not in key else None
    if agent is None:
        raise ValidationError(f"agent: no agent has the key {key[:64]!r}", code="custom_tool_invalid",
                              details={"agent": "unknown agent key"})
    return agent


def _changes(request, *, partial: bool) -> tuple[dict, dict | None]:
    serializer = CustomToolWriteSerializer(data=request.data, partial=partial)
    if not serializer.is_valid():
        raise ValidationError("invalid request", code="invalid_request", details=serializer.errors)
    data = dict(serializer.validated_data)
    env = data.pop("env", None)
    if "agent" in data:
        data["agent"] = _agent(data["agent"])
    return data, env


WRITE_ERRORS = error_responses({400: "invalid definition (custom_tool_invalid) or request",
                                409: "the name is taken by a built-in or a visible custom tool "
                                     "(custom_tool_name_collision)"})


class CustomToolListView(ListAPIView):
    permission_classes = [IsStaff]
    staff_permissions = {"GET": ("tools_app.view_customtool",), "POST": ("tools_app.add_customtool",)}
    serializer_class = CustomToolSerializer

    def get_queryset(self):
        return CustomTool.objects.select_related("agent", "created_by").order_by("name", "created_at")

    @extend_schema(summary="Custom tools (staff)")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(request=CustomToolWriteSerializer, responses={201: CustomToolSerializer, **WRITE_ERRORS},
                   summary="Create a custom tool (staff)")
    def post(self, request):
        data, env = _changes(request, partial=False)
        tool = svc.custom_tool_create(actor=request.user, env=env, **data)
        return Response(CustomToolSerializer(tool).data, status=201)


class CustomToolDetailView(APIView):
    permission_classes = [IsStaff]
    staff_permissions = {"GET": ("tools_app.view_customtool",), "PUT": ("tools_app.change_customtool",),
                         "PATCH": ("tools_app.change_customtool",), "DELETE": ("tools_app.delete_customtool",)}

    @extend_schema(responses={200: CustomToolSerializer, **error_responses({404: "no such custom tool"})},
                   summary="One custom tool (staff)")
    def get(self, request, pk):
        return Response(CustomToolSerializer(get_object_or_404(CustomTool, pk=pk)).data)

    def _update(self, request, pk, *, partial: bool) -> Response:
        tool = get_object_or_404(CustomTool, pk=pk)
        data, env = _changes(request, partial=partial)
        tool = svc.custom_tool_update(actor=request.user, tool=tool, env=env, **data)
        return Response(CustomToolSerializer(tool).data)

    @extend_schema(request=CustomToolWriteSerializer,
                   responses={200: CustomToolSerializer, **WRITE_ERRORS, **error_responses({404: "no such custom tool"})},
                   summary="Replace a custom tool's definition (staff; env variables not named are kept)")
    def put(self, request, pk):
        return self._update(request, pk, partial=False)

    @extend_schema(request=CustomToolWriteSerializer,
                   responses={200: CustomToolSerializer, **WRITE_ERRORS, **error_responses({404: "no such custom tool"})},
                   summary="Change some fields of a custom tool (staff)")
    def patch(self, request, pk):
        return self._update(request, pk, partial=True)

    @extend_schema(responses={204: None, **error_responses({404: "no such custom tool"})},
                   summary="Delete a custom tool (staff)")
    def delete(self, request, pk):
        svc.custom_tool_delete(actor=request.user, tool=get_object_or_404(CustomTool, pk=pk))
        return Response(status=204)


class CustomToolImportView(APIView):
    permission_classes = [IsStaff]
    staff_permissions = {"POST": ("tools_app.add_customtool", "tools_app.change_customtool")}  # creates or updates

    @extend_schema(request=OpenApiTypes.ANY,
                   responses={200: ImportReportSerializer, **error_responses({
                       400: "nothing was saved; details.problems lists every problem with its position "
                            "(custom_tool_import_invalid)"})},
                   summary="Import custom tools: one object or a list, all or nothing (staff)")
    def post(self, request):
        return Response(svc.custom_tool_import(actor=request.user, data=request.data))


class CustomToolExportView(APIView):
    permission_classes = [IsStaff]
    staff_permissions = {"GET": ("tools_app.view_customtool",)}

    @extend_schema(parameters=[ExportFilterSerializer], responses={200: OpenApiTypes.ANY, **error_responses({
        404: "no agent has this key"})}, summary="Export custom tools in the import format, never env values (staff)")
    def get(self, request):
        key = validated_query(ExportFilterSerializer, request).get("agent")
        agent = Agent.objects.filter(key=key).first() if key is not None else None
        if key is not None and agent is None:
            raise NotFound(f"no agent has the key {key[:64]!r}")
        return Response(svc.custom_tool_export(agent=agent))
