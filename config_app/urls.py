"""The admin page's URLs, under /admin/config/ (staff sessions only, through the admin site's login)."""
from django.contrib import admin
from django.urls import path

from config_app import views

app_name = "config"
urlpatterns = [
    path("", admin.site.admin_view(views.config_page), name="page"),
    path("apply/", admin.site.admin_view(views.config_apply), name="apply"),
    path("export.yaml", admin.site.admin_view(views.config_download), name="download"),
]
