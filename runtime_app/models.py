"""Hosted agents: the LLM providers they run on, their sessions and the messages of each session. Everything a run
needs lives in these rows (a runner process holds only a lease), so any runner can pick a session up: after a
restart, after an approval decision, after a cancel (docs/runtime.md)."""
from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from runtime_app.choices import MessageRole, ProviderKind, SessionOrigin, SessionStatus


class LLMProvider(models.Model):
    """An LLM endpoint agents run on: an OpenAI-compatible chat-completions server (OpenAI, Ollama, vLLM,
    llama.cpp, …) or Anthropic's Messages API. The API key is sealed to the row and never shown again."""

    name = models.SlugField(max_length=64, unique=True)
    kind = models.CharField(max_length=20, choices=ProviderKind.choices, default=ProviderKind.OPENAI)
    base_url = models.URLField(max_length=500, help_text="e.g. https://api.openai.com/v1, http://127.0.0.1:11434/v1")
    api_key_sealed = models.TextField(blank=True, help_text="sealed (goclaw.crypto); write-only")
    model = models.CharField(max_length=128, blank=True, help_text="default model; an agent's own model wins")
    timeout_seconds = models.FloatField(default=120.0, help_text="per model request")
    max_concurrent = models.PositiveIntegerField(default=4, help_text="model requests in flight at once, across "
                                                                      "every runner process")
    allow_private_network = models.BooleanField(default=False, help_text="may reach loopback and private addresses "
                                                                        "(a local model server); never cloud metadata")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "LLM provider"

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

    @property
    def has_api_key(self) -> bool:
        return bool(self.api_key_sealed)


class Session(models.Model):
    """One conversation of a hosted agent (or a subagent's task). `status` running = a runner should work on it;
    the runner that does holds `lease_until`. Parked on an approval it holds none: the decision makes it runnable."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    key = models.CharField(max_length=255, unique=True)
    agent = models.ForeignKey("tools_app.Agent", on_delete=models.CASCADE, related_name="hosted_sessions")
    user_id = models.CharField(max_length=255, blank=True)
    channel = models.CharField(max_length=64, blank=True)
    chat_id = models.CharField(max_length=255, blank=True)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.CASCADE, related_name="children")
    depth = models.PositiveSmallIntegerField(default=0, help_text="subagent nesting depth (0: an agent's own run)")
    origin = models.CharField(max_length=20, choices=SessionOrigin.choices, default=SessionOrigin.DIRECT)
    ref = models.CharField(max_length=100, blank=True, help_text="what started it: delegation:<id>, team:<id>, …")
    skip_gates = models.BooleanField(default=False, help_text="quality gates do not apply to what this run delegates "
                                                              "(a gate's reviewer, an evaluate loop's rounds)")
    label = models.CharField(max_length=200, blank=True, help_text="a subagent's label")
    task = models.TextField(blank=True, help_text="a subagent's task")
    sync = models.BooleanField(default=False, help_text="a subagent its parent waits for (spawn run): not announced")
    status = models.CharField(max_length=20, choices=SessionStatus.choices, default=SessionStatus.COMPLETED)
    end_reason = models.CharField(max_length=40, blank=True, help_text="why it stopped: max_iterations, "
                                                                       "provider_error, cancelled, …")
    error = models.TextField(blank=True, help_text="what went wrong, for people (scrubbed)")
    result = models.TextField(blank=True, help_text="the last reply of a finished run")
    iterations = models.PositiveIntegerField(default=0, help_text="model turns of the current run")
    max_iterations = models.PositiveIntegerField(default=20)
    retries = models.PositiveSmallIntegerField(default=0)
    tokens_in = models.BigIntegerField(default=0)
    tokens_out = models.BigIntegerField(default=0)
    waiting_approval = models.ForeignKey("tools_app.ApprovalRequest", null=True, blank=True,
                                         on_delete=models.SET_NULL, related_name="+")
    announced = models.BooleanField(default=False, help_text="a subagent's end was told to its parent")
    lease_owner = models.CharField(max_length=120, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    created_by = models.CharField(max_length=200, blank=True, help_text="agent:<key> or staff:<username>")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [
            models.Index(fields=["agent", "-updated_at"], name="runtime_session_agent"),
            models.Index(fields=["status", "lease_until"], name="runtime_session_runnable",
                         condition=Q(status__in=["running", "waiting_approval"])),
            models.Index(fields=["parent", "status"], name="runtime_session_children"),
        ]
        permissions = [("run_session", "Can start, message and cancel hosted agent sessions")]

    def __str__(self) -> str:
        return self.key

    @property
    def is_active(self) -> bool:
        return self.status in (SessionStatus.RUNNING, SessionStatus.WAITING_APPROVAL)


class SessionMessage(models.Model):
    """One message of a session, in order: a person's (or channel's) message, the model's reply with its tool calls,
    each tool call's result with the audit row it came from, a subagent's announced result."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="messages")
    seq = models.PositiveIntegerField()
    role = models.CharField(max_length=20, choices=MessageRole.choices)
    content = models.TextField(blank=True)
    # assistant: [{"id", "name", "arguments"}] as the model sent them (arguments: the raw JSON text)
    tool_calls = models.JSONField(default=list, blank=True)
    # tool: which call this answers, the pipeline's verdict and the audit row (tools_app.ToolInvocation id)
    tool_call_id = models.CharField(max_length=200, blank=True)
    tool_name = models.CharField(max_length=200, blank=True)
    verdict = models.CharField(max_length=30, blank=True)
    is_error = models.BooleanField(default=False)
    invocation_id = models.UUIDField(null=True, blank=True)
    approval_id = models.UUIDField(null=True, blank=True)
    child = models.ForeignKey(Session, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                              help_text="announce: the subagent whose result this is")
    tokens_in = models.PositiveIntegerField(default=0)
    tokens_out = models.PositiveIntegerField(default=0)
    # assistant: the last message the model had seen when it answered (later ones still need an answer)
    answers_seq = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session", "seq"]
        constraints = [models.UniqueConstraint(fields=["session", "seq"], name="runtime_message_seq_unique")]

    def __str__(self) -> str:
        return f"{self.session_id}#{self.seq} {self.role}"
