"""Agents and their bearer tokens."""
from __future__ import annotations

import hashlib
import hmac
import secrets
import string
from datetime import timedelta
from typing import Any

import jsonschema
from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import connection, transaction
from django.utils import timezone

from goclaw import events
from goclaw.errors import NotFound, ValidationError
from tools_app.models import Agent, AgentToken

TOKEN_PREFIX = "gclw"
_PREFIX_ALPHABET = string.ascii_lowercase + string.digits

_NAME_LIST = {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 200}, "uniqueItems": True}
AGENT_CONFIG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "rate_limit_per_hour": {"type": "integer", "minimum": 0, "description": "tool calls per session per hour; 0 disables"},
        "rate_limit_user_per_hour": {"type": "integer", "minimum": 0,
                                     "description": "tool calls per user id per hour, across sessions; 0 disables"},
        "rate_limit_agent_per_hour": {"type": "integer", "minimum": 0,
                                      "description": "tool calls per hour for the whole agent; 0 disables"},
        "output_budget_chars": {"type": "integer", "minimum": 1000, "maximum": 10_000_000},
        "tool_output_budgets": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 1000}},
        "tool_timeouts": {"type": "object", "additionalProperties": {"type": "number", "minimum": 1, "maximum": 3600}},
        "exec_timeout_seconds": {"type": "number", "minimum": 1, "maximum": 3600,
                                 "description": "exec's default command timeout (never above the sandbox profile's)"},
        "exec_grace_seconds": {"type": "number", "minimum": 0, "maximum": 60,
                               "description": "seconds between SIGTERM and SIGKILL at the timeout (default 3)"},
        "exec_max_output_bytes": {"type": "integer", "minimum": 1024, "maximum": 256 * 1024 * 1024,
                                  "description": "bytes of stdout and of stderr kept per command (default 1 MiB)"},
        "shell_disabled_rule_groups": _NAME_LIST,
        "denied_paths": _NAME_LIST,
        # Approvals (docs/approvals.md): GoClaw's exec security × ask matrix, and the decision deadline.
        "exec_security": {"enum": ["deny", "allowlist", "full"], "description": "default full"},
        "exec_ask": {"enum": ["off", "on-miss", "always"], "description": "default off"},
        "exec_allowlist": {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 1000}, "uniqueItems": True,
                           "description": "glob patterns on each simple command (e.g. 'git status', 'ls *')"},
        "approval_timeout_seconds": {"type": "integer", "minimum": 10, "maximum": 86400},
    },
}
_validator = jsonschema.Draft202012Validator(AGENT_CONFIG_SCHEMA)


def agent_config_validate(config: Any, *, as_django_error: bool = False) -> dict:
    """Check `other_config` against AGENT_CONFIG_SCHEMA; errors name the offending key."""
    problems = [
        f"{'/'.join(str(p) for p in err.absolute_path) or '(root)'}: {err.message}"
        for err in sorted(_validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    ]
    if problems:
        if as_django_error:
            raise DjangoValidationError({"other_config": problems})
        raise ValidationError("invalid agent configuration", code="invalid_agent_config", details=problems)
    return config


@transaction.atomic
def agent_create(*, key: str, display_name: str = "", agent_type: str = "predefined", provider: str = "",
                 model: str = "", workspace: str = "", other_config: dict | None = None, enabled: bool = True,
                 sandbox_profile=None) -> Agent:
    agent = Agent(key=key, display_name=display_name, agent_type=agent_type, provider=provider, model=model,
                  workspace=workspace, other_config=other_config or {}, enabled=enabled, sandbox_profile=sandbox_profile)
    return _validated_save(agent)


@transaction.atomic
def agent_update(*, agent: Agent, **fields: Any) -> Agent:
    for name, value in fields.items():
        setattr(agent, name, value)
    return _validated_save(agent)


def _validated_save(agent: Agent) -> Agent:
    try:
        agent.full_clean()
    except DjangoValidationError as exc:
        raise ValidationError("invalid agent", code="invalid_agent", details=exc.message_dict) from None
    agent.save()
    return agent


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
    """Revoke `token`; after commit every WebSocket opened with it is closed with 4401 (an UPDATE sends no signal)."""
    if AgentToken.objects.filter(pk=token.pk, revoked=False).update(revoked=True, revoked_at=timezone.now()):
        events.principal_ended([events.principal_group("token", token.pk)])
    token.refresh_from_db()
    return token


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


def token_authenticate(raw: str) -> AgentToken | None:
    """The active token for `raw` (with its agent loaded), or None: unknown, malformed, expired,
    revoked or belonging to a disabled agent. Comparison of hashes is constant-time."""
    parts = raw.split("_", 2)
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX or not parts[1] or len(raw) > 200:
        return None
    token = _token_lookup(parts[1])
    if token is None or not hmac.compare_digest(token.token_hash, _hash(raw)):
        return None
    if not token.is_active or not token.agent.enabled:
        return None
    now = timezone.now()
    if token.last_used_at is None or (now - token.last_used_at).total_seconds() > settings.TOOL_TOKEN_LAST_USED_INTERVAL:
        AgentToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def agent_get_by_key(key: str) -> Agent:
    try:
        return Agent.objects.get(key=key)
    except Agent.DoesNotExist:
        raise NotFound(f"agent {key!r} does not exist", code="agent_not_found") from None
