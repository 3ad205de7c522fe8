"""`/mcp` on the main port (mounted by goclaw.urls)."""
from django.urls import path

from mcp_app.server.proxy import mcp_proxy

urlpatterns = [path("", mcp_proxy, name="mcp")]
