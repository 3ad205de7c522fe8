"""The MCP endpoint's state in PostgreSQL: client sessions (any process serves any session) and calls awaiting
resumption after an approval (their exact arguments sealed). Every function here is synchronous ORM code; the
ASGI side calls it through `mcp_app.server.handlers.in_thread`."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from goclaw import crypto
from goclaw.db import pg_json, pg_text
from goclaw.errors import Gone, NotFound
from goclaw.generations import generation_bump, generation_cache
from mcp_app.models import MCPApprovalResume, MCPServerSession
from tools_app.choices import ApprovalStatus
from tools_app.models import Agent, AgentToken, ApprovalRequest
from tools_app.services.agents import token_authenticate

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
    request, so a revoked token is refused mid-session at once; session rows are kept per process until a session
    ends anywhere (SESSIONS_CACHE), so a request costs one query."""
    token = token_authenticate(raw_token) if raw_token else None
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
                 client_info: Any) -> MCPServerSession:
    """Record the session an initialize request opened, for the agent whose token opened it."""
    now = timezone.now()
    return MCPServerSession.objects.create(
        session_id=session_id, agent_id=token.agent_id, token=token, context=pg_json(context),
        protocol_version=protocol_version[:32], client_info=_client_info(client_info), last_seen_at=now)


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
    """Forget sessions idle longer than GOCLAW_MCP_SESSION_IDLE_SECONDS, and erase resumable calls whose approval
    can no longer run (decided against, expired, used). The django-q2 schedule runs this."""
    cutoff = timezone.now() - timedelta(seconds=settings.MCP_SESSION_IDLE_SECONDS)
    sessions, _ = MCPServerSession.objects.filter(last_seen_at__lt=cutoff).delete()
    if sessions:
        generation_bump(SESSIONS_CACHE)
    runnable = Q(approval__status=ApprovalStatus.PENDING) | Q(approval__status=ApprovalStatus.APPROVED,
                                                               approval__consumed_at__isnull=True)
    resumes, _ = MCPApprovalResume.objects.exclude(runnable).delete()
    if resumes:
        generation_bump(RESUMES_CACHE)
    return sessions + resumes


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
