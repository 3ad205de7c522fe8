"""LLM providers as people manage them: the staff API and the admin create, change and delete them; the API key is
write-only everywhere (sealed to its row, never returned or rendered back) and opens only into a ProviderConfig;
the outbound rule refuses metadata and (unless allowed) private addresses; every write is audited without the key."""
from __future__ import annotations

import json
from importlib import import_module

import pytest
from django.test import Client
from rest_framework.test import APIClient

from goclaw import crypto
from runtime_app.errors import ProviderKeyUnreadable
from runtime_app.models import LLMProvider, Session, SessionMessage
from runtime_app.services.providers import provider_config, provider_save
from tests.factories import make_administrator, make_agent, make_person, people_group
from tools_app.models import AuditEvent

pytestmark = pytest.mark.django_db

KEY = "sk-test-0123456789-provider-key"
BODY = {"name": "openai-main", "kind": "openai", "base_url": "https://api.openai.example/v1", "model": "gpt-test",
        "timeout": 60, "max_concurrent": 8, "api_key": KEY}


def _api(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def _send(client, method: str, url: str, body=None):
    return getattr(client, method)(url, json.dumps(body if body is not None else {}), content_type="application/json")


@pytest.fixture
def admin_api():
    return _api(make_administrator())


def _no_key_in(*responses) -> None:
    for response in responses:
        assert KEY not in response.content.decode()
        assert "api_key" not in (response.json() if isinstance(response.json(), dict) else {})


# --- the API ---------------------------------------------------------------------------------------------------------
def test_staff_create_read_change_and_delete_a_provider_and_the_key_is_never_returned(admin_api):
    created = _send(admin_api, "post", "/api/v1/providers", BODY)
    assert created.status_code == 201, created.content
    assert created.json() == {**{k: v for k, v in BODY.items() if k != "api_key"}, "timeout": 60.0,
                              "allow_private_network": False, "enabled": True, "has_api_key": True,
                              "created_at": created.json()["created_at"], "updated_at": created.json()["updated_at"]}
    listed = admin_api.get("/api/v1/providers")
    one = admin_api.get("/api/v1/providers/openai-main")
    assert [p["name"] for p in listed.json()["results"]] == ["openai-main"] and one.json()["has_api_key"] is True

    row = LLMProvider.objects.get(name="openai-main")
    assert crypto.is_sealed(row.api_key_sealed) and KEY not in row.api_key_sealed
    config = provider_config(row)
    assert (config.api_key, config.base_url, config.timeout, config.kind) == (KEY, BODY["base_url"], 60.0, "openai")

    changed = _send(admin_api, "patch", "/api/v1/providers/openai-main", {"model": "gpt-next", "timeout": 30.5})
    assert changed.status_code == 200 and changed.json()["model"] == "gpt-next" and changed.json()["timeout"] == 30.5
    assert provider_config(LLMProvider.objects.get()).api_key == KEY  # a change without api_key keeps the key

    rekeyed = _send(admin_api, "patch", "/api/v1/providers/openai-main", {"api_key": "sk-rotated-key-42"})
    assert rekeyed.status_code == 200 and provider_config(LLMProvider.objects.get()).api_key == "sk-rotated-key-42"
    cleared = _send(admin_api, "patch", "/api/v1/providers/openai-main", {"clear_api_key": True})
    assert cleared.status_code == 200 and cleared.json()["has_api_key"] is False
    assert LLMProvider.objects.get().api_key_sealed == "" and provider_config(LLMProvider.objects.get()).api_key == ""
    _no_key_in(created, listed, one, changed, rekeyed, cleared)

    assert admin_api.delete("/api/v1/providers/openai-main").status_code == 204
    missing = admin_api.get("/api/v1/providers/openai-main")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "provider_not_found"


def test_every_write_is_audited_and_no_audit_row_holds_the_key(admin_api):
    _send(admin_api, "post", "/api/v1/providers", BODY)
    _send(admin_api, "patch", "/api/v1/providers/openai-main", {"max_concurrent": 2, "api_key": "sk-second-key-7"})
    admin_api.delete("/api/v1/providers/openai-main")
    events = list(AuditEvent.objects.filter(kind__startswith="llm_provider.").order_by("created_at"))
    assert [e.kind for e in events] == ["llm_provider.created", "llm_provider.updated", "llm_provider.deleted"]
    assert all(e.actor.startswith("staff:") and e.target == "openai-main" for e in events)
    assert events[0].details["key_change"] == "set"  # whether the key changed, never the key
    assert events[1].details["changed"] == ["max_concurrent"] and events[1].details["key_change"] == "set"
    text = json.dumps([e.details for e in events])
    assert KEY not in text and "sk-second-key-7" not in text


def test_an_unknown_field_a_bad_kind_and_out_of_range_limits_are_400s_naming_the_field(admin_api):
    unknown = _send(admin_api, "post", "/api/v1/providers", {**BODY, "api_secret": "x"})
    assert unknown.status_code == 400 and "api_secret" in unknown.json()["error"]["details"]
    kind = _send(admin_api, "post", "/api/v1/providers", {**BODY, "kind": "gemini"})
    assert kind.status_code == 400 and "kind" in kind.json()["error"]["details"]
    limits = _send(admin_api, "post", "/api/v1/providers", {**BODY, "timeout": 601, "max_concurrent": 0})
    assert limits.status_code == 400 and set(limits.json()["error"]["details"]) == {"timeout", "max_concurrent"}
    typed = _send(admin_api, "post", "/api/v1/providers", {**BODY, "timeout": "60"})
    assert typed.status_code == 400 and "timeout" in typed.json()["error"]["details"]
    both = _send(admin_api, "post", "/api/v1/providers", {**BODY, "clear_api_key": True})
    assert both.status_code == 400 and "clear_api_key" in both.json()["error"]["details"]
    newline = _send(admin_api, "post", "/api/v1/providers", {**BODY, "api_key": "sk-x\r\nX-Injected: 1"})
    assert newline.status_code == 400 and "api_key" in newline.json()["error"]["details"]
    assert "X-Injected" not in newline.content.decode()
    assert not LLMProvider.objects.exists()


def test_a_metadata_url_is_refused_even_with_private_networks_allowed_and_loopback_only_with_them(admin_api):
    for url in ("http://169.254.169.254/v1", "http://[fd00:ec2::254]/v1", "http://metadata.google.internal/v1"):
        refused = _send(admin_api, "post", "/api/v1/providers",
                        {**BODY, "base_url": url, "allow_private_network": True})
        assert refused.status_code == 400, url
        assert refused.json()["error"]["code"] == "provider_invalid" and "base_url" in refused.json()["error"]["details"]
    local = {**BODY, "name": "ollama", "base_url": "http://127.0.0.1:11434/v1"}
    assert _send(admin_api, "post", "/api/v1/providers", local).status_code == 400
    assert _send(admin_api, "post", "/api/v1/providers", {**local, "allow_private_network": True}).status_code == 201
    # a local model server's single-label name (a compose service) is fine with private networks allowed
    compose = {**local, "name": "compose", "base_url": "http://ollama:11434/v1", "allow_private_network": True}
    assert _send(admin_api, "post", "/api/v1/providers", compose).status_code == 201
    creds = _send(admin_api, "post", "/api/v1/providers", {**BODY, "base_url": "https://user:pw@api.example.com/v1"})
    assert creds.status_code == 400 and "base_url" in creds.json()["error"]["details"]
    assert sorted(LLMProvider.objects.values_list("name", flat=True)) == ["compose", "ollama"]


def test_a_taken_name_is_409_and_a_provider_agents_run_on_is_neither_renamed_nor_deleted(admin_api):
    assert _send(admin_api, "post", "/api/v1/providers", BODY).status_code == 201
    taken = _send(admin_api, "post", "/api/v1/providers", BODY)
    assert taken.status_code == 409 and taken.json()["error"]["code"] == "provider_exists"
    make_agent(key="writer", provider="openai-main")
    renamed = _send(admin_api, "patch", "/api/v1/providers/openai-main", {"name": "openai-other"})
    deleted = admin_api.delete("/api/v1/providers/openai-main")
    for response in (renamed, deleted):
        assert response.status_code == 409 and response.json()["error"]["code"] == "provider_in_use"
        assert "writer" in response.json()["error"]["message"]
    assert LLMProvider.objects.filter(name="openai-main").exists()


def test_staff_without_the_permission_and_agents_are_refused(api):
    viewer = _api(make_person("runtime_app.view_llmprovider"))
    assert viewer.get("/api/v1/providers").status_code == 200
    refused = _send(viewer, "post", "/api/v1/providers", BODY)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied"
    assert "runtime_app.add_llmprovider" in refused.json()["error"]["message"]
    nobody = _api(make_person())
    assert nobody.get("/api/v1/providers").status_code == 403
    for response in (api.get("/api/v1/providers"), _send(api, "post", "/api/v1/providers", BODY),
                     api.delete("/api/v1/providers/openai-main")):
        assert response.status_code == 403 and response.json()["error"]["code"] == "permission_denied"
    assert not LLMProvider.objects.exists()


# --- the key at rest --------------------------------------------------------------------------------------------------
def test_a_sealed_key_copied_to_another_row_does_not_open_and_says_so():
    first = provider_save(actor=None, provider=LLMProvider(name="a", base_url="https://a.example/v1"), api_key=KEY)
    second = provider_save(actor=None, provider=LLMProvider(name="b", base_url="https://b.example/v1"))
    LLMProvider.objects.filter(pk=second.pk).update(api_key_sealed=first.api_key_sealed)
    with pytest.raises(ProviderKeyUnreadable) as caught:
        provider_config(LLMProvider.objects.get(pk=second.pk))
    assert caught.value.code == "provider_key_unreadable" and "set the key again" in caught.value.message
    assert KEY not in caught.value.message


def test_key_rotation_reseals_a_providers_key(settings):
    from goclaw.secrets import encryption_key_rotate

    old, new = bytes(range(32)).hex(), bytes(range(100, 132)).hex()
    settings.GOCLAW_ENCRYPTION_KEY, settings.GOCLAW_ENCRYPTION_OLD_KEYS = old, []
    provider = provider_save(actor=None, provider=LLMProvider(name="a", base_url="https://a.example/v1"), api_key=KEY)
    settings.GOCLAW_ENCRYPTION_KEY, settings.GOCLAW_ENCRYPTION_OLD_KEYS = new, [old]
    [mine] = [f for f in encryption_key_rotate().fields if f.label == "runtime_app.LLMProvider.api_key_sealed"]
    assert (mine.rotated, mine.failed) == (1, [])
    settings.GOCLAW_ENCRYPTION_OLD_KEYS = []  # the old key is gone: the key still opens
    provider.refresh_from_db()
    assert crypto.is_current(provider.api_key_sealed) and provider_config(provider).api_key == KEY


# --- the admin --------------------------------------------------------------------------------------------------------
FORM = {"name": "anthropic-main", "kind": "anthropic", "base_url": "https://api.anthropic.example", "model": "claude-x",
        "timeout_seconds": "90", "max_concurrent": "3", "enabled": "on"}


def test_the_admin_saves_a_key_write_only_and_never_shows_it_back():
    client = Client()
    client.force_login(make_administrator())
    assert client.get("/admin/runtime_app/llmprovider/add/").status_code == 200
    added = client.post("/admin/runtime_app/llmprovider/add/", {**FORM, "api_key": KEY})
    assert added.status_code == 302, added.content.decode()[:2000]
    row = LLMProvider.objects.get(name="anthropic-main")
    assert KEY not in row.api_key_sealed and provider_config(row).api_key == KEY and row.timeout_seconds == 90

    url = f"/admin/runtime_app/llmprovider/{row.pk}/change/"
    page = client.get(url).content.decode()
    assert KEY not in page and row.api_key_sealed not in page and 'name="api_key"' in page
    assert 'name="api_key" value' not in page  # the password input is rendered empty
    listing = client.get("/admin/runtime_app/llmprovider/").content.decode()
    assert "anthropic-main" in listing and KEY not in listing

    bad = client.post(url, {**FORM, "base_url": "http://169.254.169.254/", "api_key": "sk-typed-again-99"})
    assert bad.status_code == 200 and "sk-typed-again-99" not in bad.content.decode()  # form error, nothing echoed
    assert provider_config(LLMProvider.objects.get()).api_key == KEY

    kept = client.post(url, {**FORM, "model": "claude-y"})  # an empty key field keeps the key
    assert kept.status_code == 302 and provider_config(LLMProvider.objects.get()).api_key == KEY
    cleared = client.post(url, {**FORM, "clear_api_key": "on"})
    assert cleared.status_code == 302 and LLMProvider.objects.get().api_key_sealed == ""
    kinds = list(AuditEvent.objects.filter(target="anthropic-main").order_by("created_at").values_list("kind", flat=True))
    assert kinds == ["llm_provider.created", "llm_provider.updated", "llm_provider.updated"]


def test_the_admin_refuses_to_delete_a_provider_an_agent_runs_on():
    client = Client()
    client.force_login(make_administrator())
    row = provider_save(actor=None, provider=LLMProvider(name="shared", base_url="https://a.example/v1"))
    make_agent(key="runner", provider="shared")
    page = client.post(f"/admin/runtime_app/llmprovider/{row.pk}/delete/", {"post": "yes"})
    assert page.status_code == 200 and "runner" in page.content.decode()
    assert LLMProvider.objects.filter(pk=row.pk).exists()


def test_sessions_are_read_only_in_the_admin_with_their_messages_in_order():
    agent = make_agent(key="host")
    session = Session.objects.create(key="web:host:42", agent=agent, user_id="user-42", status="completed")
    for seq, (role, content) in enumerate([("user", "first question"), ("assistant", "second answer")], 1):
        SessionMessage.objects.create(session=session, seq=seq, role=role, content=content)
    reader = Client()
    reader.force_login(make_person("runtime_app.view_session", "runtime_app.view_sessionmessage"))
    listing = reader.get("/admin/runtime_app/session/?q=user-42").content.decode()
    assert "web:host:42" in listing
    page = reader.get(f"/admin/runtime_app/session/{session.pk}/change/")
    text = page.content.decode()
    assert page.status_code == 200 and text.index("first question") < text.index("second answer")
    assert reader.post(f"/admin/runtime_app/session/{session.pk}/change/", {"status": "running"}).status_code == 403
    admin = Client()
    admin.force_login(make_administrator())
    assert admin.get("/admin/runtime_app/session/add/").status_code == 403  # nobody adds or edits a session here
    assert Session.objects.get().status == "completed"


# --- the groups -------------------------------------------------------------------------------------------------------
def test_the_groups_migration_gives_operators_auditors_and_administrators_their_runtime_permissions():
    from django.apps import apps

    operators, auditors, administrators = (people_group(n) for n in ("Operators", "Auditors", "Administrators"))
    import_module("runtime_app.migrations.0002_people_groups").runtime_people_groups_ensure(apps)

    def held(group):
        return {p.codename for p in group.permissions.filter(content_type__app_label="runtime_app")}

    assert held(operators) == {"view_llmprovider", "view_session", "view_sessionmessage", "run_session"}
    assert held(auditors) >= {"view_llmprovider", "view_session", "view_sessionmessage"}
    assert not {"run_session", "add_llmprovider", "change_llmprovider", "delete_llmprovider"} & held(auditors)
    assert {"add_llmprovider", "change_llmprovider", "delete_llmprovider", "run_session"} <= held(administrators)
    operator = _api(make_person(groups=["Operators"]))
    assert operator.get("/api/v1/providers").status_code == 200
    assert _send(operator, "post", "/api/v1/providers", BODY).status_code == 403
