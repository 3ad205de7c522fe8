"""tools_app models, one module per area; everything is importable from `tools_app.models`."""
from tools_app.models.agents import Agent, AgentToken
from tools_app.models.approvals import ApprovalRequest, ApprovalRule, PendingChange, ToolPermission
from tools_app.models.cli_binaries import SecureCLIBinary
from tools_app.models.custom_tools import CustomTool
from tools_app.models.invocations import AuditEvent, RateLimitBucket, StoredToolOutput, ToolInvocation
from tools_app.models.policy import ToolPolicy, ToolProfile
from tools_app.models.notifications import NotificationChannel, NotificationDelivery  # noqa: F401,E402
from tools_app.models import context_files, memory, skills  # noqa: F401,E402  (P10: their models register on import)
from tools_app.models.oauth import OAuthAuthorizationCode, OAuthClient, OAuthGrant, OAuthRefreshToken  # noqa: F401,E402

__all__ = ["Agent", "AgentToken", "AuditEvent", "RateLimitBucket", "StoredToolOutput", "ToolInvocation",
           "ToolPolicy", "ToolProfile",
           "ApprovalRequest", "ApprovalRule", "PendingChange", "ToolPermission",
           "CustomTool", "SecureCLIBinary"]
