"""Staff API for configuration as code: GET /api/v1/config/export (YAML, or JSON with ?format=json) and
POST /api/v1/config/import (a YAML or JSON body; ?dry_run=1, ?prune=1). Thin: parse, call the service, render."""
from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.parsers import BaseParser
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from config_app.api.serializers import ConfigImportPlanSerializer
from config_app.document import document_dump, document_load
from config_app.permissions import APPLY_PERMISSION, EXPORT_PERMISSION, may_apply
from config_app.services import config_export, config_import
from goclaw.api import IsStaff, error_responses
from goclaw.errors import PermissionDenied, ValidationError

_FLAG_VALUES = {"": False, "0": False, "false": False, "no": False, "1": True, "true": True, "yes": True}


class DocumentParser(BaseParser):
    """The body as bytes (YAML or JSON: the service reads both); other content types are a 415."""

    media_type = "application/yaml"

    def parse(self, stream, media_type=None, parser_context=None):
        return stream.read() if stream is not None else b""


DOCUMENT_MEDIA_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/plain", "application/json")
DOCUMENT_PARSERS = [type(f"DocumentParser_{i}", (DocumentParser,), {"media_type": media_type})
                    for i, media_type in enumerate(DOCUMENT_MEDIA_TYPES)]


def _flag(request, name: str) -> bool:
    raw = request.query_params.get(name, "").strip().lower()
    if raw not in _FLAG_VALUES:
        raise ValidationError(f"{name}: 1 or 0", code="invalid_query", details={name: "1 or 0"})
    return _FLAG_VALUES[raw]


class ConfigExportView(APIView):
    """The whole governance configuration as one document."""

    permission_classes = [IsStaff]
    staff_permissions = {"GET": ("config_app.export_configuration",)}
    renderer_classes = [JSONRenderer]

    def perform_content_negotiation(self, request, force=False):
        return JSONRenderer(), JSONRenderer.media_type  # ?format= picks the document's format below, not a renderer

    @extend_schema(
        operation_id="config_export", tags=["config"],
        parameters=[OpenApiParameter("format", OpenApiTypes.STR, enum=["yaml", "json"], default="yaml",
                                     description="yaml (default) or json")],
        # the schema of the data, whatever its serialisation: a YAML document is a mapping like the JSON one
        responses={(200, "application/yaml"): OpenApiResponse(OpenApiTypes.OBJECT, description="the YAML document"),
                   (200, "application/json"): OpenApiResponse(OpenApiTypes.OBJECT, description="the same, as JSON")},
        description="Every section of the governance configuration (docs/config-as-code.md). Secrets appear as "
                    "{env: NAME} or {set: true}, never as values; agent tokens never appear.")
    def get(self, request):
        fmt = request.query_params.get("format", "yaml")
        if fmt not in ("yaml", "json"):
            raise ValidationError("format: yaml or json", code="invalid_query", details={"format": "yaml or json"})
        document = config_export()
        if fmt == "json":
            return Response(document)
        response = HttpResponse(document_dump(document), content_type="application/yaml; charset=utf-8")
        response["Content-Disposition"] = 'inline; filename="goclaw-config.yaml"'
        return response


class ConfigImportView(APIView):
    """Apply a document (or only compute its plan with ?dry_run=1)."""

    permission_classes = [IsStaff]
    # A dry run shows the plan against the current configuration (a read, like the export); applying also needs
    # config_app.apply_configuration, checked in post() through the same layer.
    staff_permissions = {"POST": ("config_app.export_configuration",)}
    parser_classes = DOCUMENT_PARSERS

    @extend_schema(
        operation_id="config_import", tags=["config"],
        parameters=[OpenApiParameter("dry_run", OpenApiTypes.BOOL, default=False,
                                     description="1: compute the plan, change nothing"),
                    OpenApiParameter("prune", OpenApiTypes.BOOL, default=False,
                                     description="1: remove the entities the document's sections leave out")],
        request={"application/yaml": OpenApiTypes.OBJECT, "application/json": OpenApiTypes.OBJECT},
        responses={200: ConfigImportPlanSerializer, **error_responses({
            400: "config_invalid: details.problems lists every problem as {path, message}; nothing was changed",
            403: "staff without config_app.export_configuration; applying (not a dry run) also needs "
                 "config_app.apply_configuration (config_apply_denied)"})},
        description="All or nothing, in one transaction. Accepts the export's YAML or JSON, and GoClaw's JSON shapes "
                    "(custom tool lists, MCP servers, grants).")
    def post(self, request):
        dry_run, prune = _flag(request, "dry_run"), _flag(request, "prune")
        if not dry_run and not may_apply(request.user):
            raise PermissionDenied(f"applying a configuration needs the {APPLY_PERMISSION} permission; a dry run "
                                   f"needs {EXPORT_PERMISSION}", code="config_apply_denied")
        data = request.data if isinstance(request.data, bytes) else b""
        plan = config_import(document_load(data), dry_run=dry_run, prune=prune, actor=request.user)
        return Response(plan)
