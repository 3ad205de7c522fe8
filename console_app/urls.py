"""The console's pages, under /admin/console/ (staff sessions only, through the admin site's login)."""
from django.urls import include, path

app_name = "console"
urlpatterns = [
    path("", include("console_app.dashboard.urls")),
    path("audit/", include("console_app.audit.urls")),
    path("playground/", include("console_app.playground.urls")),
    path("sessions/", include("console_app.sessions.urls")),
]
