"""Red team of the MCP-facing surface added with the 2026-07-28 revision (commit 87f5ff9 and the resources/prompts
work): a hostile agent holding a real token, a hostile MCP client, a hostile web page and a person with fewer
rights. Each test asserts the secure behaviour; a failing one is a finding (see the red-team report). Real uvicorn
processes come from the session-era module's fixtures; the OAuth pages are driven with Django's test client."""
from __future__ import annotations

import json
from urllib.parse import urlsplit

import httpx
import pytest
from django.test import Client as DjangoClient

from tests.factories import make_agent, make_person
from tests.mcp_app import test_mcp_server as session_era
from tests.mcp_app.test_mcp_server import agent_with_token
from tools_app import mcp_content
from tools_app.calls import CallContext
from tools_app.models import ToolPolicy
from tools_app.services.memory import memory_document_write
from tools_app.services.policy import tool_policy_save

servers, server = session_era.servers, session_era.server
_generations_past_what_the_servers_saw = session_era._generations_past_what_the_servers_saw

MODERN = "2026-07-28"
META = {"io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "hostile", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {}}


def modern_headers(token: str, method: str, name: str | None = None, **extra: str) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream",
               "Content-Type": "application/json", "Mcp-Protocol-Version": MODERN, "Mcp-Method": method, **extra}
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


def request(method: str, request_id=1, **params) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {"_meta": META, **params}}


def clean(answer) -> None:
    """A refusal a client can read: never a 500, never a traceback."""
    assert answer.status_code < 500, (answer.status_code, answer.text[:500])
    assert "Traceback" not in answer.text


# --- the MCP port: era routing and headers ---------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("versions", [("2025-11-25", MODERN), (MODERN, "2025-11-25"), (MODERN, "1999-01-01")])
def test_duplicate_protocol_version_headers_cannot_confuse_the_era_into_a_500(server, versions):
    _, token = agent_with_token()
    raw = [(b"authorization", f"Bearer {token}".encode()), (b"accept", b"application/json, text/event-stream"),
           (b"content-type", b"application/json"), (b"mcp-method", b"tools/list")]
    raw += [(b"mcp-protocol-version", v.encode()) for v in versions]
    answer = httpx.post(server.url, content=json.dumps(request("tools/list")).encode(), headers=raw, timeout=30)
    clean(answer)


@pytest.mark.django_db(transaction=True)
def test_duplicate_mcp_name_headers_do_not_let_a_call_run_under_another_name(server):
    _, token = agent_with_token()
    raw = [(b"authorization", f"Bearer {token}".encode()), (b"accept", b"application/json, text/event-stream"),
           (b"content-type", b"application/json"), (b"mcp-protocol-version", MODERN.encode()),
           (b"mcp-method", b"tools/call"), (b"mcp-name", b"datetime"), (b"mcp-name", b"exec")]
    answer = httpx.post(server.url, content=json.dumps(request("tools/call", name="datetime", arguments={})).encode(),
                        headers=raw, timeout=30)
    clean(answer)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("version", ["2026-07-28 extra", "x" * 5000, "2026-07-28, 2025-11-25", "DRAFT-2026-v1"])
def test_odd_protocol_versions_are_clean_refusals(server, version):
    _, token = agent_with_token()
    answer = httpx.post(server.url, json=request("tools/list"), timeout=30,
                        headers={**modern_headers(token, "tools/list"), "Mcp-Protocol-Version": version})
    clean(answer)
    assert answer.status_code == 400


@pytest.mark.django_db(transaction=True)
def test_a_foreign_origin_is_refused_before_the_token_is_even_read(server):
    _, token = agent_with_token()
    for origin in ("http://evil.example", "http://127.0.0.1.evil.example", "null", "http://localhost@evil.example"):
        answer = httpx.post(server.url, json=request("tools/list"), timeout=30,
                            headers={**modern_headers(token, "tools/list"), "Origin": origin})
        assert answer.status_code == 403, (origin, answer.text)
    rebound = httpx.post(server.url, json=request("tools/list"), timeout=30,
                         headers={**modern_headers(token, "tools/list"), "Host": "evil.example"})
    assert rebound.status_code == 400 and rebound.json()["error"]["code"] == "disallowed_host"


@pytest.mark.django_db(transaction=True)
def test_protected_resource_metadata_on_the_mcp_port_never_names_a_foreign_host(server):
    answer = httpx.get(f"http://127.0.0.1:{server.port}/.well-known/oauth-protected-resource/mcp",
                       headers={"Host": "evil.example"}, timeout=30)
    assert answer.status_code == 400
    good = httpx.get(f"http://127.0.0.1:{server.port}/.well-known/oauth-protected-resource/mcp", timeout=30)
    assert good.status_code == 200 and urlsplit(good.json()["resource"]).hostname == "127.0.0.1"


# --- tasks --------------------------------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("method", ["tasks/get", "tasks/cancel", "tasks/update"])
@pytest.mark.parametrize("task_id", ["5b0e1c2a-7d3f-4e8a-9c1b-2f6a8d4e0b13", "../" * 30, "x" * 100_000, "00000000-0000-0000-0000-000000000000"])
def test_unknown_or_hostile_task_ids_are_clean_refusals(server, method, task_id):
    _, token = agent_with_token()
    caps = {**META, "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
    body = {"jsonrpc": "2.0", "id": 5, "method": method, "params": {"_meta": caps, "taskId": task_id}}
    answer = httpx.post(server.url, json=body, timeout=30, headers=modern_headers(token, method, task_id[:200]))
    clean(answer)
    assert "error" in answer.json() and answer.json()["id"] == 5


@pytest.mark.django_db(transaction=True)
def test_another_agents_task_cannot_be_read_or_cancelled_in_the_stateless_era(server):
    from mcp_app.models import MCPTask, MCPTaskStatus
    from mcp_app.server import services

    owner, _ = agent_with_token()
    _, thief_token = agent_with_token()
    approval = _pending_approval(owner)
    task = services.task_create(agent=owner, approval_id=approval.pk, arguments={"command": "id"})
    caps = {**META, "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}}
    for method in ("tasks/get", "tasks/cancel", "tasks/update"):
        body = {"jsonrpc": "2.0", "id": 9, "method": method, "params": {"_meta": caps, "taskId": str(task.pk)}}
        answer = httpx.post(server.url, json=body, timeout=30, headers=modern_headers(thief_token, method, str(task.pk)))
        clean(answer)
        assert answer.json()["error"]["code"] == -32602, answer.text
        assert str(approval.pk) not in answer.text
    assert MCPTask.objects.get(pk=task.pk).status == MCPTaskStatus.WORKING


def _pending_approval(agent):
    from datetime import timedelta

    from django.utils import timezone

    from tools_app.models import ApprovalRequest

    return ApprovalRequest.objects.create(agent=agent, tool_name="exec", summary="run id", args_hash="0" * 64,
                                          expires_at=timezone.now() + timedelta(minutes=10))


# --- subscriptions/listen -------------------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_a_listen_request_with_a_huge_subscription_list_is_bounded(server):
    _, token = agent_with_token()
    uris = [f"goclaw://memory/memory/{i}.md" for i in range(50_000)]
    body = request("subscriptions/listen", 3, notifications={"toolsListChanged": True, "resourceSubscriptions": uris})
    with httpx.stream("POST", server.url, json=body, headers=modern_headers(token, "subscriptions/listen"),
                      timeout=httpx.Timeout(30, read=30)) as answer:
        if answer.status_code != 200:
            answer.read()
            clean(answer)
            return
        for line in answer.iter_lines():
            if line.startswith("data:"):
                ack = json.loads(line[5:])
                break
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert len(ack["params"]["notifications"].get("resourceSubscriptions") or []) <= 100


@pytest.mark.django_db(transaction=True)
def test_one_token_cannot_hold_an_unbounded_number_of_listen_streams(server):
    """Every listen stream polls the database through the process's shared worker threads each second: one agent
    opening streams without bound starves every other agent's requests (and PostgreSQL's connections)."""
    import asyncio

    _, token = agent_with_token()
    body = request("subscriptions/listen", 4, notifications={"toolsListChanged": True})
    opened = 150

    async def one(http, accepted: list, stop: asyncio.Event):
        async with http.stream("POST", server.url, json=body, headers=modern_headers(token, "subscriptions/listen")) as answer:
            if answer.status_code != 200:
                accepted.append(False)
                return
            async for line in answer.aiter_lines():
                if line.startswith("data:"):
                    accepted.append(True)
                    await stop.wait()
                    return

    async def flood():
        accepted: list[bool] = []
        stop = asyncio.Event()
        limits = httpx.Limits(max_connections=opened + 5, max_keepalive_connections=0)
        async with httpx.AsyncClient(timeout=httpx.Timeout(60, read=60), limits=limits) as http:
            tasks = [asyncio.create_task(one(http, accepted, stop)) for _ in range(opened)]
            while len(accepted) < opened and not any(t.done() and t.exception() for t in tasks):
                await asyncio.sleep(0.05)
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
        return accepted

    accepted = asyncio.run(flood())
    assert len(accepted) == opened
    assert not all(accepted), f"all {opened} listen streams of one token were accepted: no bound"


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("params", [{"name": "\ud800", "arguments": {}}, {"name": "datetime", "arguments": {"\ud800": "\udfff"}},
                                    {"name": "datetime\u0000", "arguments": {}}])
def test_lone_surrogates_and_nul_in_a_call_are_clean_json_rpc_errors(server, params):
    _, token = agent_with_token()
    raw = json.dumps(request("tools/call", 8, **params), ensure_ascii=True)
    answer = httpx.post(server.url, content=raw.encode(), timeout=30,
                        headers=modern_headers(token, "tools/call", "datetime"))
    clean(answer)
    assert answer.json()["id"] == 8


# --- the main-port proxy ------------------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("header", ["HTTP_MCP_NAME", "HTTP_MCP_PARAM_COMMAND", "HTTP_X_GOCLAW_USER"])
def test_a_header_with_a_line_break_through_the_proxy_is_refused_not_a_500(server, settings, header):
    settings.HOST, settings.MCP_PORT = "127.0.0.1", server.port
    _, token = agent_with_token()
    headers = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in modern_headers(token, "tools/call", "datetime").items()}
    headers[header] = "datetime\r\nX-Goclaw-User: admin"
    answer = DjangoClient(raise_request_exception=False).post(
        "/mcp", json.dumps(request("tools/call", name="datetime", arguments={})), content_type="application/json",
        **headers)
    assert answer.status_code < 500, answer.status_code


# --- resources: traversal, encodings, policy ----------------------------------------------------------------------
def _policy(agent, **sections):
    return tool_policy_save(actor=None, policy=ToolPolicy(scope="agent", agent=agent, **sections))[0]


@pytest.mark.django_db
@pytest.mark.parametrize("uri", [
    "goclaw://memory/../memory/secret.md", "goclaw://memory/memory/../../etc/passwd", "goclaw://memory/%2e%2e/etc/passwd",
    "goclaw://memory/memory%2F..%2F..%2Fsecret.md", "goclaw://memory/memory\\..\\secret.md", "goclaw://memory//etc/passwd",
    "goclaw://memory/memory/secret.md%00.txt", "goclaw://memory/%c0%ae%c0%ae/secret.md", "goclaw://context/../SOUL.md",
    "goclaw://context/SOUL.md/../USER.md", "goclaw://memory/~/secret.md", "goclaw://memory/memory/%ff.md",
])
def test_traversal_uris_never_read_anything(uri):
    agent = make_agent(agent_type="open")
    memory_document_write(agent=agent, user_id="bob", path="memory/secret.md", content="bob's secret", embed=False)
    with pytest.raises(mcp_content.ResourceNotFound):
        mcp_content.resource_read(agent=agent, context=CallContext(user_id="ada"), uri=uri)


@pytest.mark.django_db
def test_another_agents_memory_is_not_readable_under_any_spelling():
    owner, thief = make_agent(agent_type="open"), make_agent(agent_type="open")
    memory_document_write(agent=owner, user_id=None, path="MEMORY.md", content="owner only", embed=False)
    for uri in ("goclaw://memory/MEMORY.md", f"goclaw://memory/../{owner.key}/MEMORY.md"):
        with pytest.raises(mcp_content.ResourceNotFound):
            mcp_content.resource_read(agent=thief, context=CallContext(), uri=uri)


@pytest.mark.django_db
@pytest.mark.parametrize("spelling", [
    "goclaw://memory/memory/secre%74.md", "goclaw://memory/memory//secret.md", "goclaw://memory/./memory/secret.md",
    "goclaw://memory/memory/./secret.md", "goclaw://memory/memory/x/../secret.md", "goclaw://memory/%6demory/secret.md",
    "goclaw://memory/memory/SECRET.md", "goclaw://memory/memory/secret.md/", "goclaw://memory/memory%2fsecret.md",
])
def test_a_policy_deny_is_not_bypassed_by_another_spelling_of_the_uri(spelling):
    agent = make_agent(agent_type="open")
    memory_document_write(agent=agent, user_id=None, path="memory/secret.md", content="denied text", embed=False)
    _policy(agent, resources={"deny": ["goclaw://memory/memory/secret.md"]})
    try:
        found = mcp_content.resource_read(agent=agent, context=CallContext(), uri=spelling)
    except mcp_content.ResourceNotFound:
        return
    assert "denied text" not in found.text, f"{spelling} read a denied resource"


@pytest.mark.django_db
@pytest.mark.parametrize("uri", ["goclaw://memory/a\x00b.md", "goclaw://memory/%00", "goclaw://context/SOUL.md\x00",
                                 "goclaw://memory/" + "a/" * 1023, "\ud800", 12, None, ["goclaw://context/SOUL.md"]])
def test_hostile_uris_are_not_found_and_still_audited_without_a_database_error(uri):
    agent = make_agent(agent_type="open")
    with pytest.raises(mcp_content.ResourceNotFound):
        mcp_content.resource_read(agent=agent, context=CallContext(), uri=uri)


# --- prompts --------------------------------------------------------------------------------------------------------
def _skill(agent, content: str, arguments=()):
    from tools_app.services import skills as skill_services

    return skill_services.skill_publish(agent=agent, name="Review", description="reviews", content=content,
                                        arguments=arguments)[0]


@pytest.mark.django_db
def test_an_argument_value_is_data_never_expanded_again():
    agent = make_agent(agent_type="open")
    skill = _skill(agent, "Review {{target}} carefully. Secret rule: {{rule}}.",
                   [{"name": "target", "required": True}, {"name": "rule", "required": False}])
    found = mcp_content.prompt_get(agent=agent, context=CallContext(), name=skill.slug,
                                   arguments={"target": "{{rule}} and {{ target }}"})
    assert "Review {{rule}} and {{ target }} carefully. Secret rule: ." in found.text


@pytest.mark.django_db
@pytest.mark.parametrize("arguments", [
    {"target": "x" * 20_000}, {f"a{i}": "x" for i in range(10_000)}, {"target": "a\x00b"}, {"tar\x00get": "x"},
    {"target": ["a"]}, {"target": {"$ne": 1}}, "target=x", [["target", "x"]], {"target": "\ud800"},
])
def test_hostile_prompt_arguments_are_invalid_params_never_a_database_error(arguments):
    agent = make_agent(agent_type="open")
    skill = _skill(agent, "Review {{target}}", [{"name": "target", "required": True}])
    with pytest.raises(mcp_content.ContentRequestInvalid):
        mcp_content.prompt_get(agent=agent, context=CallContext(), name=skill.slug, arguments=arguments)


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["a\x00b", "x" * 100_000, "\ud800", 7, None, {"slug": "review"}, "../review"])
def test_hostile_prompt_names_are_not_found_never_a_database_error(name):
    agent = make_agent(agent_type="open")
    _skill(agent, "Review")
    with pytest.raises(mcp_content.PromptNotFound):
        mcp_content.prompt_get(agent=agent, context=CallContext(), name=name, arguments={})


def test_what_an_error_echoes_back_can_always_be_encoded():
    from mcp_app.server.content import _echo

    for value in ("goclaw://memory/\ud800", "a\udfffb", "x\x00y"):
        _echo(value).encode("utf-8")


# --- OAuth: a hostile page, client and person ---------------------------------------------------------------------
ACT = "tools_app.add_agenttoken"
GOOD = "https://good.example.com/cb"


def _register(*uris: str) -> dict:
    body = {"client_name": "Client", "redirect_uris": list(uris), "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"]}
    answer = DjangoClient().post("/oauth/register", json.dumps(body), content_type="application/json")
    assert answer.status_code == 201, answer.content
    return answer.json()


def _params(client_id: str, redirect_uri: str | None, **extra) -> dict:
    params = {"response_type": "code", "client_id": client_id, "state": "s", "code_challenge": "A" * 43,
              "code_challenge_method": "S256", **extra}
    if redirect_uri is not None:
        params["redirect_uri"] = redirect_uri
    return params


def _browser(person) -> DjangoClient:
    browser = DjangoClient()
    browser.force_login(person)
    return browser


@pytest.mark.django_db
@pytest.mark.parametrize("given", [
    "https://good.example.com.evil.com/cb", "https://good.example.com/cb/../evil", "https://good.example.com/cb?x=1",
    "https://good.example.com/cb/", "https://good.example.com:443/cb", "https://GOOD.example.com/cb",
    "https://evil.com@good.example.com/cb", "https://good.example.com@evil.com/cb", "https://good.example.com\\@evil.com/cb",
    "https://good.example.com/cb#frag", "https://good.example.com/cb%2f..%2f..", "https://xn--gd-ooa.example.com/cb",
    "http://good.example.com/cb", "//evil.com/cb", "javascript:alert(1)//good.example.com/cb",
])
def test_a_redirect_uri_that_is_not_exactly_a_registered_https_one_never_redirects(given):
    client = _register(GOOD)
    answer = _browser(make_person(ACT)).get("/oauth/authorize", _params(client["client_id"], given))
    assert answer.status_code == 400, (given, answer.status_code, answer.get("Location"))


@pytest.mark.django_db
@pytest.mark.parametrize("registered, given", [
    ("http://127.0.0.1:4000/cb", "http://localhost:4000/cb"), ("http://localhost/cb", "http://127.0.0.1:9/cb"),
    ("http://127.0.0.1/cb", "http://127.0.0.1.evil.com/cb"), ("http://127.0.0.1/cb", "http://127.0.0.1:80@evil.com/cb"),
    ("http://127.0.0.1/cb", "http://127.0.0.1:5/cb/../x"), ("http://127.0.0.1/cb", "http://[::1]:5/cb"),
    ("http://127.0.0.1/cb", "https://127.0.0.1:5/cb"), ("http://127.0.0.1/cb", "http://127.0.0.1:5/cb?next=//evil.com"),
])
def test_loopback_port_freedom_does_not_extend_to_hosts_paths_or_queries(registered, given):
    client = _register(registered)
    answer = _browser(make_person(ACT)).get("/oauth/authorize", _params(client["client_id"], given))
    assert answer.status_code == 400, (given, answer.status_code, answer.get("Location"))


@pytest.mark.django_db
@pytest.mark.parametrize("uri", ["javascript:alert(1)", "data:text/html,<script>alert(1)</script>", "file:///etc/passwd",
                                 "https://", "https:///cb", "http://127.0.0.1:99999/cb", "https://a.example/\ncb",
                                 "https://exa mple.com/cb", "vbscript:x", "HTTPS://good.example.com/cb"])
def test_registration_refuses_dangerous_redirect_uris(uri):
    body = {"client_name": "x", "redirect_uris": [uri], "token_endpoint_auth_method": "none"}
    answer = DjangoClient().post("/oauth/register", json.dumps(body), content_type="application/json")
    assert answer.status_code == 400, (uri, answer.content)


@pytest.mark.django_db
def test_the_consent_page_cannot_be_framed_by_another_site():
    client = _register(GOOD)
    answer = _browser(make_person(ACT)).get("/oauth/authorize", _params(client["client_id"], GOOD))
    assert answer.status_code == 200
    framing = answer.get("X-Frame-Options", "").upper()
    csp = answer.get("Content-Security-Policy", "")
    assert framing in ("DENY", "SAMEORIGIN") or "frame-ancestors 'none'" in csp or "frame-ancestors 'self'" in csp


@pytest.mark.django_db
def test_a_person_without_the_right_gets_no_code_even_posting_the_form():
    from tools_app.models.oauth import OAuthAuthorizationCode

    agent = make_agent()
    client = _register(GOOD)
    weaker = make_person("tools_app.view_agent")
    answer = _browser(weaker).post("/oauth/authorize", {**_params(client["client_id"], GOOD), "agent": agent.key,
                                                        "decision": "approve"})
    assert answer.status_code in (302, 403) and "code=" not in answer.get("Location", "")
    assert not OAuthAuthorizationCode.objects.exists()


@pytest.mark.django_db
def test_the_consent_post_cannot_downgrade_pkce_or_swap_the_client_after_the_page_was_shown():
    from tools_app.models.oauth import OAuthAuthorizationCode

    agent, person = make_agent(), make_person(ACT)
    client = _register(GOOD)
    browser = _browser(person)
    for tampered in ({"code_challenge_method": "plain"}, {"code_challenge": "short"}, {"client_id": "gcci_nobody"},
                     {"redirect_uri": "https://evil.example/cb"}, {"response_type": "token"}):
        answer = browser.post("/oauth/authorize", {**_params(client["client_id"], GOOD), **tampered,
                                                   "agent": agent.key, "decision": "approve"})
        assert "code=" not in answer.get("Location", ""), tampered
        assert not answer.get("Location", "").startswith("https://evil.example"), tampered
    assert not OAuthAuthorizationCode.objects.exists()


@pytest.mark.django_db
def test_the_state_is_returned_encoded_never_as_extra_parameters():
    agent, person = make_agent(), make_person(ACT)
    client = _register(GOOD)
    answer = _browser(person).post("/oauth/authorize", {**_params(client["client_id"], GOOD,
                                                                  state="x&code=attacker&iss=https://evil"),
                                                        "agent": agent.key, "decision": "approve"})
    assert answer.status_code == 302
    from urllib.parse import parse_qs

    query = parse_qs(urlsplit(answer["Location"]).query)
    assert urlsplit(answer["Location"]).netloc == "good.example.com"
    assert query["state"] == ["x&code=attacker&iss=https://evil"] and len(query["code"]) == 1


@pytest.mark.django_db
def test_a_client_cannot_revoke_another_clients_grant_with_its_access_token():
    import base64
    import hashlib
    import secrets
    from urllib.parse import parse_qs, urlencode

    from tools_app.models.oauth import OAuthGrant

    agent, person = make_agent(), make_person(ACT)
    victim, attacker = _register(GOOD), _register(GOOD)
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    answer = _browser(person).post("/oauth/authorize", {**_params(victim["client_id"], GOOD, code_challenge=challenge),
                                                        "agent": agent.key, "decision": "approve"})
    code = parse_qs(urlsplit(answer["Location"]).query)["code"][0]
    tokens = DjangoClient().post("/oauth/token", urlencode({"grant_type": "authorization_code", "code": code,
                                                             "code_verifier": verifier, "client_id": victim["client_id"],
                                                             "redirect_uri": GOOD}),
                                 content_type="application/x-www-form-urlencoded").json()
    for token in (tokens["access_token"], tokens["refresh_token"]):
        revoked = DjangoClient().post("/oauth/revoke", urlencode({"token": token, "client_id": attacker["client_id"]}),
                                      content_type="application/x-www-form-urlencoded")
        assert revoked.status_code == 200
    assert not OAuthGrant.objects.get(client__client_id=victim["client_id"]).revoked
    # and the attacker cannot refresh with the victim's refresh token (nor does trying revoke the victim's grant)
    stolen = DjangoClient().post("/oauth/token", urlencode({"grant_type": "refresh_token", "client_id": attacker["client_id"],
                                                             "refresh_token": tokens["refresh_token"]}),
                                 content_type="application/x-www-form-urlencoded")
    assert stolen.status_code == 400
    assert not OAuthGrant.objects.get(client__client_id=victim["client_id"]).revoked
