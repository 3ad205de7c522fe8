from django.urls import path

from tools_app.api import views

urlpatterns = [
    path("agents/me", views.AgentMeView.as_view(), name="agent-me"),
    path("tools", views.ToolCatalogView.as_view(), name="tool-catalog"),
    path("tools/execute", views.ToolExecuteView.as_view(), name="tool-execute"),
    path("tools/explain", views.ToolExplainView.as_view(), name="tool-explain"),
    path("security/check-command", views.CheckCommandView.as_view(), name="security-check-command"),
    path("security/scrub", views.ScrubView.as_view(), name="security-scrub"),
    path("invocations", views.InvocationListView.as_view(), name="invocation-list"),
    path("invocations/<uuid:pk>", views.InvocationDetailView.as_view(), name="invocation-detail"),
]
