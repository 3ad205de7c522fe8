"""The OAuth server's HTTP entrypoints (docs/mcp-oauth.md): parse, call one service, render. Machine endpoints
answer JSON with the RFC's error shape and `Cache-Control: no-store`, allow any browser origin (no cookie is ever
read there: CORS cannot lend them a person's session), and never a 500 on bad input. The authorization endpoint is a
person's page: the admin login first, then the consent form (CSRF-protected)."""
from __future__ import annotations

import json
from functools import wraps

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import SuspiciousOperation
from django.http import HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect, JsonResponse
from django.template.response import TemplateResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt

from goclaw.authz import person_required
from tools_app.oauth import metadata, services
from tools_app.oauth.errors import OAuthError

MAX_REGISTRATION_BYTES = 64 * 1024
CORS_HEADERS = {"Access-Control-Allow-Origin": "*",
                "Access-Control-Allow-Headers": "Authorization, Content-Type, MCP-Protocol-Version"}


def issuer_of(request) -> str:
    """This server's public base: GOCLAW_PUBLIC_URL, else the scheme and the Host Django validated."""
    return settings.PUBLIC_URL or f"{request.scheme}://{request.get_host()}"


def _json(body, status: int = 200, headers: dict | None = None) -> HttpResponse:
    response = JsonResponse(body, status=status) if body is not None else HttpResponse(status=status)
    response["Cache-Control"] = "no-store"
    response["Pragma"] = "no-cache"
    for name, value in {**CORS_HEADERS, **(headers or {})}.items():
        response[name] = value
    return response


def _refused(error: OAuthError, headers: dict | None = None) -> HttpResponse:
    return _json(error.as_oauth(), error.http_status, headers)


def _machine(*methods: str):
    """A machine endpoint answering `methods` (and CORS preflights); any other method: 405 in the OAuth error shape."""
    allowed = ", ".join([*methods, "OPTIONS"])

    def decorator(view):
        @csrf_exempt
        @wraps(view)
        def endpoint(request, *args, **kwargs):
            if request.method == "OPTIONS":
                return _json(None, 204, {"Access-Control-Allow-Methods": allowed, "Access-Control-Max-Age": "600"})
            if request.method not in methods:
                return _refused(OAuthError("invalid_request", f"use {' or '.join(methods)}", http_status=405),
                                {"Allow": allowed})
            return view(request, *args, **kwargs)
        return endpoint
    return decorator


@_machine("GET", "HEAD")
def protected_resource(request):
    """RFC 9728: the MCP endpoint's protected-resource metadata (at the root and at /mcp's path-aware location)."""
    return _json(metadata.protected_resource_metadata(issuer_of(request)))


@_machine("GET", "HEAD")
def authorization_server(request):
    """RFC 8414: the authorization server's metadata."""
    return _json(metadata.authorization_server_metadata(issuer_of(request)))


@_machine("POST")
def register(request):
    """RFC 7591 dynamic client registration: a JSON object of client metadata in, the client (and its secret,
    shown once) out."""
    if request.content_type != "application/json":
        return _refused(OAuthError("invalid_client_metadata", "send the client metadata as application/json"))
    try:
        if int(request.META.get("CONTENT_LENGTH") or 0) > MAX_REGISTRATION_BYTES:
            raise OAuthError("invalid_client_metadata", f"the body has at most {MAX_REGISTRATION_BYTES} bytes",
                             http_status=413)
        data = json.loads(request.body)
        client, secret = services.client_register(data=data, dynamic=True)
    except OAuthError as exc:
        return _refused(exc)
    except (ValueError, RecursionError, SuspiciousOperation):
        return _refused(OAuthError("invalid_client_metadata", "the body is not a JSON object"))
    return _json(services.client_registration_answer(client, secret), 201)


def _form(request) -> dict[str, list[str]]:
    """The form parameters of a token or revocation request (RFC 6749 §3.2: form-encoded only)."""
    if request.content_type != "application/x-www-form-urlencoded":
        raise OAuthError("invalid_request", "send application/x-www-form-urlencoded")
    try:
        return dict(request.POST.lists())
    except SuspiciousOperation:  # too large, too many fields
        raise OAuthError("invalid_request", "the request body is too large") from None


def _basic_challenge(request, error: OAuthError) -> dict:
    """RFC 6749 §5.2: a client that authenticated with HTTP Basic and failed gets the Basic challenge."""
    sent_basic = request.headers.get("Authorization", "").lower().startswith("basic")
    return {"WWW-Authenticate": 'Basic realm="goclaw"'} if error.code == "invalid_client" and sent_basic else {}


@_machine("POST")
def token(request):
    """The token endpoint: an authorization code (with its PKCE verifier) or a refresh token in, tokens out."""
    try:
        answer = services.token_request(params=_form(request), authorization=request.headers.get("Authorization", ""),
                                        issuer=issuer_of(request))
    except OAuthError as exc:
        return _refused(exc, _basic_challenge(request, exc))
    return _json(answer)


@_machine("POST")
def revoke(request):
    """RFC 7009: revoke an access or refresh token (the whole grant goes); 200 whatever the token was."""
    try:
        services.revocation_request(params=_form(request), authorization=request.headers.get("Authorization", ""))
    except OAuthError as exc:
        return _refused(exc, _basic_challenge(request, exc))
    return _json(None, 200)


# --- the person's page ---------------------------------------------------------------------------------------------
def _page(request, template: str, context: dict, status: int = 200) -> TemplateResponse:
    return TemplateResponse(request, template, {**admin.site.each_context(request), **context}, status=status)


def _consent(request, authorization: services.AuthorizationRequest, error: str = "", status: int = 200):
    return _page(request, "oauth/consent.html", {
        "title": f"Authorize {authorization.client.name}", "authorization": authorization, "error": error,
        "agents": services.agents_person_may_act_for(request.user), "scopes": metadata.SCOPES,
        "access_minutes": settings.OAUTH_ACCESS_TOKEN_SECONDS // 60}, status)


@never_cache
@person_required(services.ACT_AS_AGENT)
def authorize(request):
    """The authorization endpoint: the request checked, the consent page shown (GET), the decision taken (POST).
    Errors go back to the client only once its redirect URI is known good; before that the person sees them."""
    if request.method not in ("GET", "POST"):
        return HttpResponseNotAllowed(["GET", "POST"])
    issuer = issuer_of(request)
    source = request.GET if request.method == "GET" else request.POST
    try:
        authorization = services.authorization_request_parse(dict(source.lists()), issuer=issuer)
    except OAuthError as exc:
        if exc.redirect_uri:
            return HttpResponseRedirect(services.authorization_error_redirect(exc, issuer))
        return _page(request, "oauth/error.html", {"title": "This authorization request is not valid", "error": exc}, 400)
    if request.method == "GET":
        return _consent(request, authorization)
    decision = (request.POST.get("decision") or "").lower()  # the buttons say "Approve" / "Deny"
    if decision == "deny":
        return HttpResponseRedirect(services.authorization_denied(authorization))
    if decision != "approve":
        return _consent(request, authorization, "Approve or deny the request.", 400)
    try:
        return HttpResponseRedirect(services.authorization_approve(
            request=authorization, person=request.user, agent_key=request.POST.get("agent")))
    except OAuthError as exc:
        return _consent(request, authorization, exc.message, 400)
