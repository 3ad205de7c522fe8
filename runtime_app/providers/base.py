"""What the agent loop asks of an LLM provider and what it gets back, whatever the wire protocol. The loop speaks
only these types; `runtime_app.providers.<kind>` turns them into a protocol's requests and back."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call: from the agent's catalog (name, description, JSON Schema of its arguments)."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolCallRequest:
    """One tool call the model asked for. `arguments` is the raw JSON text it sent (it may not parse: the loop
    answers the model with the problem)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ChatMessage:
    """One message of the conversation in protocol-neutral form. role: user | assistant | tool.
    assistant: `content` and/or `tool_calls`; tool: `tool_call_id`, `name` and `content` (the result text),
    `is_error` when the call failed or was refused."""

    role: str
    content: str = ""
    tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_call_id: str = ""
    name: str = ""
    is_error: bool = False


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True)
class ChatReply:
    """The model's answer to one request: text, tool calls (possibly several, in order), usage, why it stopped."""

    content: str
    tool_calls: tuple[ToolCallRequest, ...] = ()
    usage: Usage = Usage()
    stop_reason: str = ""
    model: str = ""


@dataclass(frozen=True)
class ChatRequest:
    """One model request: the system prompt, the conversation, the tools, the model. `on_text` receives streamed
    text as it arrives (live updates); `cancel`, when set, stops the request at once (ProviderError cancelled)."""

    model: str
    system: str
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 4096
    on_text: Callable[[str], None] | None = None
    cancel: threading.Event | None = None


class ProviderError(Exception):
    """A request that did not produce a reply. `code`: unauthorized (401/403), model_not_found (404),
    rate_limited (429), server_error (5xx), timeout, connection (incl. refused by the outbound guard),
    bad_response (unparseable), bad_request (other 4xx), cancelled. `retryable` says whether trying again may
    help; `retry_after` is the server's hint in seconds (429/503 `retry-after`); `permanent` marks a failure of a
    retryable kind that cannot pass (the outbound guard's refusal)."""

    RETRYABLE = frozenset({"rate_limited", "server_error", "timeout", "connection"})

    def __init__(self, code: str, message: str, *, status: int | None = None, retry_after: float | None = None,
                 permanent: bool = False):
        super().__init__(message)
        self.code, self.message, self.status, self.retry_after = code, message, status, retry_after
        self.permanent = permanent

    @property
    def retryable(self) -> bool:
        return self.code in self.RETRYABLE and not self.permanent


@dataclass(frozen=True)
class ProviderConfig:
    """A provider as a client needs it (the API key opened from its seal)."""

    name: str
    kind: str
    base_url: str
    api_key: str = ""
    timeout: float = 120.0
    allow_private_network: bool = False
    max_retries: int = 2
    backoff_base: float = 0.5   # seconds; doubled each attempt, with jitter, capped by backoff_max
    backoff_max: float = 20.0
    extra_headers: dict[str, str] = field(default_factory=dict)
