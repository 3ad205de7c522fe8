from channels.routing import URLRouter
from django.urls import path

from goclaw.consumers import EventsConsumer, TokenOrSessionAuthMiddleware

websocket_urlpatterns = [path("ws/events/", EventsConsumer.as_asgi())]
websocket_application = TokenOrSessionAuthMiddleware(URLRouter(websocket_urlpatterns))
