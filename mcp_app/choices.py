"""Choices of the MCP app (docs/mcp.md)."""
from django.db import models


class Transport(models.TextChoices):
    STDIO = "stdio", "stdio (a local process)"
    SSE = "sse", "SSE"
    STREAMABLE_HTTP = "streamable-http", "streamable HTTP"


class HealthState(models.TextChoices):
    UNKNOWN = "unknown", "not checked yet"
    CONNECTED = "connected", "connected"
    DEGRADED = "degraded", "failing pings"
    DISCONNECTED = "disconnected", "disconnected, reconnecting"
    COOLDOWN = "cooldown", "gave up reconnecting (cooldown; reconnect by hand)"


class ToolStatus(models.TextChoices):
    APPROVED = "approved", "approved"
    PENDING = "pending", "new, waiting for review"
    QUARANTINED = "quarantined", "changed or flagged, waiting for review"
    REJECTED = "rejected", "rejected by a reviewer"


class AccessScope(models.TextChoices):
    AGENT = "agent", "agent"
    USER = "user", "user"


class AccessStatus(models.TextChoices):
    PENDING = "pending", "pending"
    APPROVED = "approved", "approved"
    REJECTED = "rejected", "rejected"
    WITHDRAWN = "withdrawn", "withdrawn"
