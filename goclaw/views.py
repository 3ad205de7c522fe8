from django.http import JsonResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.decorators import api_view, authentication_classes, permission_classes

from goclaw.services import health_status_shared

_HEALTH = inline_serializer("Health", {
    "ok": serializers.BooleanField(help_text="every check is ok"),
    "checks": serializers.DictField(child=inline_serializer("HealthCheck", {
        "ok": serializers.BooleanField(),
        "error": serializers.CharField(required=False),
    }), help_text="database, pgvector, worker, channel_layer and the apps' own checks; more fields per check"),
})


@extend_schema(summary="Liveness and dependencies (no credentials)", tags=["health"],
               responses={200: _HEALTH, 503: OpenApiResponse(_HEALTH, description="at least one check is down")})
@api_view(["GET", "HEAD"])
@authentication_classes([])
@permission_classes([])
def healthz(request):
    """Database, pgvector, worker heartbeat, channel layer, the apps' checks: 200 when all are up, else 503.
    Probes are shared between concurrent requests and reused for GOCLAW_HEALTH_CACHE_SECONDS."""
    status = health_status_shared()
    return JsonResponse(status, status=200 if status["ok"] else 503)
