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

from tools_app.api import approvals as approval_views  # noqa: E402

urlpatterns += [
    path("approvals", approval_views.ApprovalListView.as_view(), name="approval-list"),
    path("approvals/<uuid:pk>", approval_views.ApprovalDetailView.as_view(), name="approval-detail"),
    path("approvals/<uuid:pk>/decision", approval_views.ApprovalDecisionView.as_view(), name="approval-decision"),
    path("approvals/<uuid:pk>/execute", approval_views.ApprovalExecuteView.as_view(), name="approval-execute"),
    path("approvals/<uuid:pk>/cancel", approval_views.ApprovalCancelView.as_view(), name="approval-cancel"),
    path("pending-changes", approval_views.PendingChangeListView.as_view(), name="pending-change-list"),
    path("pending-changes/<uuid:pk>/decision", approval_views.PendingChangeDecisionView.as_view(), name="pending-change-decision"),
]

from tools_app.api import custom_tools as custom_tool_views  # noqa: E402

urlpatterns += [
    path("custom-tools/", custom_tool_views.CustomToolListView.as_view(), name="custom-tool-list"),
    path("custom-tools/import", custom_tool_views.CustomToolImportView.as_view(), name="custom-tool-import"),
    path("custom-tools/export", custom_tool_views.CustomToolExportView.as_view(), name="custom-tool-export"),
    path("custom-tools/<uuid:pk>", custom_tool_views.CustomToolDetailView.as_view(), name="custom-tool-detail"),
]

from tools_app.api import context_files as context_file_views  # noqa: E402
from tools_app.api import memory as memory_views  # noqa: E402
from tools_app.api import skills as skill_views  # noqa: E402

urlpatterns += context_file_views.urlpatterns + memory_views.urlpatterns + skill_views.urlpatterns
