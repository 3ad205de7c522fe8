"""The hosted-agents API, mounted at /api/v1/ by goclaw/urls.py: LLM providers (staff). Providers are matched by
name as text; an unknown or malformed name is the same 404 envelope (after the credential checks)."""
from django.urls import path

from runtime_app.api import providers

urlpatterns = [
    path("providers", providers.ProviderListView.as_view(), name="llm-provider-list"),
    path("providers/<str:name>", providers.ProviderDetailView.as_view(), name="llm-provider-detail"),
]
