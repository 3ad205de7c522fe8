"""The OAuth 2.1 authorization server's logic (docs/mcp-oauth.md): client registration (RFC 7591), the authorization
code flow with S256 PKCE (RFC 6749 §4.1, RFC 7636), resource indicators (RFC 8707), refresh-token rotation with
reuse detection, and revocation (RFC 7009). The access token is an ordinary agent token (token_issue) with an
expiry, created by the person who approved, so it works and is revoked wherever agent tokens are.

Codes, refresh tokens and client secrets are `<kind>_<prefix>_<secret>`: the prefix finds the row, the SHA-256 of
the whole value is compared in constant time; only the hash is stored. Every input is hostile: each refusal is an
OAuthError with the RFC's code, never an exception of another kind."""
from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Mapping, Sequence
from urllib.parse import unquote, urlencode, urlsplit, urlunsplit

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from goclaw.authz import person_may
from tools_app.models import Agent, AgentToken
from tools_app.models.oauth import (OAUTH_TOKEN_NAME_PREFIX, OAuthAuthorizationCode, OAuthClient, OAuthGrant,
                                    OAuthRefreshToken, TokenAuthMethod)
from tools_app.oauth import metadata
from tools_app.oauth.errors import OAuthError
from tools_app.services.agents import token_authenticate, token_issue, token_revoke
from tools_app.services.audit import audit_actor, audit_event_record

logger = logging.getLogger("goclaw.oauth")

ACT_AS_AGENT = "tools_app.add_agenttoken"  # what a person needs to let a client act as an agent (as to mint a token)
CODE_SECONDS = 60
SPENT_CODES_KEPT = timedelta(days=1)  # a replay within this long still revokes what the code produced
UNUSED_CLIENT_KEPT = timedelta(days=1)  # a dynamically registered client nobody approved is removed after this
MAX_REDIRECT_URIS = 10
MAX_URI_CHARS = 2000
MAX_NAME_CHARS = 200
MAX_STATE_CHARS = 2048
MAX_ID_CHARS = 64
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
GRANT_TYPES = ("authorization_code", "refresh_token")
CODE_KIND, REFRESH_KIND, SECRET_KIND = "gcac", "gcrt", "gccs"
CODE_REFUSED = "unknown, expired or already used authorization code"  # one answer: which it was is not said
_PREFIX = re.compile(r"[0-9a-f]{16}")
_CHALLENGE = re.compile(r"[A-Za-z0-9_-]{43}")  # base64url of a SHA-256, unpadded
_VERIFIER = re.compile(r"[A-Za-z0-9._~-]{43,128}")  # RFC 7636 §4.1
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")  # RFC 6749 §3.3
_CLIENT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


# --- secrets -------------------------------------------------------------------------------------------------------
def _digest(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def _mint(kind: str) -> tuple[str, str]:
    """A new secret of `kind` and its lookup prefix."""
    prefix = secrets.token_hex(8)
    return f"{kind}_{prefix}_{secrets.token_urlsafe(32)}", prefix


def _prefix_of(kind: str, raw: Any) -> str | None:
    """The lookup prefix of a well-formed secret of `kind`, else None (nothing else is hashed or looked up)."""
    if not isinstance(raw, str) or len(raw) > 200:
        return None
    parts = raw.split("_", 2)
    if len(parts) != 3 or parts[0] != kind or not _PREFIX.fullmatch(parts[1]) or not parts[2]:
        return None
    return parts[1]


def _matches(stored_hash: str, raw: str) -> bool:
    return bool(stored_hash) and hmac.compare_digest(stored_hash, _digest(raw))


def _printable(value: Any, limit: int) -> bool:
    """A string people may be shown and PostgreSQL may store: no control characters, NUL or lone surrogates."""
    return isinstance(value, str) and 0 < len(value) <= limit and value.isprintable()


# --- redirect URIs -------------------------------------------------------------------------------------------------
def redirect_uri_problem(uri: Any) -> str | None:
    """Why `uri` may not be a redirect URI, or None: absolute https, or http on a loopback host (127.0.0.1,
    localhost, [::1]); no fragment, no user information, no spaces, control characters or backslashes."""
    if not isinstance(uri, str) or not uri:
        return "a redirect URI must be a non-empty string"
    if len(uri) > MAX_URI_CHARS:
        return f"a redirect URI has at most {MAX_URI_CHARS} characters"
    if not uri.isascii() or not uri.isprintable() or " " in uri or "\\" in uri:
        return "a redirect URI is ASCII without spaces, control characters or backslashes"
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        return "not a valid URL"
    if "#" in uri:
        return "a redirect URI must not contain a fragment"
    if not uri.startswith(("https://", "http://")):
        return "a redirect URI uses https (or http on a loopback address)"
    if not parts.hostname or "@" in parts.netloc:
        return "a redirect URI names a host and no user information"
    if parts.scheme == "http" and parts.hostname not in LOOPBACK_HOSTS:
        return "http is allowed only on a loopback host (127.0.0.1, localhost, [::1]); use https"
    return None


def _redirect_matched(client: OAuthClient, given: str) -> bool:
    """`given` is one of the client's redirect URIs: exactly, or for a loopback http URI with any port (RFC 8252
    §7.3: native apps listen on a port the system hands out)."""
    if given in client.redirect_uris:
        return True
    if redirect_uri_problem(given) is not None:
        return False
    asked = urlsplit(given)
    if asked.scheme != "http":
        return False
    for registered in client.redirect_uris:
        known = urlsplit(registered)
        if (known.scheme, known.hostname, known.path, known.query) == ("http", asked.hostname, asked.path, asked.query):
            return True
    return False


def authorization_redirect(redirect_uri: str, params: Mapping[str, str | None]) -> str:
    """`redirect_uri` with `params` added to its query (its own query kept, RFC 6749 §3.1.2)."""
    parts = urlsplit(redirect_uri)
    added = urlencode({key: value for key, value in params.items() if value is not None})
    return urlunsplit(parts._replace(query=f"{parts.query}&{added}" if parts.query else added))


# --- clients -------------------------------------------------------------------------------------------------------
def client_fields_checked(data: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7591 client metadata checked (unknown members are ignored, as §2 says; a null member is an absent one),
    as OAuthClient fields."""
    data = {key: value for key, value in data.items() if value is not None}
    uris = data.get("redirect_uris")
    if not isinstance(uris, list) or not 0 < len(uris) <= MAX_REDIRECT_URIS:
        raise OAuthError("invalid_redirect_uri", f"redirect_uris: a list of 1 to {MAX_REDIRECT_URIS} URIs")
    for uri in uris:
        if problem := redirect_uri_problem(uri):
            shown = uri[:100] if isinstance(uri, str) and uri.isprintable() else "?"
            raise OAuthError("invalid_redirect_uri", f"{shown!r}: {problem}")
    method = data.get("token_endpoint_auth_method", TokenAuthMethod.CLIENT_SECRET_BASIC)  # RFC 7591's default
    if method not in TokenAuthMethod.values:
        raise OAuthError("invalid_client_metadata",
                         f"token_endpoint_auth_method is one of {', '.join(TokenAuthMethod.values)}")
    grant_types = data.get("grant_types", ["authorization_code"])
    if (not isinstance(grant_types, list) or "authorization_code" not in grant_types
            or not all(isinstance(g, str) and g in GRANT_TYPES for g in grant_types)):
        raise OAuthError("invalid_client_metadata", "grant_types: authorization_code, optionally refresh_token")
    response_types = data.get("response_types", ["code"])
    if not isinstance(response_types, list) or set(response_types) != {"code"}:
        raise OAuthError("invalid_client_metadata", 'response_types: ["code"] only')
    name = data.get("client_name")
    if name is not None and not _printable(name.strip() if isinstance(name, str) else name, MAX_NAME_CHARS):
        raise OAuthError("invalid_client_metadata", f"client_name: printable text of at most {MAX_NAME_CHARS} characters")
    scope = data.get("scope", "")
    if scope and not (_printable(scope, 200) and scope.isascii()):
        raise OAuthError("invalid_client_metadata", "scope: space-separated scope names")
    return {"name": (name or "").strip() or "unnamed client", "redirect_uris": list(dict.fromkeys(uris)),
            "auth_method": method, "grant_types": list(dict.fromkeys(grant_types)), "scope": scope}


def _unused_clients_trim(now: datetime) -> None:
    """Dynamically registered clients nobody approved within a day go; past GOCLAW_OAUTH_MAX_UNUSED_CLIENTS still
    waiting, registration pauses (anyone may register: the table must not grow without bound)."""
    unused = OAuthClient.objects.filter(dynamic=True, last_used_at__isnull=True)
    unused.filter(created_at__lt=now - UNUSED_CLIENT_KEPT).delete()
    if unused.count() >= settings.OAUTH_MAX_UNUSED_CLIENTS:
        raise OAuthError("temporarily_unavailable", "too many registered clients are waiting for approval; retry later",
                         http_status=429)


@transaction.atomic
def client_register(*, data: Any, dynamic: bool, actor=None) -> tuple[OAuthClient, str | None]:
    """Register a client from RFC 7591 metadata; return it with its secret (None for a public client), which is
    never stored and cannot be shown again. `dynamic`: the client registered itself (POST /oauth/register)."""
    if dynamic and not settings.OAUTH_DYNAMIC_REGISTRATION:
        raise OAuthError("access_denied", "dynamic client registration is switched off here; ask an administrator "
                         "for a client", http_status=403)
    if not isinstance(data, dict):
        raise OAuthError("invalid_client_metadata", "the body is a JSON object of client metadata")
    fields = client_fields_checked(data)
    now = timezone.now()
    if dynamic:
        _unused_clients_trim(now)
    secret = None
    if fields["auth_method"] != TokenAuthMethod.NONE:
        secret, _ = _mint(SECRET_KIND)
    client = OAuthClient.objects.create(
        client_id=f"gcci_{secrets.token_urlsafe(24)}", secret_hash=_digest(secret) if secret else "", dynamic=dynamic,
        created_by=actor if getattr(actor, "pk", None) else None, **fields)
    audit_event_record(kind="oauth.client_registered", actor=audit_actor(actor), target=f"oauth_client:{client.client_id}",
                       details={"name": client.name, "redirect_hosts": client.redirect_hosts, "dynamic": dynamic,
                                "auth_method": client.auth_method})
    return client, secret


def client_registration_answer(client: OAuthClient, secret: str | None) -> dict[str, Any]:
    """The RFC 7591 §3.2.1 answer to a registration."""
    answer = {"client_id": client.client_id, "client_id_issued_at": int(client.created_at.timestamp()),
              "client_name": client.name, "redirect_uris": client.redirect_uris, "grant_types": client.grant_types,
              "response_types": ["code"], "token_endpoint_auth_method": client.auth_method}
    if client.scope:
        answer["scope"] = client.scope
    if secret:
        answer.update(client_secret=secret, client_secret_expires_at=0)
    return answer


@transaction.atomic
def client_update(*, client: OAuthClient, name: str, redirect_uris: list[str], actor=None) -> OAuthClient:
    """An administrator renames a client or changes where its answers may go (checked like a registration)."""
    fields = client_fields_checked({"client_name": name, "redirect_uris": redirect_uris, "grant_types": client.grant_types,
                             "token_endpoint_auth_method": client.auth_method})
    OAuthClient.objects.filter(pk=client.pk).update(name=fields["name"], redirect_uris=fields["redirect_uris"])
    client.refresh_from_db()
    return client


@transaction.atomic
def client_disable(*, client: OAuthClient, actor=None) -> int:
    """No new authorization for the client, and every grant it holds revoked (its tokens refused at once). Returns
    the number of grants revoked."""
    OAuthClient.objects.filter(pk=client.pk).update(enabled=False)
    return sum(grant_revoke(grant=grant, reason="the client was disabled", actor=actor)
               for grant in OAuthGrant.objects.filter(client=client, revoked=False))


@transaction.atomic
def client_delete(*, queryset: QuerySet[OAuthClient], actor=None) -> int:
    """Delete clients after revoking their grants (their access tokens are agent tokens: they would outlive them)."""
    for grant in OAuthGrant.objects.filter(client__in=queryset, revoked=False):
        grant_revoke(grant=grant, reason="the client was deleted", actor=actor)
    count, _ = queryset.delete()
    return count


def _basic_credentials(authorization: str) -> tuple[str, str] | None:
    """(client_id, secret) of an `Authorization: Basic` header (RFC 6749 §2.3.1: each form-encoded), None when
    there is no such header; a malformed one is invalid_client."""
    scheme, _, value = (authorization or "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        decoded = ""
    client_id, colon, secret = decoded.partition(":")
    if not colon:
        raise OAuthError("invalid_client", "malformed Basic credentials", http_status=401)
    return unquote(client_id.replace("+", " ")), unquote(secret.replace("+", " "))


def client_authenticate(params: Mapping[str, str], authorization: str = "") -> OAuthClient:
    """The enabled client the token or revocation request comes from, authenticated the way it registered: no
    secret (public), the secret in the body, or HTTP Basic. One method per request (RFC 6749 §2.3)."""
    basic = _basic_credentials(authorization)
    if basic is not None and "client_secret" in params:
        raise OAuthError("invalid_request", "use one client authentication method, not two")
    if basic is not None and params.get("client_id", basic[0]) != basic[0]:
        raise OAuthError("invalid_request", "client_id differs from the authenticated client")
    client_id, secret = basic if basic is not None else (params.get("client_id", ""), params.get("client_secret"))
    used = (TokenAuthMethod.CLIENT_SECRET_BASIC if basic is not None
            else TokenAuthMethod.CLIENT_SECRET_POST if secret is not None else TokenAuthMethod.NONE)
    client = (OAuthClient.objects.filter(client_id=client_id, enabled=True).first()
              if isinstance(client_id, str) and _CLIENT_ID.fullmatch(client_id) else None)
    authenticated = client is not None and client.auth_method == used and (
        used == TokenAuthMethod.NONE or _matches(client.secret_hash, secret or ""))
    if not authenticated:
        raise OAuthError("invalid_client", "client authentication failed", http_status=401)
    return client


# --- the authorization request ------------------------------------------------------------------------------------
AUTHORIZE_PARAMS = ("response_type", "client_id", "redirect_uri", "scope", "state", "code_challenge",
                    "code_challenge_method", "resource")


@dataclass(frozen=True)
class AuthorizationRequest:
    """A checked authorization request. `params` are the request's own OAuth parameters (the consent form posts
    them back and they are checked again)."""

    client: OAuthClient
    redirect_uri: str
    redirect_uri_given: bool
    state: str | None
    code_challenge: str
    scope: str
    resource: str
    issuer: str
    params: dict[str, str]

    @property
    def redirect_host(self) -> str:
        return urlsplit(self.redirect_uri).netloc


def _single(params: Mapping[str, Sequence[str]], names: Sequence[str] | None = None) -> dict[str, str]:
    """One value per parameter (RFC 6749 §3.1 and §3.2: none may be repeated); empty values count as absent."""
    single = {}
    for name in names if names is not None else list(params):
        values = list(params.get(name) or [])
        if len(values) > 1:
            raise OAuthError("invalid_request", f"{name[:40]!r} is repeated")
        if values and values[0] != "":
            single[name] = values[0]
    return single


def scope_granted(requested: str | None) -> str:
    """What is granted for a requested scope: always the one scope, `agent` (RFC 6749 §3.3 lets the server ignore
    scope values it does not know; the token answer says what was granted). Malformed scope is refused."""
    if requested is not None and (len(requested) > 1000 or not all(
            _SCOPE_TOKEN.fullmatch(value) for value in requested.split(" "))):
        raise OAuthError("invalid_scope", "scope: space-separated scope names")
    return metadata.SCOPE


def resource_checked(resource: str | None, issuer: str) -> str:
    """The canonical resource (RFC 8707) the client named, which must be this server's MCP endpoint; "" if none."""
    if resource is None:
        return ""
    canonical = metadata.resource_canonical(resource)
    if canonical is None or canonical not in metadata.accepted_resources(issuer):
        raise OAuthError("invalid_target", f"this server serves the resource {issuer}{metadata.MCP_RESOURCE_PATH}")
    return canonical


def authorization_request_parse(params: Mapping[str, Sequence[str]], *, issuer: str) -> AuthorizationRequest:
    """Check an authorization request (RFC 6749 §4.1.1, RFC 7636 §4.3, RFC 8707). Until the client and its
    redirect URI are known good, an error is for the person (no redirect_uri on it); after that, for the client."""
    first = _single(params, ("client_id", "redirect_uri", "state"))
    client_id = first.get("client_id", "")
    client = (OAuthClient.objects.filter(client_id=client_id, enabled=True).first()
              if _CLIENT_ID.fullmatch(client_id) else None)
    if client is None:
        raise OAuthError("invalid_client", "no such client (or it was disabled): the application that sent you here "
                         "is not registered")
    if "redirect_uri" in first:
        if not _redirect_matched(client, first["redirect_uri"]):
            raise OAuthError("invalid_request", "the redirect URI is not one this client registered")
        redirect_uri, given = first["redirect_uri"], True
    elif len(client.redirect_uris) == 1:
        redirect_uri, given = client.redirect_uris[0], False
    else:
        raise OAuthError("invalid_request", "the request names no redirect URI and the client registered several")
    state = first.get("state")
    if state is not None and (len(state) > MAX_STATE_CHARS or not state.isprintable()):
        raise OAuthError("invalid_request", f"state: printable, at most {MAX_STATE_CHARS} characters")

    def refused(code: str, message: str) -> OAuthError:
        return OAuthError(code, message, redirect_uri=redirect_uri, state=state)

    try:
        rest = _single(params, AUTHORIZE_PARAMS)
    except OAuthError as exc:
        raise refused(exc.code, exc.message) from None
    if rest.get("response_type") != "code":
        raise refused("unsupported_response_type" if "response_type" in rest else "invalid_request",
                      "response_type must be code")
    if "authorization_code" not in client.grant_types:
        raise refused("unauthorized_client", "this client did not register for the authorization code grant")
    if "code_challenge" not in rest:
        raise refused("invalid_request", "code_challenge is required (PKCE with S256)")
    if rest.get("code_challenge_method") != "S256":
        raise refused("invalid_request", "code_challenge_method must be S256 (plain is not accepted)")
    if not _CHALLENGE.fullmatch(rest["code_challenge"]):
        raise refused("invalid_request", "code_challenge is the base64url SHA-256 of the verifier (43 characters)")
    try:
        scope = scope_granted(rest.get("scope"))
        resource = resource_checked(rest.get("resource"), issuer)
    except OAuthError as exc:
        raise refused(exc.code, exc.message) from None
    return AuthorizationRequest(client=client, redirect_uri=redirect_uri, redirect_uri_given=given, state=state,
                                code_challenge=rest["code_challenge"], scope=scope, resource=resource, issuer=issuer,
                                params=rest)


def agents_person_may_act_for(person) -> QuerySet[Agent]:
    """The agents `person` may let a client act as: every enabled agent for someone who may mint its tokens."""
    if not person_may(person, ACT_AS_AGENT):
        return Agent.objects.none()
    return Agent.objects.filter(enabled=True).order_by("key")


def authorization_denied(request: AuthorizationRequest) -> str:
    """Where the person's refusal goes: back to the client with access_denied."""
    return authorization_redirect(request.redirect_uri, {
        "error": "access_denied", "error_description": "the person declined", "state": request.state,
        "iss": request.issuer})


def authorization_error_redirect(error: OAuthError, issuer: str) -> str:
    """Where an error about a request with a good client and redirect URI goes (RFC 6749 §4.1.2.1)."""
    return authorization_redirect(error.redirect_uri or "", {
        "error": error.code, "error_description": error.message, "state": error.state, "iss": issuer})


@transaction.atomic
def authorization_approve(*, request: AuthorizationRequest, person, agent_key: Any) -> str:
    """The person lets the client act as one agent they may act for: a single-use code valid CODE_SECONDS, bound
    to all of the request. Returns where the browser goes next (the client's redirect URI with code, state, iss)."""
    agent = (agents_person_may_act_for(person).filter(key=agent_key).first()
             if isinstance(agent_key, str) and _printable(agent_key, MAX_ID_CHARS) else None)
    if agent is None:
        raise OAuthError("invalid_request", "choose one of the agents you may act for")
    now = timezone.now()
    OAuthAuthorizationCode.objects.filter(created_at__lt=now - SPENT_CODES_KEPT).delete()
    plain, prefix = _mint(CODE_KIND)
    OAuthAuthorizationCode.objects.create(
        client=request.client, agent=agent, person=person, prefix=prefix, code_hash=_digest(plain),
        redirect_uri=request.redirect_uri, redirect_uri_given=request.redirect_uri_given,
        code_challenge=request.code_challenge, scope=request.scope, resource=request.resource,
        expires_at=now + timedelta(seconds=CODE_SECONDS))
    OAuthClient.objects.filter(pk=request.client.pk).update(last_used_at=now)
    return authorization_redirect(request.redirect_uri, {"code": plain, "state": request.state, "iss": request.issuer})


# --- the token endpoint --------------------------------------------------------------------------------------------
def token_request(*, params: Mapping[str, Sequence[str]], authorization: str, issuer: str) -> dict[str, Any]:
    """A token request (RFC 6749 §4.1.3 and §6): the client authenticated, then its code or refresh token
    exchanged. Returns the token answer (RFC 6749 §5.1)."""
    single = _single(params)
    client = client_authenticate(single, authorization)
    grant_type = single.get("grant_type")
    if grant_type is None:
        raise OAuthError("invalid_request", "grant_type is required")
    if grant_type not in GRANT_TYPES:
        raise OAuthError("unsupported_grant_type", "grant_type: authorization_code or refresh_token")
    if grant_type not in client.grant_types:
        raise OAuthError("unauthorized_client", f"this client did not register for {grant_type}")
    if grant_type == "authorization_code":
        return _code_exchange(client, single, issuer)
    return _refresh(client, single, issuer)


def _pkce_matches(challenge: str, verifier: str) -> bool:
    computed = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return hmac.compare_digest(computed, challenge)


def _code_exchange(client: OAuthClient, params: dict[str, str], issuer: str) -> dict[str, Any]:
    """Spend a code. Any failure past finding it spends it too; a spent code presented again revokes the grant it
    produced (RFC 6749 §10.5). The spending commits even when the request is refused (hence no raise inside)."""
    raw, verifier = params.get("code"), params.get("code_verifier")
    if raw is None:
        raise OAuthError("invalid_request", "code is required")
    if verifier is None:
        raise OAuthError("invalid_request", "code_verifier is required (PKCE)")
    if not _VERIFIER.fullmatch(verifier):
        raise OAuthError("invalid_request", "code_verifier: 43 to 128 characters of A-Z a-z 0-9 - . _ ~")
    resource = params.get("resource")
    prefix = _prefix_of(CODE_KIND, raw)
    failure: OAuthError | None = None
    answer: dict[str, Any] = {}
    with transaction.atomic():
        code = (OAuthAuthorizationCode.objects.select_for_update(of=("self",))
                .select_related("agent", "client", "person").filter(prefix=prefix).first()) if prefix else None
        now = timezone.now()
        if code is None or not _matches(code.code_hash, raw) or code.client_id != client.pk:
            failure = OAuthError("invalid_grant", CODE_REFUSED)
        elif code.used_at is not None:
            failure = OAuthError("invalid_grant", CODE_REFUSED)
            if code.grant_id is not None:
                grant_revoke(grant=OAuthGrant.objects.get(pk=code.grant_id), reason="its authorization code was replayed")
                logger.warning("authorization code of client %s replayed: grant %s revoked", client.client_id, code.grant_id)
        else:
            code.used_at = now
            code.save(update_fields=["used_at"])
            failure = _code_problem(code, params, verifier, resource, issuer, now)
            if failure is None:
                grant = OAuthGrant.objects.create(client=client, agent=code.agent, person=code.person, scope=code.scope,
                                                  resource=code.resource)
                OAuthAuthorizationCode.objects.filter(pk=code.pk).update(grant=grant)
                audit_event_record(kind="oauth.grant_created", actor=audit_actor(code.person),
                                   target=f"agent:{code.agent.key}",
                                   details={"grant": grant.pk, "client_id": client.client_id, "client": client.name,
                                            "scope": grant.scope, "resource": grant.resource})
                answer = _tokens_issue(grant, now)
    if failure is not None:
        raise failure
    return answer


def _code_problem(code: OAuthAuthorizationCode, params: dict[str, str], verifier: str, resource: str | None,
                  issuer: str, now: datetime) -> OAuthError | None:
    """What is wrong with exchanging this (just spent, unexpired-or-not) code, or None."""
    if code.expires_at <= now:
        return OAuthError("invalid_grant", CODE_REFUSED)
    redirect_uri = params.get("redirect_uri")
    if (code.redirect_uri_given or redirect_uri is not None) and redirect_uri != code.redirect_uri:
        return OAuthError("invalid_grant", "redirect_uri differs from the authorization request's")
    if not _pkce_matches(code.code_challenge, verifier):
        return OAuthError("invalid_grant", "code_verifier does not match the code_challenge")
    return _resource_problem(resource, code.resource, issuer) or _grantor_problem(code.agent, code.person)


def _resource_problem(resource: str | None, bound: str, issuer: str) -> OAuthError | None:
    """A resource named at the token endpoint must be the one the grant is bound to (none bound: one of ours)."""
    if resource is None:
        return None
    canonical = metadata.resource_canonical(resource)
    if canonical is not None and (canonical == bound if bound else canonical in metadata.accepted_resources(issuer)):
        return None
    return OAuthError("invalid_target", "resource differs from the one authorized")


def _grantor_problem(agent: Agent, person) -> OAuthError | None:
    if not agent.enabled:
        return OAuthError("invalid_grant", "the agent is disabled")
    if person is None or not person_may(person, ACT_AS_AGENT):
        return OAuthError("invalid_grant", "the person who approved may no longer act for agents")
    return None


def _tokens_issue(grant: OAuthGrant, now: datetime) -> dict[str, Any]:
    """A new access token (an agent token expiring after GOCLAW_OAUTH_ACCESS_TOKEN_SECONDS, named after the client,
    created by the person) and, for a client that registered for it, a new refresh token. Inside the caller's
    transaction."""
    seconds = settings.OAUTH_ACCESS_TOKEN_SECONDS
    token, plain = token_issue(agent=grant.agent, name=f"{OAUTH_TOKEN_NAME_PREFIX}{grant.client.name}"[:100], actor=grant.person)
    AgentToken.objects.filter(pk=token.pk).update(expires_at=now + timedelta(seconds=seconds))
    grant.tokens.add(token)
    grant.access_token = token
    grant.save(update_fields=["access_token"])
    answer: dict[str, Any] = {"access_token": plain, "token_type": "Bearer", "expires_in": seconds, "scope": grant.scope}
    if "refresh_token" in grant.client.grant_types:
        refresh, prefix = _mint(REFRESH_KIND)
        OAuthRefreshToken.objects.create(grant=grant, prefix=prefix, token_hash=_digest(refresh),
                                         expires_at=now + timedelta(days=settings.OAUTH_REFRESH_TOKEN_DAYS))
        answer["refresh_token"] = refresh
    return answer


def _revoked_elsewhere(grant: OAuthGrant) -> bool:
    """A person revoked (or deleted) an access token of the grant where agent tokens are managed: the grant ends."""
    return grant.access_token_id is None or grant.tokens.filter(revoked=True).exists()


def _refresh(client: OAuthClient, params: dict[str, str], issuer: str) -> dict[str, Any]:
    """Rotate a refresh token: the presented one is spent and a new pair issued. A spent one presented again
    means it leaked: the grant is revoked (reuse detection). Refusals that revoke commit first."""
    raw = params.get("refresh_token")
    if raw is None:
        raise OAuthError("invalid_request", "refresh_token is required")
    scope_granted(params.get("scope"))  # only ever the one scope: anything well-formed narrows to it
    prefix = _prefix_of(REFRESH_KIND, raw)
    failure: OAuthError | None = None
    answer: dict[str, Any] = {}
    with transaction.atomic():
        row = (OAuthRefreshToken.objects.select_for_update(of=("self",))
               .select_related("grant__agent", "grant__client", "grant__person").filter(prefix=prefix).first()
               ) if prefix else None
        now = timezone.now()
        grant = row.grant if row is not None else None
        invalid = OAuthError("invalid_grant", "unknown, expired or revoked refresh token")
        if row is None or not _matches(row.token_hash, raw) or grant.client_id != client.pk or grant.revoked:
            failure = invalid
        elif row.used_at is not None:
            failure = invalid
            grant_revoke(grant=grant, reason="a spent refresh token was presented again")
            logger.warning("refresh token of grant %s reused: grant revoked", grant.pk)
        elif row.expires_at <= now:
            failure = invalid
        elif _revoked_elsewhere(grant):
            failure = invalid
            grant_revoke(grant=grant, reason="one of its access tokens was revoked")
        elif (problem := _grantor_problem(grant.agent, grant.person)) is not None:
            failure = problem
            if grant.agent.enabled:  # the person lost the right: the grant ends (a disabled agent may come back)
                grant_revoke(grant=grant, reason="the person who approved may no longer act for agents")
        elif (problem := _resource_problem(params.get("resource"), grant.resource, issuer)) is not None:
            failure = problem
        else:
            row.used_at = now
            row.save(update_fields=["used_at"])
            _expired_tokens_drop(grant, now)
            answer = _tokens_issue(grant, now)
            OAuthGrant.objects.filter(pk=grant.pk).update(refreshed_at=now)
    if failure is not None:
        raise failure
    return answer


def _expired_tokens_drop(grant: OAuthGrant, now: datetime) -> None:
    """The grant's expired access tokens go (a refresh each hour would otherwise pile rows under the agent); the
    latest one stays, and revoked ones stay as the record of a revocation."""
    AgentToken.objects.filter(pk__in=grant.tokens.values("pk"), revoked=False, expires_at__lte=now).exclude(
        pk=grant.access_token_id).delete()


# --- revocation ----------------------------------------------------------------------------------------------------
@transaction.atomic
def grant_revoke(*, grant: OAuthGrant, reason: str, actor=None) -> bool:
    """End a grant: its access tokens are revoked (refused at once here, within a second in every process) and its
    refresh tokens refused. False when it was already revoked."""
    now = timezone.now()
    if not OAuthGrant.objects.filter(pk=grant.pk, revoked=False).update(revoked=True, revoked_at=now,
                                                                        revoked_reason=reason[:200]):
        return False
    for token in AgentToken.objects.filter(pk__in=grant.tokens.values("pk"), revoked=False):
        token_revoke(token=token)
    audit_event_record(kind="oauth.grant_revoked", actor=audit_actor(actor), target=f"agent:{grant.agent.key}",
                       details={"grant": grant.pk, "client_id": grant.client.client_id, "reason": reason})
    grant.refresh_from_db()
    return True


def _grant_of(raw: str) -> OAuthGrant | None:
    """The grant a refresh token or an active access token belongs to, or None."""
    prefix = _prefix_of(REFRESH_KIND, raw)
    if prefix is not None:
        row = OAuthRefreshToken.objects.select_related("grant").filter(prefix=prefix).first()
        return row.grant if row is not None and _matches(row.token_hash, raw) else None
    if not (_printable(raw, 200) and raw.isascii()):  # an agent token is ASCII: nothing else reaches the lookup
        return None
    token = token_authenticate(raw)
    return OAuthGrant.objects.filter(tokens=token).first() if token is not None else None


def revocation_request(*, params: Mapping[str, Sequence[str]], authorization: str) -> None:
    """RFC 7009: the client revokes a token it was issued, access or refresh; either ends the whole grant. An
    unknown token, or one issued to another client (or a static agent token), changes nothing and is not reported
    (the answer is the same 200)."""
    single = _single(params)
    client = client_authenticate(single, authorization)
    raw = single.get("token")
    if raw is None:
        raise OAuthError("invalid_request", "token is required")
    grant = _grant_of(raw)
    if grant is not None and grant.client_id == client.pk:
        grant_revoke(grant=grant, reason="revoked by the client")
