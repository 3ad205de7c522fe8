"""goclaw as an OAuth 2.1 authorization server for MCP clients (docs/mcp-oauth.md): the metadata documents, dynamic
client registration, the person's consent, the code and refresh flows with every refusal a hostile client could
provoke, revocation (the access token is an agent token: it stops working on the API at once), the admin screens,
and one end-to-end run of the MCP SDK's own OAuth client against `manage.py up`."""
from __future__ import annotations

import base64
import hashlib
import html
import json
import re
import secrets
from datetime import timedelta
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.test import Client
from django.utils import timezone

from tests.factories import make_agent, make_person, permission_objects
from tools_app.models import AgentToken, AuditEvent
from tools_app.models.oauth import OAuthAuthorizationCode, OAuthClient, OAuthGrant, OAuthRefreshToken
from tools_app.oauth import metadata
from tools_app.services.agents import agent_update, token_issue, token_revoke

ACT = "tools_app.add_agenttoken"
REDIRECT = "http://127.0.0.1:33418/callback"


# --- helpers -------------------------------------------------------------------------------------------------------
def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


def register(**metadata_fields) -> dict:
    body = {"client_name": "Test client", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"], **metadata_fields}
    answer = Client().post("/oauth/register", json.dumps(body), content_type="application/json")
    assert answer.status_code == 201, answer.content
    return answer.json()


def logged_in(person) -> Client:
    browser = Client()
    browser.force_login(person)
    return browser


def authorize_params(client_info: dict, challenge: str, **overrides) -> dict:
    params = {"response_type": "code", "client_id": client_info["client_id"], "redirect_uri": REDIRECT,
              "state": "st-" + secrets.token_hex(4), "code_challenge": challenge, "code_challenge_method": "S256",
              "scope": "agent", "resource": "http://testserver/mcp"}
    params.update(overrides)
    return {k: v for k, v in params.items() if v is not None}


def redirect_query(response) -> dict[str, str]:
    assert response.status_code == 302, (response.status_code, response.content[:500])
    location = response["Location"]
    assert location.startswith(REDIRECT.split("?")[0].rsplit(":", 1)[0]), location
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


def approve(browser: Client, params: dict, agent) -> dict[str, str]:
    """The person approves on the consent form (posting back what the page holds); the query the client receives."""
    page = browser.get("/oauth/authorize", params)
    assert page.status_code == 200, page.content[:500]
    hidden = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', page.content.decode()))
    form = {name: html.unescape(value) for name, value in hidden.items() if name != "csrfmiddlewaretoken"}
    return redirect_query(browser.post("/oauth/authorize", {**form, "agent": agent.key, "decision": "approve"}))


def token_post(data: dict, **headers):
    return Client().post("/oauth/token", urlencode(data), content_type="application/x-www-form-urlencoded", **headers)


def exchange(client_info: dict, code: str, verifier: str, **extra):
    return token_post({"grant_type": "authorization_code", "code": code, "code_verifier": verifier,
                       "redirect_uri": REDIRECT, "client_id": client_info["client_id"], **extra})


def refresh(client_info: dict, refresh_token: str, **extra):
    return token_post({"grant_type": "refresh_token", "refresh_token": refresh_token,
                       "client_id": client_info["client_id"], **extra})


def api_status(token: str) -> int:
    return Client().get("/api/v1/tools", HTTP_AUTHORIZATION=f"Bearer {token}").status_code


def error_of(response) -> str:
    assert response["Content-Type"].startswith("application/json"), response.content[:300]
    return response.json()["error"]


@pytest.fixture
def person():
    return make_person(ACT)


@pytest.fixture
def agent():
    return make_agent()


@pytest.fixture
def tokens(person, agent):
    """A public client registered, approved by the person for the agent, its code exchanged: (client, answer)."""
    client_info = register()
    verifier, challenge = pkce()
    query = approve(logged_in(person), authorize_params(client_info, challenge), agent)
    answer = exchange(client_info, query["code"], verifier)
    assert answer.status_code == 200, answer.content
    return client_info, answer.json()


# --- metadata --------------------------------------------------------------------------------------------------------
@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"])
def test_protected_resource_metadata_names_the_mcp_endpoint_and_this_server(path):
    from mcp.shared.auth import ProtectedResourceMetadata

    answer = Client().get(path)
    assert answer.status_code == 200
    body = answer.json()
    assert body["resource"] == "http://testserver/mcp" and body["authorization_servers"] == ["http://testserver"]
    assert body["bearer_methods_supported"] == ["header"] and body["scopes_supported"] == ["agent"]
    ProtectedResourceMetadata.model_validate(body)  # what the MCP SDK's client reads


@pytest.mark.django_db
def test_authorization_server_metadata_offers_the_code_flow_with_s256_only():
    from mcp.shared.auth import OAuthMetadata

    body = Client().get("/.well-known/oauth-authorization-server").json()
    assert body["issuer"] == "http://testserver"
    assert body["authorization_endpoint"] == "http://testserver/oauth/authorize"
    assert body["token_endpoint"] == "http://testserver/oauth/token"
    assert body["registration_endpoint"] == "http://testserver/oauth/register"
    assert body["revocation_endpoint"] == "http://testserver/oauth/revoke"
    assert body["code_challenge_methods_supported"] == ["S256"] and body["response_types_supported"] == ["code"]
    assert body["grant_types_supported"] == ["authorization_code", "refresh_token"]
    assert set(body["token_endpoint_auth_methods_supported"]) == {"none", "client_secret_post", "client_secret_basic"}
    assert str(OAuthMetadata.model_validate(body).issuer) == "http://testserver"  # compared as a string by the SDK


@pytest.mark.django_db
def test_the_public_url_setting_is_the_issuer_whatever_host_was_asked(settings):
    settings.PUBLIC_URL = "https://goclaw.example.org"
    assert Client().get("/.well-known/oauth-protected-resource/mcp").json() == {
        "resource": "https://goclaw.example.org/mcp", "authorization_servers": ["https://goclaw.example.org"],
        "bearer_methods_supported": ["header"], "scopes_supported": ["agent"], "resource_name": "goclaw MCP server"}
    assert Client().get("/.well-known/oauth-authorization-server").json()["issuer"] == "https://goclaw.example.org"


def test_the_metadata_functions_need_no_request(settings):
    settings.PUBLIC_URL, settings.PORT, settings.MCP_PORT = "", 8000, 8002
    assert metadata.www_authenticate_value("http://127.0.0.1:8002") == (
        'Bearer realm="goclaw", resource_metadata="http://127.0.0.1:8002/.well-known/oauth-protected-resource/mcp", '
        'scope="agent"')
    # the MCP port's own document names the authorization server on the main port
    assert metadata.protected_resource_metadata("http://127.0.0.1:8002")["authorization_servers"] == ["http://127.0.0.1:8000"]
    assert metadata.protected_resource_metadata("http://127.0.0.1:8002")["resource"] == "http://127.0.0.1:8002/mcp"
    assert metadata.protected_resource_metadata("http://localhost:8000/")["authorization_servers"] == ["http://localhost:8000"]
    assert 'error="invalid_token"' in metadata.www_authenticate_value("http://x", error="invalid_token")
    assert metadata.resource_base_url("http", "127.0.0.1:8002") == "http://127.0.0.1:8002"
    settings.PUBLIC_URL = "https://goclaw.example.org"
    assert metadata.resource_base_url("http", "GOCLAW.example.org") == "https://goclaw.example.org"  # proxied
    assert metadata.resource_base_url("http", "10.0.0.5:8002") == "http://10.0.0.5:8002"  # reached directly
    assert metadata.protected_resource_metadata("http://10.0.0.5:8002")["authorization_servers"] == [
        "https://goclaw.example.org"]


# --- registration ---------------------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_a_public_client_registers_without_a_secret_and_a_confidential_one_gets_a_secret_kept_only_hashed():
    public = register()
    assert "client_secret" not in public and public["token_endpoint_auth_method"] == "none"
    confidential = register(token_endpoint_auth_method="client_secret_post")
    secret = confidential["client_secret"]
    row = OAuthClient.objects.get(client_id=confidential["client_id"])
    assert row.dynamic and row.secret_hash == hashlib.sha256(secret.encode()).hexdigest() and secret not in str(
        OAuthClient.objects.filter(pk=row.pk).values().get())
    defaulted = register(token_endpoint_auth_method=None)  # RFC 7591's default: client_secret_basic
    assert defaulted["token_endpoint_auth_method"] == "client_secret_basic" and defaulted["client_secret"]


HOSTILE_REDIRECTS = {
    "http on a public host": "http://example.com/cb",
    "a fragment": "https://app.example.com/cb#x",
    "javascript": "javascript:alert(1)",
    "user information": "https://good.example@evil.example/cb",
    "another scheme": "ftp://example.com/cb",
    "a relative path": "/cb",
    "a backslash": "https://app.example.com\\@evil.example/cb",
    "a look-alike loopback": "http://127.0.0.1.evil.example/cb",
    "a space": "https://app.example.com/a b",
    "a control character": "https://app.example.com/\x00",
    "non-ASCII": "https://аpp.example.com/cb",
    "too long": "https://app.example.com/" + "a" * 3000,
    "a custom scheme": "myapp://callback",
    "a bad port": "https://app.example.com:99999/cb",
}


@pytest.mark.django_db
@pytest.mark.parametrize("uri", HOSTILE_REDIRECTS.values(), ids=HOSTILE_REDIRECTS.keys())
def test_registration_refuses_redirect_uris_that_are_not_https_or_loopback_http(uri):
    answer = Client().post("/oauth/register", json.dumps({"redirect_uris": [REDIRECT, uri]}),
                           content_type="application/json")
    assert answer.status_code == 400 and error_of(answer) == "invalid_redirect_uri", answer.content
    assert not OAuthClient.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("uri", ["http://localhost:8080/cb", "http://[::1]:9/cb", "https://app.example.com/cb?x=1"])
def test_registration_accepts_https_and_loopback_http(uri):
    assert register(redirect_uris=[uri])["redirect_uris"] == [uri]


BAD_REGISTRATIONS = {
    "no redirect uris": {"client_name": "x"},
    "empty list": {"redirect_uris": []},
    "too many": {"redirect_uris": [f"https://app.example.com/{i}" for i in range(11)]},
    "not a list": {"redirect_uris": REDIRECT},
    "not strings": {"redirect_uris": [{"uri": REDIRECT}]},
    "an unknown auth method": {"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "private_key_jwt"},
    "the implicit grant": {"redirect_uris": [REDIRECT], "grant_types": ["implicit"]},
    "no code grant": {"redirect_uris": [REDIRECT], "grant_types": ["refresh_token"]},
    "a token response": {"redirect_uris": [REDIRECT], "response_types": ["token"]},
    "a NUL in the name": {"redirect_uris": [REDIRECT], "client_name": "evil\x00name"},
    "a lone surrogate": {"redirect_uris": [REDIRECT], "client_name": "\ud800"},
    "a long name": {"redirect_uris": [REDIRECT], "client_name": "n" * 500},
    "a name that is not text": {"redirect_uris": [REDIRECT], "client_name": ["x"]},
    "a scope with controls": {"redirect_uris": [REDIRECT], "scope": "agent\nadmin"},
}


@pytest.mark.django_db
@pytest.mark.parametrize("body", BAD_REGISTRATIONS.values(), ids=BAD_REGISTRATIONS.keys())
def test_registration_refuses_malformed_metadata_with_the_rfc_error(body):
    answer = Client().post("/oauth/register", json.dumps(body), content_type="application/json")
    assert answer.status_code == 400 and error_of(answer) in ("invalid_redirect_uri", "invalid_client_metadata")
    assert answer["Cache-Control"] == "no-store"


@pytest.mark.django_db
@pytest.mark.parametrize("raw, content_type", [("{not json", "application/json"), ("[1, 2]", "application/json"),
                                               ("[" * 50_000, "application/json"), ("redirect_uris=x", "text/plain"),
                                               ("1" * 5000, "application/json")])
def test_registration_never_fails_with_a_500_on_garbage(raw, content_type):
    answer = Client().post("/oauth/register", raw, content_type=content_type)
    assert answer.status_code == 400 and error_of(answer) == "invalid_client_metadata"


@pytest.mark.django_db
def test_a_huge_registration_is_refused_before_it_is_read():
    answer = Client().post("/oauth/register", json.dumps({"redirect_uris": [REDIRECT], "x": "a" * 100_000}),
                           content_type="application/json")
    assert answer.status_code == 413


@pytest.mark.django_db
def test_dynamic_registration_can_be_switched_off_and_is_then_not_advertised(settings):
    settings.OAUTH_DYNAMIC_REGISTRATION = False
    answer = Client().post("/oauth/register", json.dumps({"redirect_uris": [REDIRECT]}), content_type="application/json")
    assert answer.status_code == 403 and error_of(answer) == "access_denied"
    assert "registration_endpoint" not in Client().get("/.well-known/oauth-authorization-server").json()


@pytest.mark.django_db
def test_unapproved_registrations_are_bounded_and_stale_ones_removed(settings):
    settings.OAUTH_MAX_UNUSED_CLIENTS = 2
    first, _ = register(), register()
    answer = Client().post("/oauth/register", json.dumps({"redirect_uris": [REDIRECT]}), content_type="application/json")
    assert answer.status_code == 429 and error_of(answer) == "temporarily_unavailable"
    OAuthClient.objects.filter(client_id=first["client_id"]).update(created_at=timezone.now() - timedelta(days=2))
    register()  # the day-old unused one made room
    assert not OAuthClient.objects.filter(client_id=first["client_id"]).exists()


# --- the authorization endpoint ----------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_someone_not_logged_in_is_sent_to_the_admin_login_and_back(agent):
    _, challenge = pkce()
    params = authorize_params(register(), challenge)
    answer = Client().get("/oauth/authorize", params)
    assert answer.status_code == 302 and answer["Location"].startswith("/admin/login/?next=")
    assert parse_qs(urlsplit(answer["Location"]).query)["next"][0].startswith("/oauth/authorize?")


@pytest.mark.django_db
def test_a_person_who_may_not_mint_agent_tokens_is_refused(agent):
    _, challenge = pkce()
    params = authorize_params(register(), challenge)
    assert logged_in(make_person("tools_app.view_agent")).get("/oauth/authorize", params).status_code == 403
    refused = logged_in(make_person("tools_app.view_agent")).post("/oauth/authorize", {**params, "agent": agent.key,
                                                                                        "decision": "approve"})
    assert refused.status_code == 403 and not OAuthAuthorizationCode.objects.exists()


@pytest.mark.django_db
def test_the_consent_page_names_the_client_and_its_redirect_host_as_text_and_lists_enabled_agents(person):
    enabled, disabled = make_agent(display_name="Support bot"), make_agent(enabled=False)
    client_info = register(client_name='<script>alert("x")</script>Evil', redirect_uris=["https://cb.example.net/done"])
    _, challenge = pkce()
    page = logged_in(person).get("/oauth/authorize", authorize_params(
        client_info, challenge, redirect_uri="https://cb.example.net/done"))
    text = page.content.decode()
    assert page.status_code == 200 and page["Cache-Control"].startswith("max-age=0")
    assert page["X-Frame-Options"] == "DENY"  # no page may frame the consent buttons (clickjacking)
    assert "&lt;script&gt;" in text and '<script>alert("x")' not in text
    assert '<code id="oauth-redirect-host">cb.example.net</code>' in text
    assert "its own claim" in text  # a dynamically registered name is flagged as unverified
    assert f'value="{enabled.key}"' in text and f'value="{disabled.key}"' not in text
    assert 'extends' not in text and 'id="header"' in text  # the admin's own frame


@pytest.mark.django_db
@pytest.mark.parametrize("redirect_uri", ["https://evil.example/cb", "http://127.0.0.1:33418/other",
                                          "http://localhost:33418/callback", REDIRECT + "/..", REDIRECT + "#frag",
                                          "http://127.0.0.1:33418/callback?extra=1"])
def test_an_unregistered_redirect_uri_gets_an_error_page_never_a_redirect(person, redirect_uri):
    _, challenge = pkce()
    answer = logged_in(person).get("/oauth/authorize", authorize_params(register(), challenge, redirect_uri=redirect_uri))
    assert answer.status_code == 400 and not answer.has_header("Location")
    assert "Nothing was" in answer.content.decode()


@pytest.mark.django_db
def test_a_loopback_redirect_uri_may_use_another_port(person, agent):
    client_info = register()
    verifier, challenge = pkce()
    other_port = "http://127.0.0.1:50123/callback"
    page = logged_in(person).get("/oauth/authorize", authorize_params(client_info, challenge, redirect_uri=other_port))
    assert page.status_code == 200
    answer = logged_in(person).post("/oauth/authorize", {**authorize_params(client_info, challenge, redirect_uri=other_port),
                                                          "agent": agent.key, "decision": "approve"})
    assert answer["Location"].startswith(other_port + "?code=")


@pytest.mark.django_db
def test_an_unknown_or_disabled_client_gets_an_error_page(person):
    _, challenge = pkce()
    assert logged_in(person).get("/oauth/authorize", authorize_params({"client_id": "gcci_nope"}, challenge)).status_code == 400
    client_info = register()
    OAuthClient.objects.filter(client_id=client_info["client_id"]).update(enabled=False)
    answer = logged_in(person).get("/oauth/authorize", authorize_params(client_info, challenge))
    assert answer.status_code == 400 and not answer.has_header("Location")
    assert logged_in(person).get("/oauth/authorize", {"client_id": "x\x00y"}).status_code == 400


@pytest.mark.django_db
@pytest.mark.parametrize("overrides, error", [
    ({"code_challenge": None}, "invalid_request"),
    ({"code_challenge_method": "plain"}, "invalid_request"),
    ({"code_challenge_method": None}, "invalid_request"),
    ({"code_challenge": "too-short"}, "invalid_request"),
    ({"response_type": "token"}, "unsupported_response_type"),
    ({"resource": "https://other.example/mcp"}, "invalid_target"),
    ({"resource": "http://testserver/api"}, "invalid_target"),
    ({"scope": "agent\tadmin"}, "invalid_scope"),
])
def test_a_bad_request_from_a_known_client_is_answered_to_its_redirect_uri_with_the_state(person, overrides, error):
    _, challenge = pkce()
    params = authorize_params(register(), challenge, **overrides)
    query = redirect_query(logged_in(person).get("/oauth/authorize", params))
    assert query["error"] == error and query["state"] == params["state"] and query["iss"] == "http://testserver"
    assert "code" not in query


@pytest.mark.django_db
@pytest.mark.parametrize("field", ["state", "resource", "scope", "code_challenge", "redirect_uri", "response_type",
                                   "code_challenge_method", "client_id"])
def test_control_characters_in_any_authorization_parameter_are_refused_not_a_500(person, agent, field):
    client_info = register()
    _, challenge = pkce()
    params = authorize_params(client_info, challenge)
    params[field] = (params.get(field) or "") + "\x00\x7f"
    for method in ("get", "post"):
        answer = getattr(logged_in(person), method)("/oauth/authorize", {**params, "agent": agent.key, "decision": "approve"})
        assert answer.status_code in (302, 400), (field, answer.status_code)
        assert "code=" not in answer.get("Location", "")


@pytest.mark.django_db
def test_a_repeated_parameter_is_refused(person):
    _, challenge = pkce()
    params = authorize_params(register(), challenge)
    query = logged_in(person).get("/oauth/authorize?" + urlencode(params) + "&code_challenge_method=plain")
    assert redirect_query(query)["error"] == "invalid_request"
    twice = logged_in(person).get("/oauth/authorize?" + urlencode(params) + "&redirect_uri=https%3A%2F%2Fevil.example")
    assert twice.status_code == 400 and not twice.has_header("Location")


@pytest.mark.django_db
def test_the_person_denies_and_the_client_hears_access_denied(person, agent):
    _, challenge = pkce()
    params = authorize_params(register(), challenge)
    query = redirect_query(logged_in(person).post("/oauth/authorize", {**params, "decision": "deny"}))
    assert query == {"error": "access_denied", "error_description": "the person declined", "state": params["state"],
                     "iss": "http://testserver"}
    assert not OAuthAuthorizationCode.objects.exists()


@pytest.mark.django_db
def test_approving_needs_an_enabled_agent_the_person_chose_and_a_csrf_token(person, agent):
    _, challenge = pkce()
    params = authorize_params(register(), challenge)
    disabled = make_agent(enabled=False)
    for chosen in (disabled.key, "no-such-agent", "", "x\x00"):
        answer = logged_in(person).post("/oauth/authorize", {**params, "agent": chosen, "decision": "approve"})
        assert answer.status_code == 400 and "choose one of the agents" in answer.content.decode()
    forged = Client(enforce_csrf_checks=True)
    forged.force_login(person)
    assert forged.post("/oauth/authorize", {**params, "agent": agent.key, "decision": "approve"}).status_code == 403
    assert not OAuthAuthorizationCode.objects.exists()


# --- the token endpoint --------------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_the_code_becomes_an_agent_token_that_works_on_the_api(tokens, person, agent):
    client_info, answer = tokens
    assert answer["token_type"] == "Bearer" and answer["expires_in"] == 3600 and answer["scope"] == "agent"
    assert answer["access_token"].startswith("gclw_") and answer["refresh_token"].startswith("gcrt_")
    assert api_status(answer["access_token"]) == 200
    row = AgentToken.objects.get(prefix=answer["access_token"].split("_")[1])
    assert row.agent == agent and row.created_by == person and row.name == "oauth:Test client"
    assert timedelta(minutes=59) < row.expires_at - timezone.now() <= timedelta(hours=1)
    grant = OAuthGrant.objects.get()
    assert (grant.agent, grant.person, grant.resource, grant.access_token) == (agent, person, "http://testserver/mcp", row)
    stored = json.dumps([*OAuthRefreshToken.objects.values(), *OAuthAuthorizationCode.objects.values()], default=str)
    assert answer["refresh_token"] not in stored  # only hashes
    assert AuditEvent.objects.filter(kind="oauth.grant_created", target=f"agent:{agent.key}").exists()


@pytest.mark.django_db
def test_token_answers_are_never_cached(person, agent):
    client_info = register()
    verifier, challenge = pkce()
    query = approve(logged_in(person), authorize_params(client_info, challenge), agent)
    answer = exchange(client_info, query["code"], verifier)
    assert answer["Cache-Control"] == "no-store" and answer["Pragma"] == "no-cache"
    assert exchange(client_info, query["code"], verifier)["Cache-Control"] == "no-store"


@pytest.mark.django_db
def test_a_wrong_code_verifier_is_refused_and_spends_the_code(person, agent):
    client_info = register()
    verifier, challenge = pkce()
    code = approve(logged_in(person), authorize_params(client_info, challenge), agent)["code"]
    assert code not in json.dumps(list(OAuthAuthorizationCode.objects.values()), default=str)  # only its hash
    wrong = exchange(client_info, code, pkce()[0])
    assert wrong.status_code == 400 and error_of(wrong) == "invalid_grant"
    assert error_of(exchange(client_info, code, verifier)) == "invalid_grant"
    assert error_of(exchange(client_info, code, "short")) == "invalid_request"
    assert not AgentToken.objects.exists()


@pytest.mark.django_db
def test_a_replayed_code_is_refused_and_revokes_the_tokens_it_produced(person, agent):
    client_info = register()
    verifier, challenge = pkce()
    code = approve(logged_in(person), authorize_params(client_info, challenge), agent)["code"]
    first = exchange(client_info, code, verifier).json()
    assert api_status(first["access_token"]) == 200
    replay = exchange(client_info, code, verifier)
    assert replay.status_code == 400 and error_of(replay) == "invalid_grant"
    assert api_status(first["access_token"]) == 401
    assert error_of(refresh(client_info, first["refresh_token"])) == "invalid_grant"
    assert OAuthGrant.objects.get().revoked_reason == "its authorization code was replayed"


@pytest.mark.django_db
def test_the_redirect_uri_must_be_the_authorization_requests(person, agent):
    client_info = register(redirect_uris=[REDIRECT, "https://app.example.com/cb"])
    verifier, challenge = pkce()
    code = approve(logged_in(person), authorize_params(client_info, challenge), agent)["code"]
    answer = exchange(client_info, code, verifier, redirect_uri="https://app.example.com/cb")
    assert error_of(answer) == "invalid_grant" and "redirect_uri" in answer.json()["error_description"]


@pytest.mark.django_db
def test_another_clients_code_is_refused_and_stays_usable_by_its_own_client(person, agent):
    owner, thief = register(), register(client_name="Thief")
    verifier, challenge = pkce()
    code = approve(logged_in(person), authorize_params(owner, challenge), agent)["code"]
    assert error_of(exchange(thief, code, verifier)) == "invalid_grant"
    assert exchange(owner, code, verifier).status_code == 200


@pytest.mark.django_db
def test_an_expired_code_is_refused(person, agent):
    client_info = register()
    verifier, challenge = pkce()
    code = approve(logged_in(person), authorize_params(client_info, challenge), agent)["code"]
    OAuthAuthorizationCode.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert error_of(exchange(client_info, code, verifier)) == "invalid_grant"
    assert not AgentToken.objects.exists()


@pytest.mark.django_db
def test_a_code_is_refused_when_the_agent_was_disabled_or_the_person_lost_the_right_meanwhile(person, agent):
    client_info = register()
    verifier, challenge = pkce()
    code = approve(logged_in(person), authorize_params(client_info, challenge), agent)["code"]
    agent_update(agent=agent, enabled=False)
    assert error_of(exchange(client_info, code, verifier)) == "invalid_grant"

    other = make_agent()
    verifier, challenge = pkce()
    code = approve(logged_in(person), authorize_params(client_info, challenge), other)["code"]
    person.user_permissions.remove(*permission_objects([ACT]))
    assert error_of(exchange(client_info, code, verifier)) == "invalid_grant"
    assert not AgentToken.objects.exists()


@pytest.mark.django_db
def test_a_resource_named_at_the_token_endpoint_must_be_the_authorized_one(person, agent):
    client_info = register()
    verifier, challenge = pkce()
    code = approve(logged_in(person), authorize_params(client_info, challenge), agent)["code"]
    assert error_of(exchange(client_info, code, verifier, resource="https://other.example/mcp")) == "invalid_target"


@pytest.mark.django_db
def test_confidential_clients_must_authenticate_the_way_they_registered(person, agent):
    client_info = register(token_endpoint_auth_method="client_secret_basic")
    client_id, secret = client_info["client_id"], client_info["client_secret"]

    def code_and_verifier():
        verifier, challenge = pkce()
        return approve(logged_in(person), authorize_params(client_info, challenge), agent)["code"], verifier

    code, verifier = code_and_verifier()
    body = {"grant_type": "authorization_code", "code": code, "code_verifier": verifier, "redirect_uri": REDIRECT}
    basic = lambda s: "Basic " + base64.b64encode(f"{client_id}:{s}".encode()).decode()  # noqa: E731
    wrong = token_post(body, HTTP_AUTHORIZATION=basic("wrong-secret"))
    assert wrong.status_code == 401 and error_of(wrong) == "invalid_client"
    assert wrong["WWW-Authenticate"] == 'Basic realm="goclaw"'
    assert error_of(token_post({**body, "client_id": client_id})) == "invalid_client"  # no secret at all
    assert error_of(token_post({**body, "client_id": client_id, "client_secret": secret})) == "invalid_client"  # not its method
    both = token_post({**body, "client_secret": secret}, HTTP_AUTHORIZATION=basic(secret))
    assert error_of(both) == "invalid_request"
    assert token_post(body, HTTP_AUTHORIZATION="Basic !!!not-base64").status_code == 401
    ok = token_post(body, HTTP_AUTHORIZATION=basic(secret))
    assert ok.status_code == 200, ok.content

    posted = register(token_endpoint_auth_method="client_secret_post")
    verifier, challenge = pkce()
    code = approve(logged_in(person), authorize_params(posted, challenge), agent)["code"]
    assert exchange(posted, code, verifier, client_secret=posted["client_secret"]).status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize("data, error", [
    ({"grant_type": "password", "username": "a", "password": "b"}, "unsupported_grant_type"),
    ({"grant_type": "client_credentials"}, "unsupported_grant_type"),
    ({}, "invalid_request"),
    ({"grant_type": "authorization_code"}, "invalid_request"),
    ({"grant_type": "authorization_code", "code": "x", "code_verifier": "v" * 43}, "invalid_grant"),
    ({"grant_type": "authorization_code", "code": "gcac_" + "0" * 16 + "_x\x00", "code_verifier": "v" * 43}, "invalid_grant"),
    ({"grant_type": "authorization_code", "code": "c" * 100_000, "code_verifier": "v" * 43}, "invalid_grant"),
    ({"grant_type": "refresh_token", "refresh_token": "gcrt_zz_x"}, "invalid_grant"),
    ({"grant_type": "refresh_token"}, "invalid_request"),
])
def test_the_token_endpoint_answers_hostile_requests_with_rfc_errors(data, error):
    client_info = register()
    answer = token_post({"client_id": client_info["client_id"], **data})
    assert answer.status_code == 400 and error_of(answer) == error, answer.content


@pytest.mark.django_db
def test_the_token_endpoint_refuses_other_encodings_methods_unknown_clients_and_repeats():
    client_info = register()
    as_json = Client().post("/oauth/token", json.dumps({"grant_type": "refresh_token", "client_id": client_info["client_id"]}),
                            content_type="application/json")
    assert as_json.status_code == 400 and error_of(as_json) == "invalid_request"
    assert Client().get("/oauth/token").status_code == 405
    unknown = token_post({"grant_type": "refresh_token", "refresh_token": "x", "client_id": "gcci_unknown"})
    assert unknown.status_code == 401 and error_of(unknown) == "invalid_client"
    weird = token_post({"grant_type": "refresh_token", "refresh_token": "x", "client_id": "a\x00b"})
    assert weird.status_code == 401
    repeated = Client().post("/oauth/token", f"grant_type=refresh_token&client_id={client_info['client_id']}"
                             "&refresh_token=a&refresh_token=b", content_type="application/x-www-form-urlencoded")
    assert error_of(repeated) == "invalid_request"
    preflight = Client().options("/oauth/token")
    assert preflight.status_code == 204 and preflight["Access-Control-Allow-Origin"] == "*"


# --- refresh ------------------------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_a_refresh_rotates_both_tokens_and_the_old_access_token_keeps_its_hour(tokens):
    client_info, first = tokens
    second = refresh(client_info, first["refresh_token"])
    assert second.status_code == 200, second.content
    second = second.json()
    assert second["refresh_token"] != first["refresh_token"] and second["access_token"] != first["access_token"]
    assert api_status(second["access_token"]) == 200 and api_status(first["access_token"]) == 200
    assert OAuthGrant.objects.get().access_token.prefix == second["access_token"].split("_")[1]
    third = refresh(client_info, second["refresh_token"], scope="agent").json()
    assert api_status(third["access_token"]) == 200


@pytest.mark.django_db
def test_a_spent_refresh_token_presented_again_revokes_the_whole_grant(tokens):
    client_info, first = tokens
    second = refresh(client_info, first["refresh_token"]).json()
    reused = refresh(client_info, first["refresh_token"])
    assert reused.status_code == 400 and error_of(reused) == "invalid_grant"
    for access in (first["access_token"], second["access_token"]):
        assert api_status(access) == 401
    assert error_of(refresh(client_info, second["refresh_token"])) == "invalid_grant"
    grant = OAuthGrant.objects.get()
    assert grant.revoked and grant.revoked_reason == "a spent refresh token was presented again"


@pytest.mark.django_db
def test_another_client_cannot_use_a_refresh_token(tokens):
    client_info, first = tokens
    assert error_of(refresh(register(), first["refresh_token"])) == "invalid_grant"
    assert refresh(client_info, first["refresh_token"]).status_code == 200


@pytest.mark.django_db
def test_revoking_the_access_token_where_agent_tokens_are_revoked_ends_the_grant(tokens):
    client_info, first = tokens
    token_revoke(token=AgentToken.objects.get(prefix=first["access_token"].split("_")[1]))  # the admin's revoke
    assert api_status(first["access_token"]) == 401
    assert error_of(refresh(client_info, first["refresh_token"])) == "invalid_grant"
    assert OAuthGrant.objects.get().revoked


@pytest.mark.django_db
def test_a_refresh_is_refused_once_the_person_lost_the_right_and_the_grant_ends(tokens, person):
    client_info, first = tokens
    person.user_permissions.clear()
    assert error_of(refresh(client_info, first["refresh_token"])) == "invalid_grant"
    assert OAuthGrant.objects.get().revoked and api_status(first["access_token"]) == 401


@pytest.mark.django_db
def test_an_expired_refresh_token_is_refused(tokens):
    client_info, first = tokens
    OAuthRefreshToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert error_of(refresh(client_info, first["refresh_token"])) == "invalid_grant"


@pytest.mark.django_db
def test_expired_access_tokens_of_a_grant_are_cleared_at_refresh(tokens):
    client_info, first = tokens
    second = refresh(client_info, first["refresh_token"]).json()
    AgentToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    refresh(client_info, second["refresh_token"])
    assert not AgentToken.objects.filter(prefix=first["access_token"].split("_")[1]).exists()
    assert AgentToken.objects.count() == 2  # the one just expired (the grant's latest until now) and the new one


# --- revocation -----------------------------------------------------------------------------------------------------
def revoke(client_info: dict, token: str, **extra):
    return Client().post("/oauth/revoke", urlencode({"token": token, "client_id": client_info["client_id"], **extra}),
                         content_type="application/x-www-form-urlencoded")


@pytest.mark.django_db
@pytest.mark.parametrize("which", ["refresh_token", "access_token"])
def test_a_client_revokes_its_grant_and_the_token_fails_on_the_api(tokens, which):
    client_info, first = tokens
    assert api_status(first["access_token"]) == 200
    answer = revoke(client_info, first[which], token_type_hint=which)
    assert answer.status_code == 200 and answer["Cache-Control"] == "no-store"
    assert api_status(first["access_token"]) == 401
    assert error_of(refresh(client_info, first["refresh_token"])) == "invalid_grant"
    assert OAuthGrant.objects.get().revoked_reason == "revoked by the client"


@pytest.mark.django_db
def test_revocation_by_another_client_or_of_a_static_token_changes_nothing(tokens, agent):
    client_info, first = tokens
    stranger = register()
    assert revoke(stranger, first["refresh_token"]).status_code == 200
    assert revoke(stranger, first["access_token"]).status_code == 200
    _, static = token_issue(agent=agent, name="static")
    assert revoke(client_info, static).status_code == 200
    assert revoke(client_info, "gibberish").status_code == 200
    assert revoke(client_info, "gclw_a\x00b_c").status_code == 200
    not_utf8 = Client().post("/oauth/revoke", f"client_id={client_info['client_id']}&token=gclw_%ff%fe_x%00",
                             content_type="application/x-www-form-urlencoded")
    assert not_utf8.status_code == 200
    assert api_status(first["access_token"]) == 200 and api_status(static) == 200
    assert not OAuthGrant.objects.get().revoked
    assert revoke({"client_id": "gcci_unknown"}, first["access_token"]).status_code == 401


@pytest.mark.django_db
def test_static_agent_tokens_keep_working_beside_oauth(tokens, agent):
    _, static = token_issue(agent=agent, name="static")
    client_info, first = tokens
    revoke(client_info, first["refresh_token"])
    assert api_status(static) == 200


# --- admin ----------------------------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_the_grant_admin_revokes_and_needs_the_change_permission(tokens):
    _, first = tokens
    grant = OAuthGrant.objects.get()
    reader = logged_in(make_person("tools_app.view_oauthgrant"))
    assert reader.get("/admin/tools_app/oauthgrant/").status_code == 200
    reader.post("/admin/tools_app/oauthgrant/", {"action": "revoke", "_selected_action": [grant.pk]})
    assert api_status(first["access_token"]) == 200
    revoker = logged_in(make_person("tools_app.view_oauthgrant", "tools_app.change_oauthgrant"))
    answer = revoker.post("/admin/tools_app/oauthgrant/", {"action": "revoke", "_selected_action": [grant.pk]})
    assert answer.status_code == 302
    assert api_status(first["access_token"]) == 401


@pytest.mark.django_db
def test_an_administrator_registers_a_confidential_client_whose_secret_is_shown_once(person, agent):
    admin_person = make_person("tools_app.view_oauthclient", "tools_app.add_oauthclient")
    answer = logged_in(admin_person).post("/admin/tools_app/oauthclient/add/", {
        "name": "IDE plugin", "redirect_uris_text": "https://ide.example.com/cb\nhttp://localhost/cb",
        "auth_method": "client_secret_post"})
    assert answer.status_code == 200, answer.content[:500]
    secret = re.search(r'<code class="goclaw-token">(gccs_[^<]+)</code>', answer.content.decode()).group(1)
    row = OAuthClient.objects.get(name="IDE plugin")
    assert not row.dynamic and row.created_by == admin_person and row.redirect_uris == [
        "https://ide.example.com/cb", "http://localhost/cb"]
    assert row.secret_hash == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in logged_in(admin_person).get(f"/admin/tools_app/oauthclient/{row.pk}/change/").content.decode()
    refused = logged_in(admin_person).post("/admin/tools_app/oauthclient/add/", {
        "name": "bad", "redirect_uris_text": "http://example.com/cb", "auth_method": "none"})
    assert refused.status_code == 200 and not OAuthClient.objects.filter(name="bad").exists()


@pytest.mark.django_db
def test_disabling_a_client_revokes_its_grants_and_refuses_new_authorizations(tokens, person):
    client_info, first = tokens
    row = OAuthClient.objects.get(client_id=client_info["client_id"])
    changer = logged_in(make_person("tools_app.view_oauthclient", "tools_app.change_oauthclient"))
    changer.post("/admin/tools_app/oauthclient/", {"action": "disable", "_selected_action": [row.pk]})
    assert api_status(first["access_token"]) == 401
    _, challenge = pkce()
    assert logged_in(person).get("/oauth/authorize", authorize_params(client_info, challenge)).status_code == 400
    assert error_of(refresh(client_info, first["refresh_token"])) == "invalid_client"


@pytest.mark.django_db
def test_deleting_a_client_in_the_admin_revokes_its_tokens_first(tokens):
    client_info, first = tokens
    row = OAuthClient.objects.get(client_id=client_info["client_id"])
    deleter = logged_in(make_person("tools_app.view_oauthclient", "tools_app.delete_oauthclient"))
    answer = deleter.post(f"/admin/tools_app/oauthclient/{row.pk}/delete/", {"post": "yes"})
    assert answer.status_code == 302 and not OAuthClient.objects.exists()
    assert api_status(first["access_token"]) == 401


# --- end to end: the MCP SDK's OAuth client against `manage.py up` ---------------------------------------------------
class MemoryStorage:
    """The SDK's TokenStorage, in memory."""

    def __init__(self):
        self.tokens = self.client_info = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client_info

    async def set_client_info(self, client_info):
        self.client_info = client_info


def _browser_logged_in(base: str, username: str, password: str):
    """A person's browser (cookies, CSRF) logged in through the admin login form."""
    import httpx

    browser = httpx.Client(base_url=base, follow_redirects=False, timeout=30)
    page = browser.get("/admin/login/")
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    done = browser.post("/admin/login/", data={"csrfmiddlewaretoken": csrf, "username": username, "password": password,
                                               "next": "/admin/"})
    assert done.status_code == 302, done.text[:500]
    return browser


def _consent_in_browser(browser, authorize_url: str, agent_key: str) -> str:
    """The person opens the authorization URL the client sent them to, picks the agent and approves (the form's own
    fields and CSRF token posted back); returns where the browser is sent: the client's redirect URI."""
    page = browser.get(authorize_url)
    assert page.status_code == 200 and "oauth-consent" in page.text, page.text[:500]
    hidden = {name: html.unescape(value)
              for name, value in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', page.text)}
    answer = browser.post("/oauth/authorize", data={**hidden, "agent": agent_key, "decision": "approve"})
    assert answer.status_code == 302, answer.text[:500]
    return answer.headers["location"]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_mcp_sdk_client_discovers_registers_gets_a_persons_consent_and_acts_as_the_agent(tmp_path):
    import anyio
    import httpx
    import httpx2
    from mcp import Client
    from mcp.client.auth import OAuthClientProvider
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientMetadata

    from tests.mcp_app.conformance import start_goclaw
    from tests.servers import DaphneProcess, up_env, wait_until
    from tools_app.models import ToolInvocation

    agent = make_agent()
    password = "oauth-e2e-person-pw-1"
    person = make_person(ACT, password=password)
    env = up_env(tmp_path / "var", DATABASE_URL=DaphneProcess.database_url(), GOCLAW_LOG_LEVEL="warning")
    up, _ = start_goclaw(env, tmp_path / "up.log")  # the main port healthy and the MCP port (behind /mcp) answering
    base, server_url = up.base, f"{up.base}/mcp"
    try:
        unauthenticated = httpx.post(server_url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, timeout=30,
                                     headers={"Accept": "application/json, text/event-stream"})
        assert unauthenticated.status_code == 401
        challenge = unauthenticated.headers["www-authenticate"]
        # resource_metadata comes from the MCP port's ASGI layer; when it is there it must point at our document
        assert challenge.startswith('Bearer realm="goclaw"') and (
            "resource_metadata" not in challenge
            or f'resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"' in challenge), challenge

        browser = _browser_logged_in(base, person.username, password)
        sent_to: list[str] = []

        async def redirect_handler(url: str) -> None:
            sent_to.append(url)

        async def callback_handler() -> AuthorizationCodeResult:
            location = await anyio.to_thread.run_sync(_consent_in_browser, browser, sent_to[-1], agent.key)
            query = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
            assert location.startswith(REDIRECT + "?")
            return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))

        storage = MemoryStorage()
        provider = OAuthClientProvider(
            server_url=server_url, storage=storage, redirect_handler=redirect_handler, callback_handler=callback_handler,
            client_metadata=OAuthClientMetadata(client_name="e2e MCP client", redirect_uris=[REDIRECT],
                                                grant_types=["authorization_code", "refresh_token"],
                                                response_types=["code"], token_endpoint_auth_method="none"))

        async def session():
            async with httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(60, read=60)) as http:
                async with Client(streamable_http_client(server_url, http_client=http)) as mcp:
                    names = [tool.name for tool in (await mcp.list_tools()).tools]
                    return names, await mcp.call_tool("datetime", {})

        names, result = anyio.run(session)
        assert "datetime" in names and result.is_error is False, result
        assert len(sent_to) == 1 and sent_to[0].startswith(f"{base}/oauth/authorize?")
        authorize_query = parse_qs(urlsplit(sent_to[0]).query)
        assert authorize_query["code_challenge_method"] == ["S256"] and authorize_query["resource"] == [server_url]

        access, refresh_token = storage.tokens.access_token, storage.tokens.refresh_token
        row = AgentToken.objects.get(prefix=access.split("_")[1])
        assert row.agent_id == agent.pk and row.created_by_id == person.pk and row.name == "oauth:e2e MCP client"
        assert ToolInvocation.objects.filter(agent_key=agent.key, tool_name="datetime", status="ok").exists()
        assert httpx.get(f"{base}/api/v1/tools", headers={"Authorization": f"Bearer {access}"}, timeout=30).status_code == 200

        revoked = httpx.post(f"{base}/oauth/revoke", timeout=30, data={
            "token": refresh_token, "client_id": storage.client_info.client_id})
        assert revoked.status_code == 200

        def refused() -> bool:
            api = httpx.get(f"{base}/api/v1/tools", headers={"Authorization": f"Bearer {access}"}, timeout=30)
            mcp = httpx.post(server_url, json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, timeout=30,
                             headers={"Authorization": f"Bearer {access}", "Accept": "application/json, text/event-stream"})
            return api.status_code == 401 and mcp.status_code == 401

        wait_until(refused, timeout=10, message="the revoked OAuth access token to be refused by the API and /mcp")
        browser.close()
    finally:
        assert up.stop() == 0
