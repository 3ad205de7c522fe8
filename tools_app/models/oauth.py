"""goclaw as an OAuth 2.1 authorization server (docs/mcp-oauth.md): the clients MCP applications register, a person's
grant that lets one client act as one agent, and the short-lived codes and rotating refresh tokens of that grant.
The access tokens are ordinary agent tokens (AgentToken); only hashes of codes, refresh tokens and client secrets
are kept."""
from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.db import models

from tools_app.models.agents import Agent, AgentToken


# The name of every agent token an OAuth grant issued starts with this (the client's name follows).
OAUTH_TOKEN_NAME_PREFIX = "oauth:"

class TokenAuthMethod(models.TextChoices):
    """How a client proves who it is at the token and revocation endpoints (RFC 7591 §2)."""

    NONE = "none", "none (public client: PKCE only)"
    CLIENT_SECRET_POST = "client_secret_post", "client secret in the request body"
    CLIENT_SECRET_BASIC = "client_secret_basic", "client secret in HTTP Basic authentication"


class OAuthClient(models.Model):
    """An application (an MCP client) that may ask a person to let it act as an agent. Registered dynamically
    (RFC 7591: its name is the client's own claim) or by an administrator. Only the SHA-256 of its secret is kept."""

    client_id = models.CharField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    secret_hash = models.CharField(max_length=64, blank=True, help_text="SHA-256 of the client secret; empty: public")
    auth_method = models.CharField(max_length=32, choices=TokenAuthMethod.choices, default=TokenAuthMethod.NONE)
    redirect_uris = models.JSONField(default=list, help_text="exact URIs the authorization answer may be sent to")
    grant_types = models.JSONField(default=list)
    scope = models.CharField(max_length=200, blank=True, help_text="what the client asked for when it registered")
    dynamic = models.BooleanField(default=False, help_text="registered by the client itself (/oauth/register)")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    last_used_at = models.DateTimeField(null=True, blank=True, help_text="when a person last approved it")

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "OAuth client"
        indexes = [models.Index(fields=["dynamic", "last_used_at", "created_at"], name="oauth_client_unused")]

    def __str__(self) -> str:
        return f"{self.name} ({self.client_id})"

    @property
    def redirect_hosts(self) -> list[str]:
        """Where its answers go, host and port only: what a person should recognise."""
        return sorted({urlsplit(uri).netloc for uri in self.redirect_uris})


class OAuthGrant(models.Model):
    """A person's approval that one client may act as one agent. Every access token (an AgentToken) and refresh
    token issued under it is tied to it; revoking it revokes them all."""

    client = models.ForeignKey(OAuthClient, on_delete=models.CASCADE, related_name="grants")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    person = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="+", help_text="who approved it (its refreshes end when they may no longer)")
    scope = models.CharField(max_length=200)
    resource = models.CharField(max_length=2000, blank=True, help_text="the resource named by the client (RFC 8707)")
    tokens = models.ManyToManyField(AgentToken, blank=True, related_name="+")
    access_token = models.ForeignKey(AgentToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
                                     help_text="the latest access token issued under it")
    created_at = models.DateTimeField(auto_now_add=True)
    refreshed_at = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_reason = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "OAuth grant"

    def __str__(self) -> str:
        return f"{self.client.name} as {self.agent.key}"


class OAuthAuthorizationCode(models.Model):
    """One authorization code: single use, 60 seconds, bound to its client, redirect URI, PKCE challenge, agent,
    person, resource and scope. Kept a day after use so a replay is recognised (it revokes the grant it made)."""

    client = models.ForeignKey(OAuthClient, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    person = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    prefix = models.CharField(max_length=16, unique=True)
    code_hash = models.CharField(max_length=64)
    redirect_uri = models.CharField(max_length=2000)
    redirect_uri_given = models.BooleanField(default=True, help_text="the request named it (the token request must too)")
    code_challenge = models.CharField(max_length=128)
    scope = models.CharField(max_length=200)
    resource = models.CharField(max_length=2000, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    grant = models.ForeignKey(OAuthGrant, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        verbose_name = "OAuth authorization code"


class OAuthRefreshToken(models.Model):
    """One refresh token of a grant. Each use rotates it (a new one is issued, this one is spent); a spent one
    presented again means it leaked, and the whole grant is revoked (reuse detection)."""

    grant = models.ForeignKey(OAuthGrant, on_delete=models.CASCADE, related_name="refresh_tokens")
    prefix = models.CharField(max_length=16, unique=True)
    token_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "OAuth refresh token"
