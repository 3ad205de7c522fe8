"""URLs of the console's audit pages (staff sessions only, through the admin site's login)."""
from django.contrib import admin
from django.urls import path

from console_app.audit import views

urlpatterns = [
    path("", admin.site.admin_view(views.audit_search_page), name="audit_search"),
    path("export.csv", admin.site.admin_view(views.audit_export), {"fmt": "csv"}, name="audit_export_csv"),
    path("export.jsonl", admin.site.admin_view(views.audit_export), {"fmt": "jsonl"}, name="audit_export_jsonl"),
    path("<str:invocation_id>/", admin.site.admin_view(views.audit_detail_page), name="audit_detail"),
]
