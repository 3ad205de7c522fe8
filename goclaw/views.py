from django.http import JsonResponse

from goclaw.services import health_status


def healthz(request):
    """Database, pgvector, worker heartbeat, channel layer: 200 when all are up, else 503."""
    status = health_status()
    return JsonResponse(status, status=200 if status["ok"] else 503)
