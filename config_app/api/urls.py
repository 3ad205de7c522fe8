"""/api/v1/config/: the staff endpoints of configuration as code (docs/config-as-code.md)."""
from django.urls import path

from config_app.api import views

urlpatterns = [
    path("export", views.ConfigExportView.as_view(), name="config-export"),
    path("import", views.ConfigImportView.as_view(), name="config-import"),
]
