"""Writes to sessions and their messages: create, post a message, park, resume, end, cancel, lease. Every state change
is a conditional UPDATE or runs under the session's row lock, so the API, the tools and any number of runner
processes can act on one session at once; events go out after commit (docs/runtime.md)."""
from __future__ import annotations

import functools
import json
import logging
import os
import socket
import threading
import uuid
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, Callable, Iterable, Iterator

from django.db import IntegrityError, transaction
from django.db.models import Max, Q
from django.utils import timezone

from goclaw import events
from goclaw.errors import ApplicationError, Conflict, ValidationError
from runtime_app.choices import ACTIVE_STATUSES, ENDED_STATUSES, MessageRole, SessionOrigin, SessionStatus
from runtime_app.models import Session, SessionMessage
from tools_app.choices import ApprovalStatus
from tools_app.labels import echo
from tools_app.models import Agent
from tools_app.security.scrub import default_scrubber
from tools_app.services.approvals import approval_cancel

logger = logging.getLogger("goclaw.runtime")

MESSAGE_MAX_CHARS = 100_000
ERROR_MAX_CHARS = 2000
EVENT_TEXT_CHARS = 4000
LEASE_SECONDS = 30
DEFAULT_MAX_ITERATIONS = 20
S = SessionStatus


# --- events ----------------------------------------------------------------------------------------------------------
def session_groups(session: Session, agent_key: str | None = None) -> list[str]:
    """Where a session's events go: its agent's group (the agent's own sockets and staff), every-session and
    this-session groups for the console."""
    return [events.agent_group(agent_key or session.agent.key), "sessions", f"session.{session.pk}"]


def session_as_dict(session: Session) -> dict[str, Any]:
    return {"id": str(session.pk), "key": session.key, "agent": session.agent.key, "status": session.status,
            "end_reason": session.end_reason, "user_id": session.user_id, "channel": session.channel,
            "chat_id": session.chat_id, "parent": str(session.parent_id) if session.parent_id else None,
            "depth": session.depth, "origin": session.origin, "ref": session.ref, "label": session.label, "iterations": session.iterations,
            "max_iterations": session.max_iterations, "tokens_in": session.tokens_in, "tokens_out": session.tokens_out,
            "waiting_approval": str(session.waiting_approval_id) if session.waiting_approval_id else None,
            "error": session.error, "created_at": session.created_at, "updated_at": session.updated_at,
            "ended_at": session.ended_at}


def message_as_dict(message: SessionMessage, *, cut: int | None = None) -> dict[str, Any]:
    """A message as people and the API see it. Tool calls' arguments are kept as the model sent them (an approved
    call runs with exactly those), so they are scrubbed here, on the way out."""
    content = message.content if cut is None or len(message.content) <= cut else message.content[:cut] + "…"
    calls = [{**c, "arguments": default_scrubber.scrub(c["arguments"])[0]} for c in message.tool_calls]
    return {"session": str(message.session_id), "seq": message.seq, "role": message.role, "content": content,
            "tool_calls": calls, "tool_call_id": message.tool_call_id, "tool_name": message.tool_name,
            "verdict": message.verdict, "is_error": message.is_error,
            "invocation_id": str(message.invocation_id) if message.invocation_id else None,
            "approval_id": str(message.approval_id) if message.approval_id else None,
            "child": str(message.child_id) if message.child_id else None,
            "tokens_in": message.tokens_in, "tokens_out": message.tokens_out, "created_at": message.created_at}


def publish_status(session: Session) -> None:
    events.publish("session.status", session_as_dict(session), session_groups(session))


def publish_message(session: Session, message: SessionMessage) -> None:
    body = message_as_dict(message, cut=EVENT_TEXT_CHARS)
    events.publish("session.message", body, session_groups(session))
    if message.role == MessageRole.TOOL:
        events.publish("session.tool_call", {k: body[k] for k in (
            "session", "seq", "tool_call_id", "tool_name", "verdict", "is_error", "invocation_id", "approval_id")},
            session_groups(session))


# --- creating and messaging ---------------------------------------------------------------------------------------
def _new_key(agent: Agent, channel: str, chat_id: str, parent: Session | None) -> str:
    suffix = uuid.uuid4().hex[:12]
    if parent is not None:
        return f"{parent.key[:200]}:sub:{suffix}"
    return f"agent:{agent.key}:{channel or 'api'}:{(chat_id or '-')[:120]}:{suffix}"


def _clean(value: Any, name: str, limit: int) -> str:
    if value is None:
        return ""
    if not isinstance(value, str) or "\x00" in value or len(value) > limit:
        raise ValidationError(f"{name} must be a string of at most {limit} characters", code="invalid_" + name)
    return value


def _content(content: Any) -> str:
    if not isinstance(content, str) or not content.strip():
        raise ValidationError("content must be a non-empty string", code="invalid_content")
    if len(content) > MESSAGE_MAX_CHARS or "\x00" in content:
        raise ValidationError(f"content must be at most {MESSAGE_MAX_CHARS} characters (no NUL)", code="invalid_content")
    return content


def agent_max_iterations(agent: Agent) -> int:
    """Model turns per run: the agent's `max_iterations` (1-200), else 20."""
    value = (agent.other_config or {}).get("max_iterations", DEFAULT_MAX_ITERATIONS)
    return value if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 200 \
        else DEFAULT_MAX_ITERATIONS


@transaction.atomic
def session_create(*, agent: Agent, created_by: str, user_id: Any = "", channel: Any = "", chat_id: Any = "",
                   message: Any = None, parent: Session | None = None, label: str = "", task: str = "",
                   sync: bool = False, max_iterations: int | None = None, lease_owner: str = "",
                   origin: str = SessionOrigin.DIRECT, skip_gates: bool = False, ref: str = "") -> Session:
    """A new session of `agent` (a subagent's when `parent` is given). With a first message it starts running;
    with `lease_owner` it is born leased to that run (a synchronous subagent its parent drives: no runner takes it)."""
    if not agent.enabled:
        raise Conflict(f"agent {agent.key} is disabled", code="agent_disabled")
    user_id, channel = _clean(user_id, "user_id", 255), _clean(channel, "channel", 64)
    chat_id = _clean(chat_id, "chat_id", 255)
    first = _content(message) if message is not None else None
    session = Session.objects.create(
        key=_new_key(agent, channel, chat_id, parent), agent=agent, user_id=user_id, channel=channel, chat_id=chat_id,
        parent=parent, depth=parent.depth + 1 if parent and origin == SessionOrigin.SUBAGENT else 0, label=label,
        task=task, sync=sync, origin=origin, skip_gates=skip_gates or bool(parent and parent.skip_gates), ref=ref,
        status=S.RUNNING if first is not None else S.COMPLETED, created_by=created_by,
        max_iterations=max_iterations or agent_max_iterations(agent), lease_owner=lease_owner,
        lease_until=timezone.now() + timedelta(seconds=LEASE_SECONDS) if lease_owner else None)
    if first is not None:
        message_append(session, role=MessageRole.USER, content=first)
    publish_status(session)
    return session


def _scrubbed(content: str) -> str:
    return default_scrubber.scrub(content)[0] if content else content


def message_append(session: Session, *, role: str, content: str = "", seq: int | None = None,
                   **fields: Any) -> SessionMessage:
    """Append one message (the caller holds the session's row lock, or owns its lease; `seq` when it knows the next
    one). Its text is scrubbed of credentials first: a session's messages are shown to people and sent to a provider
    again on every turn."""
    content = _scrubbed(content)
    if seq is None:
        seq = (SessionMessage.objects.filter(session=session).aggregate(m=Max("seq"))["m"] or 0) + 1
    message = SessionMessage.objects.create(session=session, seq=seq, role=role, content=content, **fields)
    publish_message(session, message)
    return message


def _locked(session_id) -> Session:
    session = Session.objects.select_for_update(of=("self",)).select_related("agent").filter(pk=session_id).first()
    if session is None:
        raise Conflict("the session no longer exists", code="session_not_found")
    return session


@transaction.atomic
def session_message_post(*, session: Session, content: Any) -> SessionMessage:
    """A person's (or channel's) message. A running or parked session reads it on its next turn; an ended one starts
    a new run (iterations counted afresh)."""
    content = _content(content)
    session = _locked(session.pk)
    if session.status in (S.ARCHIVED,):
        raise Conflict("this session is archived", code="session_archived")
    message = message_append(session, role=MessageRole.USER, content=content)
    if session.status not in ACTIVE_STATUSES:
        session.status, session.iterations, session.end_reason, session.error = S.RUNNING, 0, "", ""
        session.retries, session.ended_at = 0, None
        session.save(update_fields=["status", "iterations", "end_reason", "error", "retries", "ended_at", "updated_at"])
        publish_status(session)
    return message


# --- leases: which runner works on a session --------------------------------------------------------------------------
RUNNABLE = Q(status=S.RUNNING) | Q(status=S.WAITING_APPROVAL, waiting_approval__isnull=True) | Q(
    status=S.WAITING_APPROVAL, waiting_approval__status__in=[ApprovalStatus.APPROVED, ApprovalStatus.DENIED,
                                                             ApprovalStatus.EXPIRED, ApprovalStatus.CANCELLED])


def session_claim(*, owner: str, limit: int) -> list[Any]:
    """Lease up to `limit` runnable sessions nobody holds (running, or parked on an approval that was decided):
    SKIP LOCKED, so concurrent runners never take the same one."""
    now = timezone.now()
    with transaction.atomic():
        ids = list(Session.objects.filter(RUNNABLE).filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
                   .order_by("updated_at").select_for_update(skip_locked=True, of=("self",))
                   .values_list("id", flat=True)[:limit])
        if ids:
            Session.objects.filter(pk__in=ids).update(lease_owner=owner, lease_until=now + timedelta(seconds=LEASE_SECONDS))
    return ids


_held: dict[Any, tuple[str, threading.Event]] = {}
_held_lock = threading.Lock()
# The lease owner name of this process's runs (host, pid and a random part: a restarted process is a new owner).
PROCESS_OWNER = f"{socket.gethostname()[:60]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@contextmanager
def lease_held(session_id, owner: str, cancel: threading.Event) -> Iterator[None]:
    """Mark a lease this process holds while it works on the session outside the runner's own threads (a synchronous
    subagent): the runner's heartbeat renews it and its watch sets `cancel` when the session is cancelled."""
    with _held_lock:
        _held[session_id] = (owner, cancel)
    try:
        yield
    finally:
        with _held_lock:
            _held.pop(session_id, None)


def held_leases() -> dict[Any, tuple[str, threading.Event]]:
    with _held_lock:
        return dict(_held)


def session_leases_renew(*, owner: str, ids: Iterable[Any]) -> set[Any]:
    """Extend the leases `owner` still holds; returns the ids it no longer holds (another runner took over)."""
    ids = set(ids)
    if not ids:
        return set()
    held = set(Session.objects.filter(pk__in=ids, lease_owner=owner).values_list("pk", flat=True))
    Session.objects.filter(pk__in=held, lease_owner=owner).update(
        lease_until=timezone.now() + timedelta(seconds=LEASE_SECONDS))
    return ids - held


def session_release(*, session_id, owner: str, not_before: timedelta | None = None) -> None:
    """Give the lease back (a run ended, parked, or its runner is stopping). `not_before` keeps others off it for a
    while (a retry's backoff)."""
    until = timezone.now() + not_before if not_before else None
    Session.objects.filter(pk=session_id, lease_owner=owner).update(lease_owner="", lease_until=until)


def session_leases_release_all(*, owner: str) -> int:
    return Session.objects.filter(lease_owner=owner).update(lease_owner="", lease_until=None)


# --- what a run does to its session ------------------------------------------------------------------------------------
def _owned(session_id, owner: str) -> Session | None:
    """The session under its row lock, if `owner` still holds its lease and it is still active."""
    session = _locked(session_id)
    return session if session.lease_owner == owner and session.status in ACTIVE_STATUSES else None


# One statement per write of a run (its round trips are most of a turn's cost outside the model): take the session's
# row lock if the run still holds it (else nothing happens and no row comes back), read what arrived since the run
# last looked, and append the new message after it; what arrived and the new message come back, in order. A
# statement that waited for the lock reads with its earlier snapshot: _run_write runs the write again if it missed a message.
_RUN_APPEND = """
WITH s AS (
    UPDATE {session} SET updated_at = now(), iterations = iterations + %(turns)s,
        tokens_in = tokens_in + %(tokens_in)s, tokens_out = tokens_out + %(tokens_out)s,
        status = %(running)s, waiting_approval_id = NULL
    WHERE id = %(id)s AND lease_owner = %(owner)s AND status = ANY(%(active)s)
    RETURNING id, set_config('synchronous_commit',
                             CASE WHEN %(async_commit)s THEN 'off' ELSE current_setting('synchronous_commit') END, true)
), fresh AS (
    SELECT m.* FROM {message} m JOIN s ON m.session_id = s.id WHERE m.seq > %(after)s
), added AS (
    INSERT INTO {message} (session_id, seq, role, content, tool_calls, tool_call_id, tool_name, verdict, is_error,
                           invocation_id, approval_id, child_id, tokens_in, tokens_out, answers_seq, created_at)
    SELECT s.id, COALESCE((SELECT max(seq) FROM fresh), %(after)s) + 1, %(role)s, %(content)s, %(tool_calls)s::jsonb,
           %(tool_call_id)s, %(tool_name)s, %(verdict)s, %(is_error)s, %(invocation_id)s, %(approval_id)s, NULL,
           %(tokens_in)s, %(tokens_out)s, %(answers_seq)s, now()
    FROM s
    RETURNING *
)
SELECT * FROM fresh UNION ALL SELECT * FROM added ORDER BY seq
"""


def _run_write(write: Callable) -> Callable:
    """A run's write (its first statement is _run_append) in a transaction of its own, run again when that statement
    missed a message. The statement reads with the snapshot it started with: if it waited for the session's row lock
    while a message was being posted (session_message_post holds it), it does not see that message, and its new one
    takes the same seq, which the unique constraint refuses; the write, whole, is then run again and sees it."""
    @functools.wraps(write)
    def written(*args, **kwargs):
        for attempt in range(3):
            try:
                with transaction.atomic():
                    return write(*args, **kwargs)
            except IntegrityError as exc:
                constraint = getattr(getattr(exc.__cause__, "diag", None), "constraint_name", None)
                if attempt == 2 or constraint != "runtime_message_seq_unique":
                    raise
    return written


def _run_append(session: Session, owner: str, after_seq: int, *, role: str, content: str, turns: int = 0,
                async_commit: bool = False, **fields: Any) -> list[SessionMessage] | None:
    """A run's write (see _RUN_APPEND): the messages since `after_seq` and the new one, or None when the run lost
    the session (cancelled, or another runner took over). Text is scrubbed like every message's."""
    values = {"tool_calls": [], "tool_call_id": "", "tool_name": "", "verdict": "", "is_error": False,
              "invocation_id": None, "approval_id": None, "tokens_in": 0, "tokens_out": 0, "answers_seq": 0, **fields}
    sql = _RUN_APPEND.format(session=Session._meta.db_table, message=SessionMessage._meta.db_table)
    rows = list(SessionMessage.objects.raw(sql, {
        **values, "tool_calls": json.dumps(values["tool_calls"]), "id": session.pk, "owner": owner,
        "active": list(ACTIVE_STATUSES), "running": S.RUNNING, "after": after_seq, "turns": turns,
        "async_commit": async_commit, "role": role, "content": _scrubbed(content)}))
    if not rows:
        return None
    publish_message(session, rows[-1])
    return rows


@_run_write
def run_record_reply(*, session: Session, owner: str, after_seq: int, content: str, tool_calls: list[dict],
                     tokens_in: int, tokens_out: int) -> list[SessionMessage] | None:
    """The model's reply of one turn (it answers everything up to `after_seq`): the message, one more iteration, the
    tokens. Returns the messages that arrived since `after_seq` and the reply; None when the run lost the session
    meanwhile (nothing is written). Committed without waiting for the WAL flush: a reply lost to a database crash
    (never to an app crash) costs one model request again; tool results keep synchronous commits (a lost one would
    run the tool twice)."""
    rows = _run_append(session, owner, after_seq, role=MessageRole.ASSISTANT, content=content, turns=1,
                       async_commit=True, tool_calls=tool_calls, tokens_in=tokens_in, tokens_out=tokens_out,
                       answers_seq=after_seq)
    if rows is not None:
        session.iterations += 1
        session.tokens_in += tokens_in
        session.tokens_out += tokens_out
    return rows


@_run_write
def run_record_tool_result(*, session: Session, owner: str, after_seq: int, call: dict,
                           outcome: Any) -> list[SessionMessage] | None:
    """One tool call's result, with its verdict and audit row; a parked session runs again. Returns the messages
    that arrived since `after_seq` and the result; None when the run lost the session."""
    rows = _run_append(session, owner, after_seq, role=MessageRole.TOOL, content=outcome.for_llm,
                       tool_call_id=call["id"], tool_name=call["name"][:200], verdict=outcome.status[:30],
                       is_error=outcome.is_error, invocation_id=outcome.invocation_id or None,
                       approval_id=outcome.extra.get("approval_id") or None)
    if rows is not None and session.status == S.WAITING_APPROVAL:
        session.status, session.waiting_approval_id = S.RUNNING, None
        publish_status(session)
    return rows


@transaction.atomic
def run_park(*, session_id, owner: str, approval_id, call: dict, outcome: Any) -> bool:
    """A tool call waits for a person: the session parks on the approval request and gives its lease back; the
    decision makes it runnable again (`session_claim`)."""
    session = _owned(session_id, owner)
    if session is None:
        return False
    session.status, session.waiting_approval_id = S.WAITING_APPROVAL, approval_id
    session.lease_owner, session.lease_until = "", None
    session.save(update_fields=["status", "waiting_approval", "lease_owner", "lease_until", "updated_at"])
    events.publish("session.tool_call", {
        "session": str(session.pk), "seq": None, "tool_call_id": call["id"], "tool_name": call["name"][:200],
        "verdict": outcome.status, "is_error": False, "invocation_id": outcome.invocation_id or None,
        "approval_id": str(approval_id)}, session_groups(session))
    publish_status(session)
    return True


def session_archive(session: Session) -> None:
    """An ended session is put away (subagents, `archive_after_minutes` after they ended)."""
    if Session.objects.filter(pk=session.pk, status__in=[S.COMPLETED, S.FAILED, S.CANCELLED]).update(
            status=S.ARCHIVED, updated_at=timezone.now()):
        session.status = S.ARCHIVED
        publish_status(session)


@transaction.atomic
def run_end(*, session_id, owner: str, status: str, end_reason: str = "", error: str = "", result: str = "") -> Session | None:
    """The run is over: completed (its last reply is the result), failed (why), or stopped at the iteration limit.
    Not completed when a message or an announcement arrived after the final reply (between its write and now): the
    session stays running, its lease given back, and a runner answers it. None then, or when the run lost it."""
    session = _owned(session_id, owner)
    if session is None:
        return None
    if status == S.COMPLETED and _unanswered(session):
        Session.objects.filter(pk=session.pk).update(lease_owner="", lease_until=None, updated_at=timezone.now())
        return None
    session.status, session.end_reason = status, end_reason[:40]
    session.error = echo(error, ERROR_MAX_CHARS) if error else ""
    session.result, session.ended_at = result, timezone.now()
    session.lease_owner, session.lease_until = "", None
    session.save(update_fields=["status", "end_reason", "error", "result", "ended_at", "lease_owner", "lease_until",
                                "updated_at"])
    publish_status(session)
    _on_end(session)
    return session


def _unanswered(session: Session) -> bool:
    """Did a message or an announcement arrive after the model's last reply?"""
    replied = SessionMessage.objects.filter(session=session, role=MessageRole.ASSISTANT).aggregate(m=Max("seq"))["m"]
    return SessionMessage.objects.filter(session=session, seq__gt=replied or 0,
                                         role__in=[MessageRole.USER, MessageRole.ANNOUNCE]).exists()


@transaction.atomic
def run_retry_later(*, session_id, owner: str, error: str, delay: timedelta) -> bool:
    """A failed model request that may be tried again (a subagent's retries): count it, keep the session running,
    and keep every runner off it for `delay`."""
    session = _owned(session_id, owner)
    if session is None:
        return False
    session.retries += 1
    session.error = echo(error, ERROR_MAX_CHARS)
    session.lease_owner, session.lease_until = "", timezone.now() + delay
    session.save(update_fields=["retries", "error", "lease_owner", "lease_until", "updated_at"])
    return True


def session_cancel(*, session: Session, actor: str, reason: str = "cancelled", announce: bool = True) -> Session:
    """Stop a session: its in-flight model request and tool call are stopped by the runner (which sees the status),
    its pending approval request is withdrawn, its running subagents are cancelled too. Idempotent for an ended
    session."""
    with transaction.atomic():
        session = _locked(session.pk)
        if session.status not in ACTIVE_STATUSES:
            return session
        approval_id = session.waiting_approval_id
        session.status, session.end_reason, session.ended_at = S.CANCELLED, reason[:40], timezone.now()
        session.error = f"cancelled by {echo(actor, 200)}"
        session.save(update_fields=["status", "end_reason", "ended_at", "error", "updated_at"])
        publish_status(session)
        if not announce:
            Session.objects.filter(pk=session.pk).update(announced=True)
            session.announced = True
        _on_end(session)
        children = list(Session.objects.filter(parent=session, status__in=ACTIVE_STATUSES).select_related("agent"))
    if approval_id:
        try:
            approval_cancel(approval_id=approval_id, agent=None)
        except ApplicationError:  # already decided or gone: nothing to withdraw
            pass
    for child in children:
        session_cancel(session=child, actor=actor, reason="parent_cancelled", announce=False)
    return session


@transaction.atomic
def session_announce_if_ended(session_id) -> None:
    """Announce an ended subagent to its parent unless that was done (a synchronous child handed to the runners that
    ended before it was marked asynchronous)."""
    session = _locked(session_id)
    if session.status in ENDED_STATUSES:
        _announce(session)


# --- subagents' results reach their parent --------------------------------------------------------------------------
ANNOUNCE_MAX_CHARS = 8000


def announce_heading(session: Session) -> str:
    """How a child's result is introduced to its parent's model: a subagent by label and id, a team member's with
    the `teammate:` prefix the design documents route teammates' results with, another agent's by its key."""
    if session.origin == SessionOrigin.TEAM:
        return f"teammate: {session.agent.key} ({session.status})"
    if session.origin == SessionOrigin.SUBAGENT:
        name = f"{session.label} ({session.pk})" if session.label else str(session.pk)
        return f"[Subagent {name} {session.status}]"
    return f"[{session.origin.capitalize()} result from {session.agent.key} ({session.status})]"


_end_handlers: dict[str, list[Callable[[Any], None]]] = {}


def session_end_subscribe(origin: str, handler: Callable[[Any], None]) -> None:
    """Call `handler(session_id)` after the commit that ends (completes, fails, cancels) a session of `origin`: a
    delegation's session answers its delegation, a team member's reports to its lead (runtime_app's own modules
    subscribe from AppConfig.ready())."""
    handlers = _end_handlers.setdefault(origin, [])
    if handler not in handlers:
        handlers.append(handler)


def _on_end(session: Session) -> None:
    for handler in _end_handlers.get(session.origin, ()):
        transaction.on_commit(lambda handler=handler: _call_end_handler(handler, session.pk))
    _announce(session)


def _call_end_handler(handler: Callable[[Any], None], session_id: Any) -> None:
    try:
        handler(session_id)
    except Exception:
        logger.exception("session %s: end handler %s failed", session_id, getattr(handler, "__qualname__", handler))


def _announce(session: Session) -> None:
    """A child that ended tells its parent (unless the parent waited for it synchronously, or it was steered or
    cancelled with its parent, or its origin announces by itself): an `announce` message on the parent, which then
    runs again to read it. Several announcements that arrive before the parent's next turn reach the model as one
    message."""
    if session.parent_id is None or session.sync or session.announced:
        return
    if not Session.objects.filter(pk=session.pk, announced=False).update(announced=True):
        return
    body = session.result if session.status == S.COMPLETED else (session.error or session.end_reason)
    session_announce(parent_id=session.parent_id, heading=announce_heading(session), body=body, child=session)


def session_announce(*, parent_id, heading: str, body: str, child: Session | None = None) -> SessionMessage | None:
    """Tell a session something another run finished (a child's result, a delegation's outcome): an `announce`
    message under `heading`, and the session runs again to read it. A cancelled or archived session is left alone.
    The caller's transaction holds the parent's row lock from here."""
    parent = _locked(parent_id)
    if parent.status in (S.ARCHIVED, S.CANCELLED):
        return None
    if len(body) > ANNOUNCE_MAX_CHARS:
        body = body[:ANNOUNCE_MAX_CHARS] + "\n[... cut]"
    message = message_append(parent, role=MessageRole.ANNOUNCE, content=f"{heading}\n{body}", child=child)
    if parent.status not in ACTIVE_STATUSES:
        parent.status, parent.iterations, parent.end_reason, parent.error, parent.ended_at = S.RUNNING, 0, "", "", None
        parent.save(update_fields=["status", "iterations", "end_reason", "error", "ended_at", "updated_at"])
        publish_status(parent)
    return message
