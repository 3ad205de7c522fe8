"""URLs of the console's dashboard pages (the dashboard itself is the admin home, /admin/)."""
from django.contrib import admin
from django.urls import path

from console_app.dashboard import views

urlpatterns = [
    path("", admin.site.admin_view(views.home), name="dashboard"),
    path("dashboard/badge.json", admin.site.admin_view(views.badge), name="dashboard-badge"),
]
