from __future__ import annotations

import uuid

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector
from django.db import models
from django.db.models import Q, TextField
from django.db.models.functions import Cast, Left
from django.utils import timezone

from goclaw.models import ChainedRecord
from tools_app.choices import InvocationStatus


# Only the head of a call's arguments is searchable: it bounds the index work of the every-call INSERT and keeps the
# document under PostgreSQL's 1 MB tsvector limit whatever a call sends (docs/audit-search.md has the measurements).
SEARCH_ARGUMENTS_CHARS = 8192


def invocation_search_document() -> SearchVector:
    """The full-text document of an audit row (tool name, scrubbed arguments, error): the GIN index and the audit
    search use this one expression, so PostgreSQL matches the query to the index."""
    return SearchVector("tool_name", Left(Cast("arguments", TextField()), SEARCH_ARGUMENTS_CHARS), "error",
                        config="simple")


class ToolInvocation(ChainedRecord):
    """Audit row for one pass through the pipeline, whatever its outcome. Arguments are stored scrubbed. Append-only
    and chained (docs/audit-integrity.md)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # Audit history outlives agents: keyed by the agent's key, deliberately not a foreign key.
    agent_key = models.CharField(max_length=64)
    user_id = models.CharField(max_length=255, blank=True)
    session_key = models.CharField(max_length=255, blank=True)
    channel = models.CharField(max_length=64, blank=True)
    tool_name = models.CharField(max_length=128)
    arguments = models.JSONField(default=dict)
    status = models.CharField(max_length=20, choices=InvocationStatus.choices)
    observed = models.BooleanField(default=False)
    observe_reasons = models.JSONField(default=list, blank=True)
    duration_ms = models.FloatField(default=0)
    result_size = models.IntegerField(default=0)
    error = models.TextField(blank=True)
    output_id = models.UUIDField(null=True, blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    # The person's decision this call waited for or was held as (set on the pending row; the approved run is the
    # request's / change's own `invocation_id`).
    approval_id = models.UUIDField(null=True, blank=True)
    pending_change_id = models.UUIDField(null=True, blank=True)
    # The person who ran the call as the agent ("staff:<username>"); blank when the agent itself called.
    actor = models.CharField(max_length=160, blank=True)
    # Where the call's processes ran: "bubblewrap" / "docker", or "host" for a profile with the sandbox off.
    sandbox_backend = models.CharField(max_length=16, blank=True)
    sandbox_profile = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["agent_key", "-created_at"], name="invocation_agent_recent"),
            models.Index(fields=["tool_name", "-created_at"], name="invocation_tool_recent"),
            models.Index(fields=["status", "-created_at"], name="invocation_status_recent"),
            # fastupdate with a small pending list: an INSERT appends to the list; the one that fills it merges 256 kB,
            # not the default 4 MB (measured: up to 1.3 s for that one tool call).
            GinIndex(invocation_search_document(), name="invocation_search_gin", fastupdate=True,
                     gin_pending_list_limit=256),
            # Partial: only held calls have one, so the every-call INSERT pays nothing for these two.
            models.Index(fields=["approval_id"], name="invocation_approval", condition=Q(approval_id__isnull=False)),
            models.Index(fields=["pending_change_id"], name="invocation_pending_change",
                         condition=Q(pending_change_id__isnull=False)),
        ]
        permissions = [("view_payload", "Can view audit payloads (arguments, errors, stored outputs); each read is recorded"),
                       ("export_audit", "Can export the audit trail (CSV, JSON lines)")]

    def __str__(self) -> str:
        return f"{self.agent_key}:{self.tool_name} {self.status}"


class StoredToolOutput(ChainedRecord):
    """The full (scrubbed) output of a call that exceeded the output budget; read back with tool_output_get.
    Append-only and chained like the audit rows."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    agent_key = models.CharField(max_length=64, db_index=True)
    user_id = models.CharField(max_length=255, blank=True)
    tool_name = models.CharField(max_length=128)
    content = models.TextField()
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    def __str__(self) -> str:
        return f"output {self.id} of {self.tool_name}"


class RateLimitBucket(models.Model):
    """Token-bucket state per key, shared by every process (used when REDIS_URL is not set)."""

    key = models.CharField(max_length=300, primary_key=True)
    tokens = models.FloatField()
    updated_at = models.DateTimeField()
    last_allowed = models.BooleanField(default=True)

    def __str__(self) -> str:
        return self.key


class AuditEvent(ChainedRecord):
    """An append-only record of something people or goclaw did to governed state that the invocation rows do not
    show: an approval or held change decided, audit payloads read or exported, a retention purge. `actor` is
    "staff:<username>", "agent:<key>" or "system"; `details` is scrubbed like an invocation's arguments."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=64, help_text="e.g. approval.decided, audit.payload_viewed, audit.purged")
    actor = models.CharField(max_length=160, blank=True)
    target = models.CharField(max_length=255, blank=True, help_text="what it was about, e.g. an approval's id")
    details = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["kind", "-created_at"], name="audit_event_kind_recent")]

    def __str__(self) -> str:
        return f"{self.kind} by {self.actor or 'system'}"
