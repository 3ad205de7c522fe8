from django.http import JsonResponse
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.decorators import api_view, permission_classes

from goclaw.api import agent_of, is_staff_request
from goclaw.services import health_status_shared

_HEALTH = inline_serializer("Health", {
    "status": serializers.ChoiceField(choices=["ok", "degraded"], help_text="degraded: at least one check is down"),
    "ok": serializers.BooleanField(help_text="every check is ok"),
    "checks": serializers.DictField(required=False, child=inline_serializer("HealthCheck", {
        "ok": serializers.BooleanField(),
        "error": serializers.CharField(required=False),
    }), help_text="only with an agent token or a staff session: database, pgvector, worker, channel_layer and the "
                  "apps' own checks; more fields per check"),
})


@extend_schema(summary="Liveness and dependencies (status for anyone, the checks with credentials)", tags=["health"],
               description="Anyone gets `status` and `ok`. The checks themselves (versions, paths, the sandbox user, "
                           "the worker's last heartbeat…) describe the machine: they are included only for an agent "
                           "token (`Authorization: Bearer`) or an active staff session. An invalid token is a 401.",
               responses={200: _HEALTH, 503: OpenApiResponse(_HEALTH, description="at least one check is down")})
@api_view(["GET", "HEAD"])
@permission_classes([])  # anyone; the default authenticators (agent token, session) decide how much they see
def healthz(request):
    """Database, pgvector, worker heartbeat, channel layer, the apps' checks: 200 when all are up, else 503.
    Probes are shared between concurrent requests and reused for GOCLAW_HEALTH_CACHE_SECONDS."""
    status = health_status_shared()
    summary = {"status": "ok" if status["ok"] else "degraded", "ok": status["ok"]}
    body = {**summary, "checks": status["checks"]} if agent_of(request) is not None or is_staff_request(request) else summary
    return JsonResponse(body, status=200 if status["ok"] else 503)
