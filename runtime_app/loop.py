"""The agent loop: advance one leased session until it completes, fails, parks on an approval, is cancelled or the
runner lets it go. An orchestrator: model requests and tool calls run outside any transaction; each step's result
is written by a short service that first checks the run still owns the session. Everything the loop needs is read
back from the session's messages, so a run resumes anywhere, after anything (docs/runtime.md).

Every tool call goes through `tools_app.pipeline.execute` exactly like an external agent's: policy, hooks, rate
limit, approval, sandbox, scrubbing, output budget, audit row, event."""
from __future__ import annotations

import json
import logging
import random
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Iterator

from django.db import connection

from goclaw.errors import ApplicationError
from runtime_app import providers
from runtime_app.choices import ACTIVE_STATUSES, MessageRole, SessionStatus
from runtime_app.limits import spawn_limits
from runtime_app.models import LLMProvider, Session, SessionMessage
from runtime_app.prompt import system_prompt
from runtime_app.selectors import llm_provider_of
from runtime_app.providers.base import ChatMessage, ChatRequest, ProviderError, ToolCallRequest, ToolSpec
from runtime_app.services import sessions as svc
from runtime_app.services.providers import provider_config
from tools_app import pipeline
from tools_app.calls import CallContext, Outcome, ToolCall
from tools_app.choices import ApprovalStatus
from tools_app.execution import approval_execute, approval_refused_outcome
from tools_app.models import ApprovalRequest
from tools_app.policy import catalog_for
from tools_app.toolsets import toolset_for

logger = logging.getLogger("goclaw.runtime")

S = SessionStatus
ARGUMENTS_MAX_CHARS = 200_000
REPLY_MAX_CHARS = 1_000_000
SLOT_WAIT_SECONDS = 0.02
# Advisory-lock keys of provider request slots: one 64-bit key per (provider, slot), in a namespace of their own.
_SLOT_NAMESPACE = 0x4C4C4D << 40


@dataclass
class RunControl:
    """What a runner hands a run: its lease owner name, and the event that stops it (the session was cancelled, the
    lease was lost, or the runner is stopping)."""

    owner: str
    cancel: threading.Event = field(default_factory=threading.Event)


# --- reading the conversation back ------------------------------------------------------------------------------
def _messages(session: Session) -> list[SessionMessage]:
    return list(SessionMessage.objects.filter(session=session).order_by("seq"))


def pending_tool_calls(messages: list[SessionMessage]) -> list[dict]:
    """The tool calls of the model's last reply that have no result yet, in order."""
    last = next((m for m in reversed(messages) if m.role == MessageRole.ASSISTANT), None)
    if last is None or not last.tool_calls:
        return []
    answered = {m.tool_call_id for m in messages if m.role == MessageRole.TOOL and m.seq > last.seq}
    return [c for c in last.tool_calls if c["id"] not in answered]


def needs_model_turn(messages: list[SessionMessage]) -> bool:
    """Something the model has not answered: a message, tool results or a subagent's result after its last reply,
    or one that arrived while that reply was being written (after the last message the model had seen)."""
    if not messages:
        return False
    last = messages[-1]
    if last.role != MessageRole.ASSISTANT or last.tool_calls:
        return True
    return any(m.seq > last.answers_seq and m.role in (MessageRole.USER, MessageRole.ANNOUNCE) for m in messages[:-1])


def conversation(messages: list[SessionMessage]) -> tuple[ChatMessage, ...]:
    """The session as the provider sees it: each reply's tool results right after it; a message that arrived while a
    reply was being written after that reply (the model had not seen it); consecutive subagent announcements batched
    into one message."""
    results: dict[tuple[int, str], SessionMessage] = {}  # (the reply's seq, call id): ids repeat across replies
    reply_seq = 0
    for m in messages:
        if m.role == MessageRole.ASSISTANT:
            reply_seq = m.seq
        elif m.role == MessageRole.TOOL:
            results[(reply_seq, m.tool_call_id)] = m
    out: list[ChatMessage] = []
    announced: list[str] = []
    held: list[SessionMessage] = []

    def flush() -> None:
        if announced:
            out.append(ChatMessage(role="user", content="\n\n".join(announced)))
            announced.clear()

    def said(m: SessionMessage) -> None:
        if m.role == MessageRole.ANNOUNCE:
            announced.append(m.content)
            return
        flush()
        out.append(ChatMessage(role="user", content=m.content))

    replies = [m for m in messages if m.role == MessageRole.ASSISTANT]
    for m in messages:
        if m.role in (MessageRole.USER, MessageRole.ANNOUNCE):
            reply = next((r for r in replies if r.seq > m.seq), None)
            (held.append if reply is not None and 0 < reply.answers_seq < m.seq else said)(m)
        elif m.role == MessageRole.ASSISTANT:
            flush()
            calls = tuple(ToolCallRequest(c["id"], c["name"], c["arguments"]) for c in m.tool_calls)
            out.append(ChatMessage(role="assistant", content=m.content, tool_calls=calls))
            for c in m.tool_calls:
                r = results.get((m.seq, c["id"]))
                out.append(ChatMessage(role="tool", tool_call_id=c["id"], name=c["name"], is_error=r.is_error if r else True,
                                       content=r.content if r else "(no result: the call was interrupted)"))
            for late in held:
                said(late)
            held.clear()
    flush()
    return tuple(out)


# --- the provider side -------------------------------------------------------------------------------------------
def _provider_for(session: Session) -> LLMProvider:
    provider = llm_provider_of(session.agent)
    if provider is None:
        raise ProviderError("no_provider", f"agent {session.agent.key} has no enabled LLM provider named "
                                           f"{session.agent.provider!r}")
    return provider


def tool_specs(session: Session) -> tuple[ToolSpec, ...]:
    """The agent's catalog for this session's call context (the policy engine decides), as tool definitions."""
    tools = toolset_for(session.agent, session.user_id)
    names = catalog_for(session.agent, call_context(session), tools)
    return tuple(ToolSpec(d["name"], d["description"] or d["name"], d["parameters"] or {"type": "object"})
                 for d in tools.definitions(names))


def call_context(session: Session) -> CallContext:
    return CallContext(user_id=session.user_id, session_key=session.key, channel=session.channel,
                       chat_id=session.chat_id, subagent_depth=session.depth)


@contextmanager
def provider_slot(provider: LLMProvider, cancel: threading.Event) -> Iterator[None]:
    """One of the provider's `max_concurrent` request slots, across every runner process: a session-level advisory
    lock on this thread's connection (released at once after the request, and by PostgreSQL if the process dies).
    Each try starts at a random slot, so a busy provider costs a few tries, not one per busy slot."""
    size = min(provider.max_concurrent, 4095)
    held = None
    with connection.cursor() as cursor:
        while held is None:
            start = random.randrange(size)
            for offset in range(size):
                key = _SLOT_NAMESPACE | (provider.pk << 12) | ((start + offset) % size)
                cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
                if cursor.fetchone()[0]:
                    held = key
                    break
            else:
                if cancel.wait(SLOT_WAIT_SECONDS):
                    raise ProviderError("cancelled", "the run was stopped while waiting for a provider slot")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [held])


@dataclass
class RunState:
    """What one run keeps between its steps: the session row and its messages as last written or read (the write
    services hand back whatever arrived meanwhile), and what it derived from them: the provider, the system prompt
    and the tool definitions, derived again after a tool call that may have changed them (not read-only)."""

    session: Session
    messages: list[SessionMessage]
    provider: LLMProvider | None = None
    config: Any = None
    prompt: str | None = None
    specs: tuple[ToolSpec, ...] | None = None

    @property
    def last_seq(self) -> int:
        return self.messages[-1].seq if self.messages else 0

    def took(self, fresh: list[SessionMessage]) -> None:
        self.messages.extend(fresh)

    def changed(self) -> None:
        self.prompt = self.specs = None


def model_turn(state: RunState, control: RunControl) -> bool:
    """Ask the model once; record its reply (text and tool calls) and the tokens. False if the run lost the session."""
    session = state.session
    if state.provider is None:
        state.provider = _provider_for(session)
        state.config = provider_config(state.provider)
    if state.prompt is None:
        state.prompt, state.specs = system_prompt(session), tool_specs(session)
    request = ChatRequest(model=session.agent.model or state.provider.model, system=state.prompt,
                          messages=conversation(state.messages), tools=state.specs, cancel=control.cancel)
    with provider_slot(state.provider, control.cancel):
        reply = providers.chat(state.config, request)
    fresh = svc.run_record_reply(session=session, owner=control.owner, after_seq=state.last_seq,
                                 content=reply.content[:REPLY_MAX_CHARS],
                                 tool_calls=tool_calls_of(reply.tool_calls, turn=session.iterations + 1),
                                 tokens_in=reply.usage.input_tokens, tokens_out=reply.usage.output_tokens)
    if fresh is None:
        return False
    state.took(fresh)
    return True


def tool_calls_of(requests: tuple[ToolCallRequest, ...], *, turn: int) -> list[dict]:
    """The model's tool calls as stored: ids made unique within the session (a model may send none, or repeat one,
    and results are matched to calls by id), names and arguments cut to size."""
    calls, seen = [], set()
    for i, c in enumerate(requests):
        ident = c.id[:120] if c.id and c.id not in seen else ""
        ident = ident or f"call_{turn}_{i}"
        seen.add(ident)
        calls.append({"id": ident, "name": c.name[:200], "arguments": c.arguments[:ARGUMENTS_MAX_CHARS]})
    return calls


# --- the tool side -----------------------------------------------------------------------------------------------
def _arguments(raw: str) -> Any:
    """The model's arguments: a JSON object, or the raw text when it is not one (the pipeline's validation step then
    refuses the call with the problem, and the refusal is audited like any other)."""
    try:
        value = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError):
        return raw
    return value


def tool_turn(session: Session, call: dict, control: RunControl) -> Outcome:
    """Run one of the model's tool calls through the pipeline, as this session's agent and context."""
    return pipeline.execute(ToolCall(session.agent, call["name"], _arguments(call["arguments"]),
                                     context=call_context(session), cancel=control.cancel))


def resumed_turn(session: Session, call: dict, control: RunControl) -> Outcome:
    """The parked call after a person's decision: approved → it runs now, exactly once, through every step again
    (with the arguments the model sent); denied, expired or withdrawn → the model is told so."""
    req = ApprovalRequest.objects.filter(pk=session.waiting_approval_id).first()
    if req is None:
        return Outcome(status="denied", for_llm="the approval request for this call is gone; it was not run", is_error=True)
    if req.status != ApprovalStatus.APPROVED:
        return approval_refused_outcome(req)
    try:
        return approval_execute(approval_id=req.pk, agent=session.agent, arguments=_arguments(call["arguments"]))
    except ApplicationError as exc:
        return Outcome(status="denied", for_llm=f"the approved call was not run: {exc.message}", is_error=True,
                       extra={"approval_id": str(req.pk)})


# --- one run -----------------------------------------------------------------------------------------------------
def _still_ours(session_id, control: RunControl) -> Session | None:
    session = Session.objects.select_related("agent").filter(pk=session_id).first()
    if session is None or session.status not in ACTIVE_STATUSES or session.lease_owner != control.owner:
        return None
    return session


def session_advance(session_id, control: RunControl) -> str:
    """Work on a leased session until it needs nobody (completed, failed), waits for a person, or is taken away.
    Returns what happened: completed, failed, waiting_approval, retry, lost (cancelled, lease lost, runner stopping).
    The session and its messages are read once; every write checks the run still holds the session and brings back
    what arrived meanwhile, and the runner's watch stops the run within a poll of a cancel."""
    session = _still_ours(session_id, control)
    if session is None:
        return "lost"
    state = RunState(session, _messages(session))
    while True:
        if control.cancel.is_set():
            return "lost"
        pending = pending_tool_calls(state.messages)
        if pending:
            step = _tool_step(state, pending[0], control)
        elif not needs_model_turn(state.messages):
            ended = svc.run_end(session_id=session.pk, owner=control.owner, status=S.COMPLETED,
                                result=state.messages[-1].content if state.messages else "")
            return "completed" if ended is not None else "lost"  # lost: a message came in meanwhile (requeued)
        elif session.iterations >= session.max_iterations:
            svc.run_end(session_id=session.pk, owner=control.owner, status=S.FAILED, end_reason="max_iterations",
                        error=f"stopped after {session.max_iterations} model turns without a final answer "
                              "(max_iterations)")
            return "failed"
        else:
            step = _model_step(state, control)
        if step:
            return step


def _tool_step(state: RunState, call: dict, control: RunControl) -> str | None:
    session = state.session
    resuming = session.status == S.WAITING_APPROVAL
    outcome = resumed_turn(session, call, control) if resuming else tool_turn(session, call, control)
    if control.cancel.is_set() and outcome.is_error:
        return "lost"  # an interrupted call's result is not recorded: a resumed run calls it again
    approval_id = outcome.extra.get("approval_id")
    if outcome.status == "pending_approval" and approval_id:
        svc.run_park(session_id=session.pk, owner=control.owner, approval_id=approval_id, call=call, outcome=outcome)
        return "waiting_approval"
    fresh = svc.run_record_tool_result(session=session, owner=control.owner, after_seq=state.last_seq, call=call,
                                       outcome=outcome)
    if fresh is None:
        return "lost"
    state.took(fresh)
    tool = toolset_for(session.agent, session.user_id).get(call["name"])
    if tool is None or not tool.read_only:
        state.changed()  # it may have written a context file or changed what the agent may use
    return None


def _model_step(state: RunState, control: RunControl) -> str | None:
    session = state.session
    try:
        return None if model_turn(state, control) else "lost"
    except ProviderError as exc:
        if exc.code == "cancelled" or control.cancel.is_set():
            return "lost"
        logger.warning("session %s: model request failed: %s", session.pk, exc.message)
        retries = spawn_limits(session.agent).max_retries
        if session.parent_id is not None and session.retries < retries:
            svc.run_retry_later(session_id=session.pk, owner=control.owner, error=exc.message,
                                delay=timedelta(seconds=2 * (session.retries + 1)))
            return "retry"
        svc.run_end(session_id=session.pk, owner=control.owner, status=S.FAILED, end_reason=f"provider_{exc.code}"[:40],
                    error=f"the model request failed: {exc.message}")
        return "failed"
    except ApplicationError as exc:  # the provider's key does not open, …
        svc.run_end(session_id=session.pk, owner=control.owner, status=S.FAILED, end_reason=exc.code[:40],
                    error=exc.message)
        return "failed"
