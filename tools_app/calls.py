"""What a tool call is, what its caller said about it, and what came of it. A leaf module (standard library only):
the pipeline, the policy engine, approvals, the API and the admin all use these, and each field of a call's
context is declared here once."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class CallContext:
    """Who and where a call comes from, as the caller reports it. The agent token is the principal; these values
    narrow what the call may do (catalog, rate limits, per-user workspace) and are echoed only as scrubbed labels."""

    user_id: str = ""
    session_key: str = ""
    channel: str = ""
    chat_id: str = ""
    peer_kind: str = ""
    provider: str = ""               # "" = the agent's own provider
    subagent_depth: int = 0
    request_allow: tuple[str, ...] | None = None  # per-request allow list (tool names or group:x); None = no list
    request_id: str = ""
    # The person who ran the call on the agent's behalf ("staff:<username>", e.g. from the admin playground); ""
    # when the agent itself called. Never taken from an agent's request: the API's context fields omit it.
    actor: str = ""

    def __post_init__(self) -> None:
        if self.request_allow is not None and not isinstance(self.request_allow, tuple):
            object.__setattr__(self, "request_allow", tuple(self.request_allow))

    def replace(self, **changes: Any) -> "CallContext":
        return dataclasses.replace(self, **changes)

    def stored(self) -> dict[str, Any]:
        """JSON-ready form (approval requests and held changes keep it to resume the call in the same context)."""
        data = dataclasses.asdict(self)
        data["request_allow"] = list(self.request_allow) if self.request_allow is not None else None
        return data

    @classmethod
    def from_stored(cls, data: dict[str, Any] | None) -> "CallContext":
        data = data or {}
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if data.get(f.name) is not None})


CONTEXT_FIELDS = frozenset(f.name for f in dataclasses.fields(CallContext))


@dataclass(frozen=True)
class Grant:
    """A person's decision that lets a held call go on (an approved request, an accepted file change). The
    pipeline's approval step redeems it once every other check has passed again: `redeem` refuses (raises) when
    the call's arguments are not the approved ones, and `claim` makes it single-use."""

    args_hash: str
    claim: Callable[[], None]
    on_mismatch: Callable[[], None]

    def redeem(self, args_hash: str) -> None:
        if args_hash != self.args_hash:
            self.on_mismatch()
            raise RuntimeError("grant mismatch handler did not refuse")  # fail closed whatever the handler does
        self.claim()


class ToolCall:
    """One request to run a tool: the agent (the principal), the tool name as asked, its arguments, and the
    caller's context. `ToolCall(agent, tool, args, user_id=…, session_key=…)` is a shorthand for passing a
    `CallContext` with those fields. `grant` is set only when a person's decision resumes a held call; `cancel`, a
    threading.Event the caller may set to stop the call (a hosted agent's session cancelled mid-call)."""

    __slots__ = ("agent", "tool", "arguments", "context", "grant", "cancel")

    def __init__(self, agent: Any, tool: str, arguments: Any, context: CallContext | None = None,
                 grant: Grant | None = None, cancel: Any = None, **fields: Any) -> None:
        if fields:
            unknown = set(fields) - CONTEXT_FIELDS
            if unknown:
                raise TypeError(f"unknown call context field(s): {', '.join(sorted(unknown))}")
            context = (context or CallContext()).replace(**fields)
        self.agent, self.tool, self.arguments = agent, tool, arguments
        self.context = context or CallContext()
        self.grant = grant
        self.cancel = cancel

    def __repr__(self) -> str:
        return f"ToolCall(agent={getattr(self.agent, 'key', self.agent)!r}, tool={self.tool!r})"


@dataclass
class Outcome:
    """What the pipeline answers for one call: the model sees `as_dict()`; the rest goes to the audit row."""

    status: str
    for_llm: str
    for_user: str | None = None
    is_error: bool = False
    invocation_id: str = ""
    duration_ms: float = 0.0
    observations: list[str] = field(default_factory=list)
    output_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    sandbox: dict[str, str] | None = None  # where the tool's processes ran (audit row only, not the response)

    def as_dict(self) -> dict[str, Any]:
        return {
            "status": self.status, "for_llm": self.for_llm, "for_user": self.for_user, "is_error": self.is_error,
            "invocation_id": self.invocation_id, "duration_ms": round(self.duration_ms, 3), **self.extra,
        }


@dataclass
class ApprovalVerdict:
    """The approval step's answer: allow, deny (with the reason the model sees) or pending (a person decides)."""

    decision: str  # "allow" | "deny" | "pending"
    reason: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
