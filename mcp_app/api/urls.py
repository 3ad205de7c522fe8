"""The MCP API, mounted at /api/v1/mcp/ by goclaw/urls.py. Row ids are matched as text and parsed by the views, so
a malformed id is the same 404 envelope as an unknown one (after the credential checks)."""
from django.urls import path

from mcp_app.api import views

urlpatterns = [
    path("servers", views.ServerListView.as_view(), name="mcp-server-list"),
    path("servers/<str:name>", views.ServerDetailView.as_view(), name="mcp-server-detail"),
    path("servers/<str:name>/test", views.ServerTestView.as_view(), name="mcp-server-test"),
    path("servers/<str:name>/reconnect", views.ServerReconnectView.as_view(), name="mcp-server-reconnect"),
    path("servers/<str:name>/tools", views.ToolListView.as_view(), name="mcp-tool-list"),
    path("servers/<str:name>/tools/<str:tool>", views.ToolDetailView.as_view(), name="mcp-tool-detail"),
    path("servers/<str:name>/tools/<str:tool>/approve", views.ToolApproveView.as_view(), name="mcp-tool-approve"),
    path("servers/<str:name>/tools/<str:tool>/reject", views.ToolRejectView.as_view(), name="mcp-tool-reject"),
    path("grants", views.GrantListView.as_view(), name="mcp-grant-list"),
    path("grants/<str:id>", views.GrantDetailView.as_view(), name="mcp-grant-detail"),
    path("user-grants", views.UserGrantListView.as_view(), name="mcp-user-grant-list"),
    path("user-grants/<str:id>", views.UserGrantDetailView.as_view(), name="mcp-user-grant-detail"),
    path("access-requests", views.AccessRequestListView.as_view(), name="mcp-access-request-list"),
    path("access-requests/<str:id>", views.AccessRequestDetailView.as_view(), name="mcp-access-request-detail"),
    path("access-requests/<str:id>/review", views.AccessRequestReviewView.as_view(), name="mcp-access-request-review"),
    path("access-requests/<str:id>/withdraw", views.AccessRequestWithdrawView.as_view(),
         name="mcp-access-request-withdraw"),
    path("launchers", views.LauncherListView.as_view(), name="mcp-launcher-list"),
]
