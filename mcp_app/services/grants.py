"""Who may use which MCP server (docs/mcp.md, "Grants"): agent grants (needed for any access), user grants (narrow an
agent's access for one user, and may carry that user's own upstream credentials), and access requests reviewed by
staff, whose approval writes the grant in the same transaction. Every write bumps the tool-set generation."""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from goclaw import crypto
from goclaw.errors import Conflict, NotFound, PermissionDenied, ValidationError
from goclaw.events import agent_group, publish
from mcp_app.choices import AccessScope, AccessStatus
from mcp_app.config import OVERRIDE_KEYS
from mcp_app.models import MCPAccessRequest, MCPAgentGrant, MCPServer, MCPUserGrant
from mcp_app.services.common import (MCP_EVENTS_GROUP, actor_name, env_names_problem, headers_problems,
                                     launcher_problem, overrides_seal_context)
from tools_app.models import Agent
from tools_app.services.audit import audit_actor, audit_event_record
from tools_app.services.custom_tools import env_merged, env_problems
from tools_app.toolsets import tools_changed

logger = logging.getLogger("goclaw.mcp")
MAX_TOOL_NAMES = 500
MAX_PENDING = 50  # pending access requests per requester: the review queue is people's time


class MCPGrantInvalid(ValidationError):
    code = "mcp_grant_invalid"


class MCPAccessRequestInvalid(ValidationError):
    code = "mcp_access_request_invalid"


# --- shared checks -------------------------------------------------------------------------------------------------
def tool_names(value: Any, *, field: str, server: MCPServer, nullable: bool) -> list[str] | None:
    """A list of tool names as the server names them; a name given with the server's prefix is accepted and
    stored without it. None stays None where `nullable` (an allow list of None = every tool)."""
    if value is None and nullable:
        return None
    if not isinstance(value, list) or len(value) > MAX_TOOL_NAMES or not all(
            isinstance(v, str) and 0 < len(v) <= 200 for v in value):
        raise MCPGrantInvalid(f"{field}: a list of tool names", details={field: "a list of tool names"})
    prefix = server.prefix
    return sorted({v[len(prefix):] if v.startswith(prefix) else v for v in value})


def _expiry(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    raise MCPGrantInvalid("expires_at: a date-time or null", details={"expires_at": "a date-time or null"})


def _flag(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise MCPGrantInvalid(f"{field}: true or false", details={field: "true or false"})
    return value


# --- agent grants --------------------------------------------------------------------------------------------------
def overrides_problem(overrides: Any) -> str | None:
    """What is wrong with `config_overrides`: keys env, headers (objects), args_suffix (argv list), timeout (s)."""
    if not isinstance(overrides, dict):
        return "an object with the keys " + ", ".join(OVERRIDE_KEYS)
    unknown = set(overrides) - set(OVERRIDE_KEYS)
    if unknown:
        return f"unknown key(s) {', '.join(sorted(unknown))}; allowed: {', '.join(OVERRIDE_KEYS)}"
    if "env" in overrides and (problem := env_problems(overrides["env"], allow_unset=False)
                               or env_names_problem(overrides["env"])):
        return f"env: {problem}"
    if "headers" in overrides and (problem := headers_problems(overrides["headers"], allow_unset=False)):
        return f"headers: {problem}"
    suffix = overrides.get("args_suffix", [])
    if not isinstance(suffix, list) or len(suffix) > 32 or not all(isinstance(a, str) and "\x00" not in a for a in suffix):
        return "args_suffix: a list of at most 32 strings"
    timeout = overrides.get("timeout")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int) or not 1 <= timeout <= 3600):
        return "timeout: whole seconds from 1 to 3600"
    return None


def _overrides_summary(overrides: dict[str, Any]) -> dict[str, Any]:
    summary = {k: v for k, v in overrides.items() if k in ("args_suffix", "timeout")}
    for key in ("env", "headers"):
        if overrides.get(key):
            summary[key] = sorted(overrides[key])  # names only: values may be secrets
    return summary


@transaction.atomic
def agent_grant_set(*, actor, server: MCPServer, agent: Agent, tool_allow: Any = None, tool_deny: Any = (),
                    expires_at: Any = None, enabled: bool = True, config_overrides: Any = None) -> MCPAgentGrant:
    """Create or replace the agent's grant to the server. `config_overrides` None keeps the current overrides; {}
    clears them (stdio args_suffix is checked against the server's launcher like its own args)."""
    allow = tool_names(tool_allow, field="tool_allow", server=server, nullable=True)
    deny = tool_names(list(tool_deny or []), field="tool_deny", server=server, nullable=False)
    expires_at, enabled = _expiry(expires_at), _flag(enabled, "enabled")
    if config_overrides is not None:
        if problem := overrides_problem(config_overrides):
            raise MCPGrantInvalid(f"config_overrides: {problem}", details={"config_overrides": problem})
        suffix = config_overrides.get("args_suffix") or []
        if suffix and server.transport == "stdio" and (why := launcher_problem(server.command, [*server.args, *suffix])):
            raise MCPGrantInvalid(f"config_overrides: {why}", details={"config_overrides": why})
    grant, _ = MCPAgentGrant.objects.select_for_update().update_or_create(
        server=server, agent=agent, defaults={"tool_allow": allow, "tool_deny": deny, "expires_at": expires_at,
                                              "enabled": enabled, "granted_by": actor_name(actor)})
    if config_overrides is not None:
        grant.overrides_sealed = crypto.encrypt_json(
            config_overrides, associated_data=overrides_seal_context(grant.pk)) if config_overrides else ""
        grant.overrides_summary = _overrides_summary(config_overrides)
        grant.save(update_fields=["overrides_sealed", "overrides_summary"])
    tools_changed()
    logger.info("MCP grant %s → %s set by %s", agent.key, server.name, actor_name(actor))
    return grant


@transaction.atomic
def agent_grant_revoke(*, actor, grant: MCPAgentGrant) -> None:
    """Remove an agent grant: the agent loses the server's tools within a second (calls in flight are refused at
    their next call-time check)."""
    logger.info("MCP grant %s → %s revoked by %s", grant.agent.key, grant.server.name, actor_name(actor))
    grant.delete()
    tools_changed()


# --- user grants ---------------------------------------------------------------------------------------------------
def credentials_seal_context(pk: Any) -> str:
    return f"mcp-user-grant:{pk}:credentials"


def user_grant_credentials(grant: MCPUserGrant) -> dict[str, dict[str, str]]:
    """The user's own upstream credentials in clear (connection code only): {"headers": {}, "env": {}}."""
    if not grant.credentials_sealed:
        return {}
    return crypto.decrypt_json(grant.credentials_sealed, associated_data=credentials_seal_context(grant.pk))


def _credentials_problem(credentials: Any) -> str | None:
    if not isinstance(credentials, dict) or set(credentials) - {"headers", "env"}:
        return 'an object {"headers": {…}, "env": {…}}'
    if "headers" in credentials and (problem := headers_problems(credentials["headers"], allow_unset=True)):
        return f"headers: {problem}"
    if "env" in credentials and (problem := env_problems(credentials["env"], allow_unset=True)
                                 or env_names_problem(credentials["env"])):
        return f"env: {problem}"
    return None


@transaction.atomic
def user_grant_set(*, actor, server: MCPServer, user_id: str, agent: Agent | None = None, tool_allow: Any = None,
                   tool_deny: Any = (), expires_at: Any = None, enabled: bool = True,
                   credentials: Any = None) -> MCPUserGrant:
    """Create or replace the grant narrowing (agent or every agent, user). `credentials` sets the user's own headers
    / env for the server (a null value removes one name; None keeps them all)."""
    if not isinstance(user_id, str) or not user_id.strip() or len(user_id) > 255:
        raise MCPGrantInvalid("user_id: a non-empty string of at most 255 characters", details={"user_id": "required"})
    allow = tool_names(tool_allow, field="tool_allow", server=server, nullable=True)
    deny = tool_names(list(tool_deny or []), field="tool_deny", server=server, nullable=False)
    expires_at, enabled = _expiry(expires_at), _flag(enabled, "enabled")
    if credentials is not None and (problem := _credentials_problem(credentials)):
        raise MCPGrantInvalid(f"credentials: {problem}", details={"credentials": problem})
    grant, _ = MCPUserGrant.objects.select_for_update().update_or_create(
        server=server, agent=agent, user_id=user_id,
        defaults={"tool_allow": allow, "tool_deny": deny, "expires_at": expires_at, "enabled": enabled,
                  "granted_by": actor_name(actor)})
    if credentials is not None:
        current = user_grant_credentials(grant)
        merged = {key: env_merged(current.get(key, {}), credentials.get(key, {})) for key in ("headers", "env")}
        merged = {key: value for key, value in merged.items() if value}
        grant.credentials_sealed = crypto.encrypt_json(
            merged, associated_data=credentials_seal_context(grant.pk)) if merged else ""
        grant.credentials_names = {key: sorted(value) for key, value in merged.items()}
        grant.save(update_fields=["credentials_sealed", "credentials_names"])
    tools_changed()
    logger.info("MCP user grant %s @ %s → %s set by %s", user_id, agent.key if agent else "*", server.name,
                actor_name(actor))
    return grant


@transaction.atomic
def user_grant_revoke(*, actor, grant: MCPUserGrant) -> None:
    """Remove a user grant (with the user's stored credentials)."""
    logger.info("MCP user grant %s → %s revoked by %s", grant.user_id, grant.server.name, actor_name(actor))
    grant.delete()
    tools_changed()


# --- access requests -----------------------------------------------------------------------------------------------
def _request_payload(request: MCPAccessRequest) -> dict[str, Any]:
    return {"id": request.pk, "scope": request.scope, "server": request.server.name,
            "agent": request.agent.key if request.agent_id else None, "user_id": request.user_id,
            "tool_allow": request.tool_allow, "status": request.status, "requested_by": request.requested_by,
            "reviewed_by": request.reviewed_by, "review_note": request.review_note}


def _request_groups(request: MCPAccessRequest) -> list[str]:
    return [MCP_EVENTS_GROUP] + ([agent_group(request.agent.key)] if request.agent_id else [])


@transaction.atomic
def access_request_create(*, requested_by: str, scope: str, server: MCPServer, agent: Agent | None = None,
                          user_id: str = "", tool_allow: Any = None, reason: str = "") -> MCPAccessRequest:
    """Ask for access to a server (an agent for itself or one of its users; staff for anyone). One pending request
    per (scope, server, agent, user): a second one is a conflict naming the first."""
    if scope not in AccessScope.values:
        raise MCPAccessRequestInvalid("scope: agent or user", details={"scope": "agent or user"})
    if scope == AccessScope.AGENT and agent is None:
        raise MCPAccessRequestInvalid("an agent-scope request names the agent", details={"agent": "required"})
    if scope == AccessScope.USER and (not isinstance(user_id, str) or not user_id.strip() or len(user_id) > 255):
        raise MCPAccessRequestInvalid("a user-scope request names the user (user_id)", details={"user_id": "required"})
    if not isinstance(reason, str) or len(reason) > 4000:
        raise MCPAccessRequestInvalid("reason: text of at most 4000 characters", details={"reason": "too long"})
    allow = tool_names(tool_allow, field="tool_allow", server=server, nullable=True)
    user_id = user_id if scope == AccessScope.USER else ""
    MCPServer.objects.select_for_update().filter(pk=server.pk).first()  # serializes duplicate checks per server
    if MCPAccessRequest.objects.filter(requested_by=requested_by, status=AccessStatus.PENDING).count() >= MAX_PENDING:
        raise Conflict(f"{requested_by} already has {MAX_PENDING} pending access requests; wait for a review",
                       code="mcp_access_requests_limit")
    existing = MCPAccessRequest.objects.filter(scope=scope, server=server, agent=agent, user_id=user_id,
                                               status=AccessStatus.PENDING).first()
    if existing is not None:
        raise Conflict(f"access request {existing.pk} for this is already pending", code="mcp_access_request_pending",
                       details={"id": existing.pk})
    request = MCPAccessRequest.objects.create(scope=scope, server=server, agent=agent, user_id=user_id,
                                              tool_allow=allow, reason=reason, requested_by=requested_by)
    publish("mcp.access_requested", _request_payload(request), _request_groups(request))
    logger.info("MCP access request %s (%s → %s) by %s", request.pk, scope, server.name, requested_by)
    return request


def _grant_for(request: MCPAccessRequest, actor) -> None:
    if request.scope == AccessScope.AGENT:
        current = MCPAgentGrant.objects.filter(server=request.server, agent=request.agent).first()
        agent_grant_set(actor=actor, server=request.server, agent=request.agent, tool_allow=request.tool_allow,
                        tool_deny=current.tool_deny if current else [], enabled=True,
                        expires_at=current.expires_at if current else None)
    else:
        current = MCPUserGrant.objects.filter(server=request.server, agent=request.agent, user_id=request.user_id).first()
        user_grant_set(actor=actor, server=request.server, agent=request.agent, user_id=request.user_id,
                       tool_allow=request.tool_allow, tool_deny=current.tool_deny if current else [], enabled=True,
                       expires_at=current.expires_at if current else None)


@transaction.atomic
def access_request_review(*, actor, request: MCPAccessRequest, decision: str, note: str = "") -> MCPAccessRequest:
    """Approve (the grant is created or updated in this same transaction: a failure leaves neither) or reject a
    pending request. A request already decided is a conflict: two reviewers cannot both decide it."""
    if decision not in ("approve", "reject"):
        raise MCPAccessRequestInvalid("decision: approve or reject", details={"decision": "approve or reject"})
    if not isinstance(note, str) or len(note) > 4000:
        raise MCPAccessRequestInvalid("note: text of at most 4000 characters", details={"note": "too long"})
    status = AccessStatus.APPROVED if decision == "approve" else AccessStatus.REJECTED
    updated = MCPAccessRequest.objects.filter(pk=request.pk, status=AccessStatus.PENDING).update(
        status=status, reviewed_by=actor_name(actor), reviewed_at=timezone.now(), review_note=note)
    if not updated:
        current = MCPAccessRequest.objects.filter(pk=request.pk).values_list("status", flat=True).first()
        raise Conflict(f"access request {request.pk} is {current or 'gone'}, not pending",
                       code="mcp_access_request_decided")
    request = MCPAccessRequest.objects.select_related("server", "agent").get(pk=request.pk)
    if status == AccessStatus.APPROVED:
        _grant_for(request, actor)
    audit_event_record(kind="mcp_access_request.reviewed", actor=audit_actor(actor), target=str(request.pk), details={
        "server": request.server.name, "scope": request.scope, "agent": request.agent.key if request.agent_id else "",
        "user_id": request.user_id, "decision": decision, "note": note[:500]})
    publish("mcp.access_reviewed", _request_payload(request), _request_groups(request))
    logger.info("MCP access request %s %s by %s", request.pk, status, actor_name(actor))
    return request


@transaction.atomic
def access_request_withdraw(*, requested_by: str, request: MCPAccessRequest) -> MCPAccessRequest:
    """The requester takes a pending request back."""
    if request.requested_by != requested_by:
        raise PermissionDenied("only the requester may withdraw a request", code="mcp_access_request_not_yours")
    if not MCPAccessRequest.objects.filter(pk=request.pk, status=AccessStatus.PENDING).update(status=AccessStatus.WITHDRAWN):
        raise Conflict(f"access request {request.pk} is not pending", code="mcp_access_request_decided")
    request.refresh_from_db()
    publish("mcp.access_reviewed", _request_payload(request), _request_groups(request))
    return request


def access_request_get(pk: Any) -> MCPAccessRequest:
    try:
        return MCPAccessRequest.objects.select_related("server", "agent").get(pk=int(pk))
    except (MCPAccessRequest.DoesNotExist, ValueError, TypeError):
        raise NotFound(f"no MCP access request {pk}", code="mcp_access_request_not_found") from None

