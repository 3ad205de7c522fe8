"""ASGI entry point: WebSockets (and HTTP when served by daphne alone, e.g. in development)."""
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "goclaw.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter  # noqa: E402

from goclaw.routing import websocket_application  # noqa: E402

application = ProtocolTypeRouter({"http": django_asgi_app, "websocket": websocket_application})

from goclaw.warm import settle  # noqa: E402

settle()
