"""Configuration as code attacked by a hostile staff member: what an import may read from the server's
environment, what applying may write without the admin's permissions, YAML that says two things, and the admin's
draft carried between the diff and the apply."""
from __future__ import annotations

import io
import json
import re

import pytest
import yaml
from django.contrib.auth.models import Permission

from config_app.document import document_load
from config_app.errors import ConfigInvalid
from config_app.models import ConfigDraft
from config_app.services import config_export, config_import
from sandbox_app.models import SandboxProfile
from tools_app.models import Agent, CustomTool

pytestmark = pytest.mark.django_db

OFF_BY_DEFAULT = "version: 1\nsandbox_profiles:\n- {name: wide-open, backend: host, mode: 'off', is_default: true}\n"


def staff_with(django_user_model, name: str, *codenames: str):
    """A staff member holding exactly these permissions (codenames of any app). Applying a document also needs
    export_configuration (docs/permissions.md): the tests below add it where they apply."""
    user = django_user_model.objects.create_user(name, password=f"pw-{name}-123", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return django_user_model.objects.get(pk=user.pk)  # a fresh permission cache


def api_as(user):
    from rest_framework.test import APIClient

    client = APIClient()
    client.force_login(user)
    return client


def problems_of(response) -> list[dict]:
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "config_invalid"
    return response.json()["error"]["details"]["problems"]


@pytest.mark.parametrize("variable", ["GOCLAW_ENCRYPTION_KEY", "SECRET_KEY", "DATABASE_URL", "goclaw_admin_password"])
def test_a_secret_may_not_be_read_from_goclaws_own_settings(rich, superuser_api, monkeypatch, variable):
    monkeypatch.setenv(variable.upper(), "the-platform-key-value")
    document = {"version": 1, "custom_tools": [{
        "name": "leak", "agent": "alpha", "description": "prints its env", "command": "env",
        "parameters": {"type": "object", "properties": {}}, "env": {"STOLEN": {"env": variable}}}]}
    problems = problems_of(superuser_api.post("/api/v1/config/import", data=json.dumps(document),
                                              content_type="application/json"))
    assert problems == [{"path": "custom_tools[0].env.STOLEN",
                         "message": f"{variable} is one of goclaw's own settings, never a secret's source"}]
    assert not CustomTool.objects.filter(name="leak").exists()


def test_an_ordinary_variable_still_supplies_a_secret(rich, monkeypatch):
    monkeypatch.setenv("DEPLOY_TOKEN_NEXT", "fresh-value")
    document = config_export()
    document["custom_tools"][0]["env"] = {"DEPLOY_TOKEN": {"env": "DEPLOY_TOKEN_NEXT"}}
    plan = config_import(document, dry_run=False, prune=False, actor=None)
    assert plan["changed"][0]["fields"]["env.DEPLOY_TOKEN"]["new"] == "(changed)"


def test_the_apply_permission_alone_cannot_switch_the_sandbox_off_for_every_agent(rich, django_user_model):
    importer = api_as(staff_with(django_user_model, "importer", "export_configuration", "apply_configuration"))
    problems = problems_of(importer.post("/api/v1/config/import", data=OFF_BY_DEFAULT, content_type="application/yaml"))
    assert problems == [{"path": "sandbox_profiles[0]", "message": "you may not add sandbox profiles (needs the "
                                                                    "sandbox_app.add_sandboxprofile permission)"}]
    assert not SandboxProfile.objects.filter(name="wide-open").exists()


def test_the_apply_permission_with_the_models_permissions_applies(rich, django_user_model):
    importer = api_as(staff_with(django_user_model, "sandboxer", "export_configuration", "apply_configuration",
                                 "add_sandboxprofile", "change_sandboxprofile"))
    applied = importer.post("/api/v1/config/import", data=OFF_BY_DEFAULT, content_type="application/yaml")
    assert applied.status_code == 200, applied.content
    assert SandboxProfile.objects.get(is_default=True).name == "wide-open"


def test_a_prune_needs_the_delete_permission_of_what_it_removes(rich, django_user_model):
    importer = staff_with(django_user_model, "pruner", "apply_configuration", "add_agent", "change_agent")
    document = config_export()
    document["agents"] = [a for a in document["agents"] if a["key"] != "gamma"]
    del document["teams"]  # gamma's team stays out of it: only the agents section is pruned
    with pytest.raises(ConfigInvalid) as refused:
        config_import(document, dry_run=False, prune=True, actor=importer)
    assert refused.value.problems == [{"path": "agents (gamma)", "message": "you may not delete agents (needs the "
                                                                            "tools_app.delete_agent permission)"}]
    assert Agent.objects.filter(key="gamma").exists()


def test_the_import_command_and_a_dry_run_are_not_limited_by_model_permissions(rich, django_user_model):
    viewer = staff_with(django_user_model, "viewer")
    plan = config_import(document_load(OFF_BY_DEFAULT), dry_run=True, prune=False, actor=viewer)
    assert plan["created"] == [{"section": "sandbox_profiles", "key": "wide-open"}]
    config_import(document_load(OFF_BY_DEFAULT), dry_run=False, prune=False, actor=None)  # the operator's shell
    assert SandboxProfile.objects.get(is_default=True).name == "wide-open"


@pytest.mark.parametrize("text", [
    "version: 1\nagents: [{key: shown}]\nagents: [{key: applied}]\n",
    "version: 1\nagents:\n- key: x\n  enabled: false\n  enabled: true\n",
    '{"version": 1, "agents": [{"key": "shown"}], "agents": [{"key": "applied"}]}',
])
def test_a_document_with_duplicate_keys_is_refused(text):
    with pytest.raises(ConfigInvalid) as refused:
        document_load(text)
    assert "duplicate key" in refused.value.problems[0]["message"]


def test_python_tags_are_refused_and_run_nothing(tmp_path):
    marker = tmp_path / "ran"
    with pytest.raises(ConfigInvalid):
        document_load(f"version: 1\nagents: !!python/object/apply:os.system ['touch {marker}']\n")
    assert not marker.exists()


def test_the_export_holds_no_token_password_hash_or_secret_value(rich, superuser_api, secret_env):
    from tools_app.services.agents import token_issue

    _, plain = token_issue(agent=rich["alpha"], name="ci")
    text = superuser_api.get("/api/v1/config/export").content.decode()
    for value in [plain, *secret_env.values(), "pbkdf2_sha256"]:
        assert value not in text
    assert yaml.safe_load(text)["version"] == 1


def test_another_staff_members_draft_cannot_be_applied(rich, client, django_user_model):
    author = staff_with(django_user_model, "author", "export_configuration", "apply_configuration", "add_agent")
    other = staff_with(django_user_model, "other", "export_configuration", "apply_configuration", "add_agent")
    client.force_login(author)
    upload = io.BytesIO(b"version: 1\nagents:\n- key: smuggled\n")
    upload.name = "doc.yaml"
    page = client.post("/admin/config/", {"file": upload}).content.decode()
    draft = re.search(r'name="draft" value="([0-9a-f-]+)"', page).group(1)

    client.force_login(other)
    refused = client.post("/admin/config/apply/", {"draft": draft})
    assert refused.status_code == 302 and not Agent.objects.filter(key="smuggled").exists()
    assert ConfigDraft.objects.filter(pk=draft).exists()  # still the author's to apply


def test_a_tampered_draft_is_not_applied(rich, admin_client):
    upload = io.BytesIO(b"version: 1\nagents:\n- key: reviewed\n")
    upload.name = "doc.yaml"
    page = admin_client.post("/admin/config/", {"file": upload}).content.decode()
    draft = ConfigDraft.objects.get(pk=re.search(r'name="draft" value="([0-9a-f-]+)"', page).group(1))
    other = ConfigDraft.objects.create(created_by=draft.created_by, document_sealed="x")
    ConfigDraft.objects.filter(pk=other.pk).update(document_sealed=draft.document_sealed)  # sealed for another row
    response = admin_client.post("/admin/config/apply/", {"draft": str(other.pk)})
    assert response.status_code == 302 and not Agent.objects.filter(key="reviewed").exists()


@pytest.mark.django_db(transaction=True)  # committed rows, as in production: the dry run's own writes roll back
def test_a_dry_run_leaves_no_uncommitted_tool_in_this_processs_caches(rich, django_user_model):
    from tools_app.toolsets import toolset_for

    viewer = staff_with(django_user_model, "dreamer")
    document = config_export()
    document["custom_tools"].append({"name": "planted", "agent": "alpha", "description": "never committed",
                                     "command": "echo planted", "parameters": {"type": "object", "properties": {}}})
    next(p for p in document["tool_policies"] if p["agent"] == "alpha")["also_allow"] = ["exec", "planted"]
    plan = config_import(document, dry_run=True, prune=False, actor=viewer)
    assert plan["created"] == [{"section": "custom_tools", "key": "name=planted, agent=alpha"}]
    assert toolset_for(rich["alpha"]).get("planted") is None
    assert not CustomTool.objects.filter(name="planted").exists()


def test_an_oversized_document_is_refused_with_the_error_envelope(superuser_api):
    from config_app.document import MAX_DOCUMENT_BYTES

    body = b"version: 1\n" + b"#" * MAX_DOCUMENT_BYTES
    refused = superuser_api.post("/api/v1/config/import?dry_run=1", data=body, content_type="application/yaml")
    assert refused.status_code == 413 and refused.json()["error"]["code"] == "request_too_large"


def test_an_applied_document_writes_launchers_and_credentialed_binaries_only_with_their_manage_permission(rich,
                                                                                                     django_user_model):
    from mcp_app.models import MCPLauncher

    document = "version: 1\nmcp_launchers:\n- {command: /opt/tool/bin/tool-mcp, description: smuggled}\n"
    model_only = api_as(staff_with(django_user_model, "launchers", "export_configuration", "apply_configuration",
                                   "add_mcplauncher", "change_mcplauncher"))
    problems = problems_of(model_only.post("/api/v1/config/import", data=document, content_type="application/yaml"))
    assert problems == [{"path": "mcp_launchers[0]", "message": "you may not add MCP launchers (needs the "
                                                                "mcp_app.manage_mcplauncher permission)"}]
    assert not MCPLauncher.objects.filter(command="/opt/tool/bin/tool-mcp").exists()
    manager = api_as(staff_with(django_user_model, "manager", "export_configuration", "apply_configuration",
                                "add_mcplauncher", "change_mcplauncher", "manage_mcplauncher"))
    applied = manager.post("/api/v1/config/import", data=document, content_type="application/yaml")
    assert applied.status_code == 200, applied.content
    assert MCPLauncher.objects.filter(command="/opt/tool/bin/tool-mcp").exists()
