"""The MCP endpoint's state in PostgreSQL: client sessions (any process serves any session), calls awaiting
resumption after an approval (their exact arguments sealed) and tasks (calls waiting for a person, answered as MCP
tasks: `mcp_app.server.tasks`). Every function here is synchronous ORM code; the ASGI side calls it through
`mcp_app.server.handlers.in_thread`."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Greatest
from django.utils import timezone

from goclaw import crypto
from goclaw.db import pg_json, pg_text
from goclaw.errors import Conflict, Gone, NotFound
from goclaw.generations import generation_bump, generation_cache
from mcp_app.models import MCPApprovalResume, MCPServerSession, MCPTask, MCPTaskStatus
from tools_app.choices import ApprovalStatus
from tools_app.models import Agent, AgentToken, ApprovalRequest
from tools_app.services.agents import token_authenticate_cached
from tools_app.services.approvals.requests import approval_cancel, approval_timeout

RESUMES_CACHE = "mcp_server_resumes"  # generation bumped when calls awaiting resumption appear or go
SESSIONS_CACHE = "mcp_server_sessions"  # generation bumped when sessions end (processes drop the rows they keep)
TOUCH_SECONDS = 30  # `last_seen_at` is written at most this often per session (one UPDATE, not one per request)
SESSION_ID_MAX = 64


@dataclass
class Caller:
    """Who sent one HTTP request to `/mcp`: the token (its agent loaded), the session row it names (None for a
    request that opens one), and the context its `X-Goclaw-*` headers carry."""

    token: AgentToken
    session: MCPServerSession | None
    header_context: dict[str, Any]
    catalog_changed: bool = False  # a tools/call whose session must first be told its catalog changed (claimed)
    # a stateless tools/call: its tools' input schemas that bind arguments to `Mcp-Param-*` headers, by tool name
    header_bound_schemas: dict[str, Any] = field(default_factory=dict)

    @property
    def agent(self) -> Agent:
        return self.token.agent


class _Unknown(Exception):
    """No such session row (never cached: it may be created by another process any moment)."""


def _session_load(session_id: str) -> MCPServerSession:
    row = MCPServerSession.objects.filter(session_id=session_id).first()
    if row is None:
        raise _Unknown
    return row


def request_authorize(*, raw_token: str | None, session_id: str | None) -> tuple[AgentToken | None, MCPServerSession | None]:
    """The active token for `raw_token` (None: refuse with 401) and, when a session id is named, that session if it
    exists and belongs to the token's agent (None: answer 404, as if unknown). The token is checked on every
    request from the per-process token cache the REST API uses (`token_authenticate_cached`: a revocation is seen
    at once here and within a second by every other process); session rows are kept per process until a session
    ends anywhere (SESSIONS_CACHE), so a request usually costs no query."""
    token = token_authenticate_cached(raw_token) if raw_token else None
    if token is None or session_id is None:
        return token, None
    if not 0 < len(session_id) <= SESSION_ID_MAX or not session_id.isascii():
        return token, None
    try:
        row = generation_cache(SESSIONS_CACHE).get(session_id, lambda: _session_load(session_id))
    except _Unknown:
        return token, None
    if row.agent_id != token.agent_id:
        return token, None
    now = timezone.now()
    if (now - row.last_seen_at).total_seconds() > TOUCH_SECONDS:
        row.last_seen_at = now
        MCPServerSession.objects.filter(pk=row.pk).update(last_seen_at=now)
    return token, row


@transaction.atomic
def session_open(*, session_id: str, token: AgentToken, context: dict, protocol_version: str,
                 client_info: Any, capabilities: Any = None) -> MCPServerSession:
    """Record the session an initialize request opened, for the agent whose token opened it, with the extensions
    its client declared (any process serving the session knows them: a revived connection has no handshake)."""
    now = timezone.now()
    return MCPServerSession.objects.create(
        session_id=session_id, agent_id=token.agent_id, token=token, context=pg_json(context),
        protocol_version=protocol_version[:32], client_info=_client_info(client_info),
        extensions=declared_extensions(capabilities), last_seen_at=now)


EXTENSIONS_MAX, EXTENSION_ID_MAX = 16, 128


def declared_extensions(capabilities: Any) -> list[str]:
    """The extension identifiers a client's capabilities (`{"extensions": {id: settings}}`) declare: a few short
    strings, whatever the client sent."""
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    if not isinstance(extensions, dict):
        return []
    return [key for key in extensions if isinstance(key, str) and 0 < len(key) <= EXTENSION_ID_MAX
            and key.isascii() and key.isprintable()][:EXTENSIONS_MAX]


def _client_info(raw: Any) -> dict[str, str]:
    """What the client says it is, for people reading sessions: a few short strings, never a client-sized blob
    (initialize bodies may be megabytes, and every agent may open many sessions)."""
    fields = raw if isinstance(raw, dict) else {}
    return {name: pg_text(fields[name])[:200] for name in ("name", "title", "version") if isinstance(fields.get(name), str)}


@transaction.atomic
def session_end(*, session_id: str, agent: Agent) -> bool:
    """End a session (the client's DELETE): no process serves it again (others within a generation check)."""
    ended = bool(MCPServerSession.objects.filter(session_id=session_id, agent=agent).delete()[0])
    generation_cache(SESSIONS_CACHE).clear()  # this process at once, whatever the outcome
    if ended:
        generation_bump(SESSIONS_CACHE)
    return ended


def session_listed(*, session: MCPServerSession, fingerprint: str) -> None:
    """The session has just listed this catalog: it is what it knows, nothing to notify about."""
    if session.catalog_fingerprint != fingerprint or session.notified_fingerprint != fingerprint:
        MCPServerSession.objects.filter(pk=session.pk).update(catalog_fingerprint=fingerprint, notified_fingerprint=fingerprint)
        session.catalog_fingerprint = session.notified_fingerprint = fingerprint


def session_claim_notification(*, session_id: str, fingerprint: str) -> bool:
    """True for exactly one caller (any process) per catalog change of a session: that one sends
    `notifications/tools/list_changed`. A session that never listed is not told (it has nothing stale)."""
    return bool(MCPServerSession.objects.filter(session_id=session_id).exclude(catalog_fingerprint="")
                .exclude(catalog_fingerprint=fingerprint).exclude(notified_fingerprint=fingerprint)
                .update(notified_fingerprint=fingerprint))


def sessions_for_watch(session_ids: list[str]) -> list[MCPServerSession]:
    """The listed sessions among these (the ones a catalog change can make stale), with their agents."""
    return list(MCPServerSession.objects.select_related("agent").filter(session_id__in=session_ids)
                .exclude(catalog_fingerprint=""))


@transaction.atomic
def sessions_purge_idle() -> int:
    """Forget sessions idle longer than GOCLAW_MCP_SESSION_IDLE_SECONDS, erase resumable calls whose approval
    can no longer run (decided against, expired, used), and purge tasks (`tasks_purge`). The django-q2 schedule
    runs this."""
    cutoff = timezone.now() - timedelta(seconds=settings.MCP_SESSION_IDLE_SECONDS)
    sessions, _ = MCPServerSession.objects.filter(last_seen_at__lt=cutoff).delete()
    if sessions:
        generation_bump(SESSIONS_CACHE)
    runnable = Q(approval__status=ApprovalStatus.PENDING) | Q(approval__status=ApprovalStatus.APPROVED,
                                                               approval__consumed_at__isnull=True)
    resumes, _ = MCPApprovalResume.objects.exclude(runnable).delete()
    if resumes:
        generation_bump(RESUMES_CACHE)
    return sessions + resumes + tasks_purge()


# --- calls awaiting resumption -------------------------------------------------------------------------------
def resume_seal_context(approval_id, agent_id) -> str:
    """Associated data of a resumable call's sealed arguments: they open only for this approval and agent."""
    return f"mcp_app.approvalresume.arguments:{approval_id}:{agent_id}"


@transaction.atomic
def resume_store(*, approval_id, agent: Agent, arguments: Any) -> MCPApprovalResume:
    """Keep the exact arguments of a call still waiting for a person, sealed, until the agent resumes it."""
    sealed = crypto.encrypt_json(arguments, associated_data=resume_seal_context(approval_id, agent.pk))
    row, _ = MCPApprovalResume.objects.update_or_create(approval_id=approval_id, agent=agent,
                                                        defaults={"sealed_arguments": sealed})
    generation_bump(RESUMES_CACHE)  # the agent's catalog now lists the resumption tools
    return row


def resume_open(*, approval_id, agent: Agent) -> tuple[ApprovalRequest, Any]:
    """The approval and the exact arguments of this agent's call awaiting resumption (NotFound for another
    agent's approval, an unknown id or one already resumed)."""
    row = MCPApprovalResume.objects.select_related("approval").filter(approval_id=approval_id, agent=agent).first()
    if row is None:
        raise NotFound("no call of yours awaits resumption with this approval id", code="approval_not_found")
    try:
        arguments = crypto.decrypt_json(row.sealed_arguments, associated_data=resume_seal_context(row.approval_id, agent.pk))
    except crypto.DecryptionError:
        raise Gone("the held call could not be opened (the encryption key changed?); ask again", code="approval_unreadable") from None
    return row.approval, arguments


@transaction.atomic
def resume_erase(*, approval_id) -> None:
    """The call ran (or can no longer run): its sealed arguments go."""
    if MCPApprovalResume.objects.filter(approval_id=approval_id).delete()[0]:
        generation_bump(RESUMES_CACHE)


def resume_waiting(agent: Agent) -> bool:
    """Whether this agent has calls awaiting resumption over MCP (then the two helper tools are listed)."""
    return MCPApprovalResume.objects.filter(agent=agent).exists()


# --- tasks (the io.modelcontextprotocol/tasks extension: mcp_app.server.tasks) -------------------------------
TASK_RUN_STALE_SECONDS = 2 * 3600  # `running` this long: its process stopped mid-run, the outcome is unknown
WORKING, RUNNING = MCPTaskStatus.WORKING, MCPTaskStatus.RUNNING


def task_retention() -> timedelta:
    """How long a task is kept once it can no longer change (GOCLAW_MCP_TASK_TTL_SECONDS, 1 h by default)."""
    return timedelta(seconds=settings.MCP_TASK_TTL_SECONDS)


def task_seal_context(task_id, agent_id, what: str) -> str:
    """Associated data of a task's sealed `arguments` or `result`: they open only for this task and agent."""
    return f"mcp_app.mcptask.{what}:{task_id}:{agent_id}"


@transaction.atomic
def task_create(*, agent: Agent, approval_id, arguments: Any) -> MCPTask:
    """The task of this agent's call that waits for a person (approval `approval_id`), its exact arguments sealed.
    Kept while the approval can be decided and then run, and the retention after that."""
    approval = ApprovalRequest.objects.get(pk=approval_id, agent=agent)
    task_id, now = uuid.uuid4(), timezone.now()
    sealed = crypto.encrypt_json(arguments, associated_data=task_seal_context(task_id, agent.pk, "arguments"))
    keep = approval.expires_at + approval_timeout(agent.other_config or {}) + task_retention()
    return MCPTask.objects.create(id=task_id, agent=agent, approval=approval, tool_name=approval.tool_name,
                                  sealed_arguments=sealed, created_at=now, updated_at=now, expires_at=keep)


def task_get(*, task_id, agent: Agent) -> MCPTask | None:
    """This agent's task with its approval (None: unknown, another agent's, or expired)."""
    return (MCPTask.objects.select_related("approval")
            .filter(pk=task_id, agent=agent, expires_at__gt=timezone.now()).first())


def task_claim(*, task: MCPTask) -> bool:
    """working → running, true for exactly one caller in any process: that one runs the approved call."""
    return bool(MCPTask.objects.filter(pk=task.pk, status=WORKING).update(status=RUNNING, updated_at=timezone.now()))


def task_arguments(task: MCPTask) -> Any:
    """The exact arguments of a task's call (crypto.DecryptionError: the key changed, or they were erased)."""
    return crypto.decrypt_json(task.sealed_arguments,
                               associated_data=task_seal_context(task.pk, task.agent_id, "arguments"))


def task_result(task: MCPTask) -> dict:
    """A completed task's tools/call result (crypto.DecryptionError: the key changed)."""
    return crypto.decrypt_json(task.sealed_result, associated_data=task_seal_context(task.pk, task.agent_id, "result"))


def task_finish(*, task: MCPTask, expected: str, status: str, result: dict | None = None, error: dict | None = None,
                message: str = "") -> bool:
    """The task moves from `expected` to the final `status` (conditionally: one finisher wins): its arguments are
    erased, its result sealed, and it is kept for the retention from now."""
    now = timezone.now()
    sealed = "" if result is None else crypto.encrypt_json(
        result, associated_data=task_seal_context(task.pk, task.agent_id, "result"))
    return bool(MCPTask.objects.filter(pk=task.pk, status=expected).update(
        status=status, status_message=pg_text(message)[:500], sealed_arguments="", sealed_result=sealed,
        error=pg_json(error), updated_at=now, expires_at=Greatest(F("expires_at"), now + task_retention())))


@transaction.atomic
def task_cancel(*, task_id, agent: Agent) -> bool:
    """The client cancels this agent's task (False: no such task). One still waiting for its person is cancelled
    with its approval, so the call can never run; one running or finished stays as it is (cancel is idempotent)."""
    task = task_get(task_id=task_id, agent=agent)
    if task is None:
        return False
    if task_finish(task=task, expected=WORKING, status=MCPTaskStatus.CANCELLED, message="cancelled by the client"):
        try:
            approval_cancel(approval_id=task.approval_id, agent=agent)
        except (Conflict, NotFound):
            pass  # decided meanwhile: the claim that runs a task needs `working`, so this one never runs
    return True


@transaction.atomic
def tasks_purge() -> int:
    """Fail tasks whose process stopped mid-run (after TASK_RUN_STALE_SECONDS; whether the call ran is in the
    audit log) and forget expired tasks."""
    from mcp_types import INTERNAL_ERROR  # the SDK's types load where they are used (~0.4 s), not with the app

    now = timezone.now()
    MCPTask.objects.filter(status=RUNNING, updated_at__lt=now - timedelta(seconds=TASK_RUN_STALE_SECONDS)).update(
        status=MCPTaskStatus.FAILED, sealed_arguments="", updated_at=now, expires_at=now + task_retention(),
        status_message="the server running this call stopped before it finished",
        error={"code": INTERNAL_ERROR, "message": "the server running this call stopped before it finished; whether "
                                                  "it ran is in goclaw's audit log"})
    purged, _ = MCPTask.objects.filter(expires_at__lte=now).exclude(status=RUNNING).delete()
    return purged
