"""The document's `providers:` section: LLM providers with exactly the keys people write (name, kind, base_url,
api_key, model, timeout, max_concurrent, allow_private_network, enabled); the API key is a secret reference like
every sealed value (never exported, taken from the environment on import), dry runs show the diff, and bad entries
are problems with their path."""
from __future__ import annotations

import pytest

from config_app.document import document_dump, document_load
from config_app.errors import ConfigInvalid
from config_app.services import config_export, config_import, plan_text
from runtime_app.models import LLMProvider
from runtime_app.services.providers import provider_config, provider_save
from tests.factories import make_agent, make_person

pytestmark = pytest.mark.django_db

KEY = "sk-provider-secret-value-31"
KEYS = ["name", "kind", "base_url", "model", "max_concurrent", "allow_private_network", "enabled", "timeout", "api_key"]


def _provider(name="cloud", api_key=KEY, **fields) -> LLMProvider:
    fields = {"base_url": "https://api.openai.example/v1", "model": "gpt-test", **fields}
    return provider_save(actor=None, provider=LLMProvider(name=name, **fields), api_key=api_key)


def _entry(document: dict, name: str) -> dict:
    return next(p for p in document["providers"] if p["name"] == name)


def test_the_export_writes_each_provider_with_its_keys_and_the_api_key_only_as_a_reference():
    _provider()
    _provider(name="local", api_key=None, base_url="http://127.0.0.1:11434/v1", allow_private_network=True,
              kind="openai", max_concurrent=2, timeout_seconds=300)
    document = config_export()
    text = document_dump(document)
    assert KEY not in text and LLMProvider.objects.get(name="cloud").api_key_sealed not in text
    cloud, local = _entry(document, "cloud"), _entry(document, "local")
    assert sorted(cloud) == sorted(KEYS) and sorted(local) == sorted(KEYS)
    assert cloud == {"name": "cloud", "kind": "openai", "base_url": "https://api.openai.example/v1", "model": "gpt-test",
                     "max_concurrent": 4, "allow_private_network": False, "enabled": True, "timeout": 120.0,
                     "api_key": {"set": True}}
    assert local["api_key"] is None and local["timeout"] == 300 and local["allow_private_network"] is True
    assert list(document).index("providers") < list(document).index("agents")  # agents name their provider


def test_an_import_with_an_env_reference_creates_a_provider_with_the_sealed_key(monkeypatch):
    monkeypatch.setenv("OPENAI_KEY", KEY)
    document = document_load("""
version: 1
providers:
- name: cloud
  kind: anthropic
  base_url: https://api.anthropic.example
  api_key: {env: OPENAI_KEY}
  model: claude-x
  timeout: 90
  max_concurrent: 6
  allow_private_network: false
""")
    plan = config_import(document, dry_run=False, prune=False, actor=None)
    assert plan["created"] == [{"section": "providers", "key": "cloud"}]
    row = LLMProvider.objects.get(name="cloud")
    assert (row.kind, row.model, row.timeout_seconds, row.max_concurrent, row.enabled) == ("anthropic", "claude-x", 90,
                                                                                          6, True)
    assert KEY not in row.api_key_sealed and provider_config(row).api_key == KEY
    exported = _entry(config_export(), "cloud")
    assert exported["api_key"] == {"env": "OPENAI_KEY"}  # it came from that variable and has not changed since
    again = config_import(document, dry_run=False, prune=False, actor=None)
    assert again["created"] == again["changed"] == []


def test_an_import_updates_a_provider_field_by_field_and_replaces_or_keeps_its_key(monkeypatch):
    _provider()
    document = config_export()
    entry = _entry(document, "cloud")
    entry["model"], entry["timeout"] = "gpt-next", 45
    plan = config_import(document, dry_run=False, prune=False, actor=None)  # api_key: {set: true} keeps the key
    [change] = plan["changed"]
    assert change == {"section": "providers", "key": "cloud", "fields": {
        "model": {"old": "gpt-test", "new": "gpt-next"}, "timeout": {"old": 120.0, "new": 45},
        "api_key": {"old": "(set)", "new": "(kept)"}}}
    row = LLMProvider.objects.get()
    assert (row.model, row.timeout_seconds) == ("gpt-next", 45) and provider_config(row).api_key == KEY

    monkeypatch.setenv("ROTATED_KEY", "sk-rotated-provider-key-8")
    entry["api_key"] = {"env": "ROTATED_KEY"}
    plan = config_import(document, dry_run=False, prune=False, actor=None)
    assert plan["changed"][0]["fields"] == {"api_key": {"old": "(set)", "new": "(changed)"}}
    assert provider_config(LLMProvider.objects.get()).api_key == "sk-rotated-provider-key-8"
    assert "sk-rotated-provider-key-8" not in plan_text(plan)

    entry["api_key"] = None  # the document is declarative: no key
    plan = config_import(document, dry_run=False, prune=False, actor=None)
    assert plan["changed"][0]["fields"] == {"api_key": {"old": "(set)", "new": "(removed)"}}
    assert LLMProvider.objects.get().api_key_sealed == ""


def test_a_dry_run_shows_the_diff_and_changes_nothing(monkeypatch):
    _provider()
    sealed = LLMProvider.objects.get().api_key_sealed
    monkeypatch.setenv("NEW_KEY", "sk-never-stored-5")
    document = config_export()
    _entry(document, "cloud")["max_concurrent"] = 16
    _entry(document, "cloud")["api_key"] = {"env": "NEW_KEY"}
    document["providers"].append({"name": "fresh", "base_url": "https://fresh.example/v1", "api_key": {"env": "NEW_KEY"}})
    plan = config_import(document, dry_run=True, prune=False, actor=None)
    assert plan["dry_run"] and plan["created"] == [{"section": "providers", "key": "fresh"}]
    assert plan["changed"][0]["fields"] == {"max_concurrent": {"old": 4, "new": 16},
                                            "api_key": {"old": "(set)", "new": "(changed)"}}
    text = plan_text(plan)
    assert "+ providers: fresh" in text and "max_concurrent: 4 -> 16" in text and "api_key: (changed)" in text
    assert "sk-never-stored-5" not in text
    assert list(LLMProvider.objects.values_list("name", "max_concurrent", "api_key_sealed")) == [("cloud", 4, sealed)]


def test_bad_entries_are_problems_with_their_paths_and_nothing_changes(monkeypatch):
    _provider()
    monkeypatch.setenv("SOME_KEY", "sk-some-key-1")
    document = {"version": 1, "providers": [
        {"name": "cloud", "kind": "gemini", "base_url": "https://api.openai.example/v1", "api_key": {"set": True}},
        {"name": "meta", "base_url": "http://169.254.169.254/v1", "allow_private_network": True},
        {"name": "slow", "base_url": "https://slow.example/v1", "timeout": 0, "max_concurrent": "many"},
        {"name": "literal", "base_url": "https://l.example/v1", "api_key": "sk-literal-in-a-file"},
        {"name": "unset", "base_url": "https://u.example/v1", "api_key": {"set": True}},
        {"name": "typo", "base_url": "https://t.example/v1", "apikey": {"env": "SOME_KEY"}},
        {"name": "Bad Name", "base_url": "https://b.example/v1"},
    ]}
    with pytest.raises(ConfigInvalid) as caught:
        config_import(document, dry_run=False, prune=False, actor=None)
    paths = {p["path"] for p in caught.value.problems}
    assert {"providers[0].kind", "providers[1].base_url", "providers[2].timeout", "providers[2].max_concurrent",
            "providers[3].api_key", "providers[4].api_key", "providers[5].apikey", "providers[6].name"} <= paths
    kind = next(p["message"] for p in caught.value.problems if p["path"] == "providers[0].kind")
    assert "openai" in kind and "anthropic" in kind
    assert list(LLMProvider.objects.values_list("name", "kind")) == [("cloud", "openai")]


def test_prune_removes_a_provider_the_document_leaves_out_unless_an_agent_runs_on_it():
    _provider(name="old", api_key=None)
    _provider(name="used", api_key=None)
    make_agent(key="runner", provider="used")
    document = {"version": 1, "providers": []}
    with pytest.raises(ConfigInvalid) as caught:
        config_import(document, dry_run=False, prune=True, actor=None)
    assert any("runner" in p["message"] for p in caught.value.problems)
    assert LLMProvider.objects.count() == 2
    plan = config_import({"version": 1, "providers": [_entry(config_export(), "used")]}, dry_run=False, prune=True,
                         actor=None)
    assert plan["removed"] == [{"section": "providers", "key": "old"}]
    assert list(LLMProvider.objects.values_list("name", flat=True)) == ["used"]


def test_applying_providers_needs_the_model_permissions():
    importer = make_person("config_app.export_configuration", "config_app.apply_configuration")
    document = {"version": 1, "providers": [{"name": "cloud", "base_url": "https://api.openai.example/v1"}]}
    with pytest.raises(ConfigInvalid) as caught:
        config_import(document, dry_run=False, prune=False, actor=importer)
    assert caught.value.problems == [{"path": "providers[0]", "message": "you may not add LLM providers (needs the "
                                                                         "runtime_app.add_llmprovider permission)"}]
    allowed = make_person("config_app.export_configuration", "config_app.apply_configuration",
                          "runtime_app.add_llmprovider")
    config_import(document, dry_run=False, prune=False, actor=allowed)
    assert LLMProvider.objects.filter(name="cloud").exists()


def test_sessions_are_named_as_runtime_state_not_configuration():
    from django.apps import apps

    from config_app.sections import NOT_EXPORTED, SECTIONS

    exported = {section.model._meta.label for section in SECTIONS}
    for model in apps.get_app_config("runtime_app").get_models():
        assert model._meta.label in exported or model._meta.label in NOT_EXPORTED, model._meta.label
