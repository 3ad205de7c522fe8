"""Approval notifications: webhook channels people hear through when a call waits for them, and one delivery row per
(channel, approval request), sent and retried by the worker. See docs/approval-notifications.md."""
from __future__ import annotations

from urllib.parse import urlsplit

from django.db import models
from django.utils import timezone

from tools_app.models.agents import Agent
from tools_app.models.approvals import ApprovalRequest


class NotificationKind(models.TextChoices):
    GENERIC = "generic", "Generic JSON webhook"
    SLACK = "slack", "Slack-compatible (incoming webhook)"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"
    SKIPPED = "skipped", "skipped (decided or expired before it was sent)"


class NotificationChannel(models.Model):
    """One webhook: a generic JSON POST or a Slack-compatible message per waiting approval request. The optional
    signing secret is sealed (goclaw.crypto, bound to this row) and never shown again."""

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=10, choices=NotificationKind.choices, default=NotificationKind.GENERIC)
    url = models.URLField(max_length=2000, help_text="where the POST goes (http or https); redirects are not followed")
    secret_sealed = models.TextField(blank=True, help_text="HMAC-SHA256 signing secret, sealed; empty: unsigned")
    enabled = models.BooleanField(default=True)
    allow_private_network = models.BooleanField(
        default=False, help_text="the URL may point at loopback or private addresses (a chat server on your own network)")
    agents = models.ManyToManyField(Agent, blank=True, related_name="+",
                                    help_text="only requests of these agents; none selected: every agent")
    tool_names = models.JSONField(default=list, blank=True,
                                  help_text='only requests for these tools, e.g. ["exec", "write_file"]; empty: every tool')
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

    @property
    def url_origin(self) -> str:
        """Scheme and host only: a webhook URL's path is often its credential (Slack's are)."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}/…" if parts.netloc else "(invalid URL)"


class NotificationDelivery(models.Model):
    """One notification of one approval request on one channel: created with the request (same transaction), sent
    by the worker, retried with backoff until sent, given up on (failed), or skipped once the request is decided."""

    channel = models.ForeignKey(NotificationChannel, on_delete=models.CASCADE, related_name="deliveries")
    approval = models.ForeignKey(ApprovalRequest, on_delete=models.CASCADE, related_name="notification_deliveries")
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.CharField(max_length=300, blank=True, help_text="scrubbed; never the URL or the secret")
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="notification_delivery_due")]
        constraints = [models.UniqueConstraint(fields=["channel", "approval"], name="notification_delivery_unique")]

    def __str__(self) -> str:
        return f"{self.channel.name} → {self.approval_id} {self.status}"
