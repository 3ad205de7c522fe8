from django.conf import settings


def goclaw(request):
    """Expose the WebSocket URL to admin pages (the live approval queue connects to it)."""
    return {"GOCLAW_WS_URL": settings.WS_PUBLIC_URL}
