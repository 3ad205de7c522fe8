"""Agents and their bearer tokens."""
from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import string
import time
from datetime import timedelta
from typing import Any, Callable

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from goclaw import events
from goclaw.errors import NotFound, ValidationError
from goclaw.generations import MISSING, GenerationCache, generation_bump
from tools_app.agent_config import AGENT_CONFIG_SCHEMA, agent_config_validate  # noqa: F401 - the services' vocabulary
from tools_app.models import Agent, AgentToken
from tools_app.policy import policy_changed
from tools_app.services.policy import actor_name

logger = logging.getLogger(__name__)
TOKEN_PREFIX = "gclw"
_PREFIX_ALPHABET = string.ascii_lowercase + string.digits
_PREFIX_CHARS = frozenset(_PREFIX_ALPHABET)
TOKENS_CACHE = "agent_tokens"  # generation bumped when a token or an agent changes or goes (see token_cache_changed)
TOKEN_CACHE_SECONDS = 5.0  # a cached authentication is read again from the database at least this often


@transaction.atomic
def agent_create(*, key: str, display_name: str = "", agent_type: str = "predefined", provider: str = "",
                 model: str = "", workspace: str = "", other_config: dict | None = None, enabled: bool = True,
                 sandbox_profile=None, actor=None) -> Agent:
    agent = Agent(key=key, display_name=display_name, agent_type=agent_type, provider=provider, model=model,
                  workspace=workspace, other_config=other_config or {}, enabled=enabled, sandbox_profile=sandbox_profile)
    return agent_save(agent=agent, actor=actor)


@transaction.atomic
def agent_update(*, agent: Agent, actor=None, **fields: Any) -> Agent:
    for name, value in fields.items():
        setattr(agent, name, value)
    return agent_save(agent=agent, actor=actor)


@transaction.atomic
def agent_save(*, agent: Agent, actor=None) -> Agent:
    """Validate and save an agent built or edited elsewhere (the admin form). Its provider, mode and config feed
    every catalog and permission, so every process drops them with the change."""
    try:
        agent.full_clean()
    except DjangoValidationError as exc:
        raise ValidationError("invalid agent", code="invalid_agent", details=exc.message_dict) from None
    agent.save()
    policy_changed()
    logger.info("%s saved agent %s", actor_name(actor), agent.key)
    return agent


@transaction.atomic
def agent_delete(*, queryset: QuerySet[Agent], actor=None) -> int:
    """Delete agents with their tokens, policies and permissions. Their open WebSockets close on the tokens'
    delete signals (tools_app.signals); every process drops the catalogs with the change."""
    count, _ = queryset.delete()
    if count:
        policy_changed()
        logger.info("%s deleted %d agent row(s) with what depends on them", actor_name(actor), count)
    return count


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@transaction.atomic
def token_issue(*, agent: Agent, name: str = "default", expires_days: int | None = None, actor=None) -> tuple[AgentToken, str]:
    """Create a token and return it with its plain value, which is never stored and cannot be shown again."""
    if expires_days is not None and expires_days <= 0:
        raise ValidationError("expires_days must be positive", code="invalid_expiry")
    prefix = "".join(secrets.choice(_PREFIX_ALPHABET) for _ in range(10))
    plain = f"{TOKEN_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    token = AgentToken.objects.create(
        agent=agent, name=name[:100] or "default", prefix=prefix, token_hash=_hash(plain),
        expires_at=timezone.now() + timedelta(days=expires_days) if expires_days else None,
        created_by=actor if getattr(actor, "pk", None) else None,
    )
    return token, plain


@transaction.atomic
def token_revoke(*, token: AgentToken) -> AgentToken:
    """Revoke `token`: refused at once in this process and within a second in every other (the token cache's
    generation moves with the commit); after commit every WebSocket opened with it is closed with 4401 (an UPDATE
    sends no signal)."""
    if AgentToken.objects.filter(pk=token.pk, revoked=False).update(revoked=True, revoked_at=timezone.now()):
        token_cache_changed()
        events.principal_ended([events.principal_group("token", token.pk)])
    token.refresh_from_db()
    return token


def token_cache_changed() -> None:
    """A token or an agent changed or went: every process drops the authentications it keeps (token_authenticate_cached).
    Call it inside the writing transaction; tools_app.signals calls it for every save and delete of either model."""
    generation_bump(TOKENS_CACHE)


def token_active(token_id: int) -> AgentToken | None:
    """The token with its agent while it still grants access (not revoked, not expired, agent enabled), else None.
    Long-lived connections (WebSockets) re-check their token with this."""
    token = AgentToken.objects.select_related("agent").filter(pk=token_id).first()
    return token if token is not None and token.is_active and token.agent.enabled else None


_TOKEN_LOOKUP_SQL = None


def _token_lookup(prefix: str) -> AgentToken | None:
    """Token + agent in one query. Every API call does this, so the SQL is compiled once, not per request."""
    global _TOKEN_LOOKUP_SQL
    if _TOKEN_LOOKUP_SQL is None:
        token_cols = [f.column for f in AgentToken._meta.concrete_fields]
        agent_cols = [f.column for f in Agent._meta.concrete_fields]
        _TOKEN_LOOKUP_SQL = (
            "SELECT " + ", ".join([f"t.{c}" for c in token_cols] + [f"a.{c}" for c in agent_cols])
            + f" FROM {AgentToken._meta.db_table} t JOIN {Agent._meta.db_table} a ON a.id = t.agent_id WHERE t.prefix = %s",
            len(token_cols),
        )
    sql, split = _TOKEN_LOOKUP_SQL
    with connection.cursor() as cur:
        cur.execute(sql, [prefix])
        row = cur.fetchone()
    if row is None:
        return None
    token = _from_row(AgentToken, row[:split])
    token.agent = _from_row(Agent, row[split:])
    return token


def _from_row(model, values):
    """A model instance from raw column values, applying field converters (e.g. JSON text -> dict)."""
    fields = model._meta.concrete_fields
    converted = [f.from_db_value(v, None, connection) if v is not None and hasattr(f, "from_db_value") else v
                 for f, v in zip(fields, values)]
    return model.from_db("default", [f.attname for f in fields], converted)


def _token_digest(raw: str) -> str | None:
    """The SHA-256 of a well-formed token, else None (nothing else is ever hashed, looked up or cached)."""
    if len(raw) > 200:
        return None
    parts = raw.split("_", 2)
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX or not parts[1] or not set(parts[1]) <= _PREFIX_CHARS:
        return None  # a prefix goclaw never issues (NUL, spaces …) never reaches the database
    return _hash(raw)


def _token_verified(raw: str, digest: str) -> AgentToken | None:
    """The token row `raw` names, with its agent, if its hash matches (constant-time), whatever its state."""
    token = _token_lookup(raw.split("_", 2)[1])
    return token if token is not None and hmac.compare_digest(token.token_hash, digest) else None


def _token_grants(token: AgentToken | None) -> bool:
    """Whether `token` grants access now: not revoked, not expired, its agent enabled (no query: the agent is loaded)."""
    return token is not None and token.is_active and token.agent.enabled


def _last_use_due(token: AgentToken, now) -> bool:
    return token.last_used_at is None or (now - token.last_used_at).total_seconds() > settings.TOOL_TOKEN_LAST_USED_INTERVAL


def _token_usable(token: AgentToken | None) -> AgentToken | None:
    """`token` if it grants access now; stamps `last_used_at` at most once per TOOL_TOKEN_LAST_USED_INTERVAL."""
    if not _token_grants(token):
        return None
    now = timezone.now()
    if _last_use_due(token, now):
        token.last_used_at = now
        AgentToken.objects.filter(pk=token.pk).update(last_used_at=now)
    return token


def token_authenticate(raw: str) -> AgentToken | None:
    """The active token for `raw` (with its agent loaded), or None: unknown, malformed, expired,
    revoked or belonging to a disabled agent. Reads the database on every call; comparison of hashes is constant-time."""
    digest = _token_digest(raw)
    return None if digest is None else _token_usable(_token_verified(raw, digest))


class _AuthenticatedTokens(GenerationCache):
    """Token rows (agent loaded) that matched a presented token in this process, by the token's SHA-256, never the
    token itself. An entry serves while the TOKENS_CACHE generation stays where it was *before* the row was read
    (so a row read across a change is never served after it) and for at most TOKEN_CACHE_SECONDS. Rows are shared
    by the process's requests: read them, never change them (last_used_at aside)."""

    def _serving(self, digest: str, generation: int | None, now: float) -> AgentToken | object:
        """The cached row for `digest` if it was read under `generation` less than TOKEN_CACHE_SECONDS ago."""
        entry = self.entries.get(digest)
        if generation is not None and entry is not None and entry[1] == generation and now - entry[2] < TOKEN_CACHE_SECONDS:
            return entry[0]
        return MISSING

    def lookup(self, digest: str, read: Callable[[], AgentToken | None]) -> AgentToken | None:
        generation = self.sync()
        now = time.monotonic()
        token = self._serving(digest, generation, now)
        if token is not MISSING:
            return token
        token = read()
        with self.lock:
            if token is None:
                self.entries.pop(digest, None)  # unknown tokens are never cached: guessing cannot fill the cache
            else:
                if len(self.entries) >= self.max_entries:
                    self.entries.clear()
                self.entries[digest] = (token, generation, now)
        return token

    def peek(self, digest: str) -> AgentToken | object:
        """`lookup`'s row when it is cached and current without a query, else MISSING."""
        return self._serving(digest, self.peek_generation(), time.monotonic())


_authenticated = _AuthenticatedTokens(TOKENS_CACHE)


def token_authenticate_cached(raw: str) -> AgentToken | None:
    """token_authenticate without a query on most calls: the row is kept per process (_AuthenticatedTokens) and
    checked again on every call (revoked, expired, agent disabled). A revocation, expiry change, token deletion or
    agent change is seen at once by the process that made it and within CHECK_SECONDS (0.5 s) plus one request by
    every other process (goclaw.generations); a change that bypasses the models (raw SQL) within TOKEN_CACHE_SECONDS."""
    digest = _token_digest(raw)
    return None if digest is None else _token_usable(_authenticated.lookup(digest, lambda: _token_verified(raw, digest)))


def token_authenticate_in_memory(raw: str) -> AgentToken | None | object:
    """`token_authenticate_cached(raw)` when this process can answer without the database (no query, and no
    `last_used_at` stamp due), else MISSING. For code on an event loop, which asks a worker thread only then."""
    digest = _token_digest(raw)
    if digest is None:
        return None
    token = _authenticated.peek(digest)
    if token is MISSING:
        return MISSING
    if not _token_grants(token):
        return None
    return MISSING if _last_use_due(token, timezone.now()) else token


def agent_get_by_key(key: str) -> Agent:
    try:
        return Agent.objects.get(key=key)
    except Agent.DoesNotExist:
        raise NotFound(f"agent {key!r} does not exist", code="agent_not_found") from None
