"""DRF authentication for agents: `Authorization: Bearer gclw_<prefix>_<secret>`."""
from __future__ import annotations

from dataclasses import dataclass

from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed

from goclaw.api import bearer_from_header
from tools_app.models import Agent, AgentToken
from tools_app.services.agents import token_authenticate_cached


@dataclass
class AgentPrincipal:
    """What `request.user` is for an agent request."""

    agent: Agent
    token: AgentToken
    is_authenticated: bool = True
    is_staff: bool = False
    is_active: bool = True
    pk = None

    def __str__(self) -> str:
        return f"agent:{self.agent.key}"


class AgentTokenAuthentication(BaseAuthentication):
    """Agents' bearer tokens, checked against the per-process token cache (a revocation anywhere is refused
    within a second, see token_authenticate_cached). Any Authorization header makes this the only scheme tried."""

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        raw = bearer_from_header(header)
        if raw is None:
            raise AuthenticationFailed("Authorization header must be 'Bearer <agent token>'")
        token = token_authenticate_cached(raw)
        if token is None:
            raise AuthenticationFailed("invalid, expired or revoked agent token")
        return AgentPrincipal(agent=token.agent, token=token), token

    def authenticate_header(self, request):
        return 'Bearer realm="goclaw"'


from drf_spectacular.extensions import OpenApiAuthenticationExtension  # noqa: E402


class AgentTokenScheme(OpenApiAuthenticationExtension):
    """Documents agent tokens in the OpenAPI schema as HTTP bearer auth."""

    target_class = "tools_app.authentication.AgentTokenAuthentication"
    name = "AgentToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "Agent token `gclw_<prefix>_<secret>` (manage.py issue_token)"}
