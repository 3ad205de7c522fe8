from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from goclaw import views

admin.autodiscover()  # settings install SimpleAdminConfig: the admin's modules load with the URLconf, not at start-up

urlpatterns = [
    # First: the agents' hot paths (tools/execute, tools, agents/me) are matched before anything else is tried. Its
    # routes share no prefix with the other api/v1/ includes (mcp/, config/, teams/, routes/, agent-links/, …).
    path("api/v1/", include("tools_app.api.urls")),
    path("admin/config/", include("config_app.urls")),  # before admin/: the admin's catch-all would answer it
    path("admin/console/", include("console_app.urls")),  # likewise before admin/
    path("admin/", admin.site.urls),
    path("healthz", views.healthz, name="healthz"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/v1/mcp/", include("mcp_app.api.urls")),
    path("mcp", include("mcp_app.server.urls")),  # proxied to the MCP server (docs/mcp-server.md)
    path("", include("tools_app.oauth.urls")),  # .well-known/oauth-… and oauth/… (docs/mcp-oauth.md)
    path("api/v1/config/", include("config_app.api.urls")),
    path("api/v1/", include("teams_app.api.urls")),
    path("api/v1/", include("runtime_app.api.sessions")),  # sessions, sessions/<id>/…
    path("api/v1/", include("runtime_app.api.urls")),  # providers (and sessions); no prefix shared with the above
    path("teams/", include("teams_app.urls")),
]

handler404 = "goclaw.api.json_404"
handler500 = "goclaw.api.json_500"
