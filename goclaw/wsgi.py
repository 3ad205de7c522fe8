import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "goclaw.settings")
django_application = get_wsgi_application()

from goclaw.warm import settle  # noqa: E402
from mcp_app.server.wsgi import MainPortMCP  # noqa: E402

application = MainPortMCP(django_application)  # a stateless MCP tools/call is answered before Django's handling
settle()
