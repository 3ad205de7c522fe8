"""The entrypoints of configuration as code: the two commands, the staff API and the admin page all reach the same
services and say what changed, or every problem."""
from __future__ import annotations

import io
import re

import pytest
import yaml
from django.core.management import CommandError, call_command

from config_app.models import ConfigDraft
from config_app.services import config_export
from tests.config_app.conftest import SECRET_VALUES
from tools_app.models import Agent

pytestmark = pytest.mark.django_db


def export_yaml() -> str:
    out = io.StringIO()
    call_command("config_export", stdout=out)
    return out.getvalue()


def test_config_export_writes_the_document_to_stdout_or_a_file(rich, tmp_path):
    text = export_yaml()
    assert yaml.safe_load(text)["version"] == 1 and "key: alpha" in text
    target = tmp_path / "goclaw.yaml"
    call_command("config_export", "--file", str(target))
    assert target.read_text() == text
    assert all(value not in text for value in SECRET_VALUES.values())


def test_config_import_prints_the_diff_and_dry_run_changes_nothing(rich, tmp_path):
    document = yaml.safe_load(export_yaml())
    next(a for a in document["agents"] if a["key"] == "gamma")["enabled"] = True
    path = tmp_path / "changed.yaml"
    path.write_text(yaml.safe_dump(document))

    out = io.StringIO()
    call_command("config_import", str(path), "--dry-run", stdout=out)
    assert "~ agents: gamma" in out.getvalue() and "enabled: False -> True" in out.getvalue()
    assert "(dry run: nothing was changed)" in out.getvalue()
    assert Agent.objects.get(key="gamma").enabled is False

    out = io.StringIO()
    call_command("config_import", str(path), stdout=out)
    assert "0 created, 1 changed, 0 removed" in out.getvalue()
    assert Agent.objects.get(key="gamma").enabled is True


def test_config_import_lists_every_problem_and_fails_without_a_traceback(rich, tmp_path, monkeypatch):
    path = tmp_path / "broken.yaml"
    path.write_text("version: 1\nagents:\n- key: delta\n  sandbox_profile: nowhere\n- key: BAD KEY!\n  colour: red\n")
    with pytest.raises(CommandError) as caught:
        call_command("config_import", str(path))
    message = str(caught.value)
    assert "agents[0].sandbox_profile: no sandbox profile named 'nowhere'" in message
    assert "agents[1].colour: unknown field" in message
    assert not Agent.objects.filter(key="delta").exists()
    with pytest.raises(CommandError, match="cannot read"):
        call_command("config_import", str(tmp_path / "missing.yaml"))
    monkeypatch.setattr("sys.stdin", io.StringIO("version: 1\nagents:\n- key: from-stdin\n"))
    call_command("config_import", "-", stdout=io.StringIO())
    assert Agent.objects.filter(key="from-stdin").exists()


def test_config_import_exits_with_status_1_on_a_broken_document(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "broken.yaml"
    path.write_text("version: 1\nagents: [unclosed\n")
    done = subprocess.run([sys.executable, "manage.py", "config_import", str(path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1
    assert "(document)" in done.stderr and "Traceback" not in done.stderr


# --- API -------------------------------------------------------------------------------------------------------------
def test_staff_export_yaml_by_default_and_json_on_request(rich, staff_api):
    response = staff_api.get("/api/v1/config/export")
    assert response.status_code == 200 and response["Content-Type"].startswith("application/yaml")
    assert response.content.decode() == export_yaml()
    as_json = staff_api.get("/api/v1/config/export?format=json")
    assert as_json.status_code == 200 and as_json.json() == config_export()


def test_agents_and_anonymous_callers_may_not_export_or_import(rich, api, client):
    for caller in (api, client):
        assert caller.get("/api/v1/config/export").status_code in (401, 403)
        refused = caller.post("/api/v1/config/import?dry_run=1", data="version: 1\n", content_type="application/yaml")
        assert refused.status_code in (401, 403) and "error" in refused.json()
    assert api.get("/api/v1/config/export").status_code == 403


def test_api_import_dry_run_with_the_export_permission_and_apply_with_the_apply_permission(rich, superuser_api):
    from rest_framework.test import APIClient

    from tests.factories import make_person

    staff_api = APIClient()
    staff_api.force_login(make_person("config_app.export_configuration"))
    document = config_export()
    document["agents"].append({"key": "delta"})
    body = yaml.safe_dump(document)
    dry = staff_api.post("/api/v1/config/import?dry_run=1", data=body, content_type="application/yaml")
    assert dry.status_code == 200, dry.content
    assert dry.json()["applied"] is False and dry.json()["created"] == [{"section": "agents", "key": "delta"}]
    denied = staff_api.post("/api/v1/config/import", data=body, content_type="application/yaml")
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "config_apply_denied"
    assert not Agent.objects.filter(key="delta").exists()

    import json
    applied = superuser_api.post("/api/v1/config/import", data=json.dumps(document), content_type="application/json")
    assert applied.status_code == 200 and applied.json()["applied"] is True
    assert set(applied.json()) == {"applied", "dry_run", "created", "changed", "removed"}
    assert Agent.objects.filter(key="delta").exists()


def test_api_import_of_a_broken_document_is_a_400_listing_every_problem(rich, superuser_api):
    body = "version: 1\nagents:\n- key: delta\n  sandbox_profile: nowhere\n- key: eps\n  mode: sideways\n"
    response = superuser_api.post("/api/v1/config/import?prune=1", data=body, content_type="application/yaml")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "config_invalid"
    paths = {p["path"] for p in error["details"]["problems"]}
    assert {"agents[0].sandbox_profile", "agents[1].mode"} <= paths
    assert Agent.objects.filter(key="alpha").exists()  # the prune never ran
    garbage = superuser_api.post("/api/v1/config/import", data=b"\xff\xfe", content_type="application/yaml")
    assert garbage.status_code == 400 and garbage.json()["error"]["code"] == "config_invalid"
    form = superuser_api.post("/api/v1/config/import", data=b"{}", content_type="multipart/form-data")
    assert form.status_code == 415 and "error" in form.json()


def test_the_openapi_schema_documents_the_config_endpoints(client):
    paths = client.get("/api/schema/?format=json").json()["paths"]
    assert "get" in paths["/api/v1/config/export"] and "post" in paths["/api/v1/config/import"]
    assert {"cookieAuth"} == {name for req in paths["/api/v1/config/import"]["post"]["security"] for name in req}


# --- admin page --------------------------------------------------------------------------------------------------------
def test_the_admin_page_uploads_shows_the_diff_and_applies(rich, admin_client):
    index = admin_client.get("/admin/")
    assert b"Configuration: export / import" in index.content
    download = admin_client.get("/admin/config/export.yaml")
    assert download.status_code == 200 and download.content.decode() == export_yaml()

    document = config_export()
    next(a for a in document["agents"] if a["key"] == "beta")["model"] = "gpt-next"
    document["teams"][0]["description"] = "edited in the admin"
    upload = io.BytesIO(yaml.safe_dump(document).encode())
    upload.name = "goclaw.yaml"
    page = admin_client.post("/admin/config/", {"file": upload})
    assert page.status_code == 200
    html = page.content.decode()
    assert "gpt-test" in html and "gpt-next" in html and "beta" in html
    assert Agent.objects.get(key="beta").model == "gpt-test"  # only a diff so far
    draft = re.search(r'name="draft" value="([0-9a-f-]+)"', html).group(1)
    assert "gpt-next" not in ConfigDraft.objects.get(pk=draft).document_sealed  # the waiting document is sealed

    applied = admin_client.post("/admin/config/apply/", {"draft": draft})
    assert applied.status_code == 200 and b"Applied" in applied.content
    assert Agent.objects.get(key="beta").model == "gpt-next"
    from teams_app.models import Team, TeamEvent
    assert Team.objects.get(name="core").description == "edited in the admin"
    assert TeamEvent.objects.filter(team__name="core", actor="user:admin").exists()  # the person, not "system"
    again = admin_client.post("/admin/config/apply/", {"draft": draft})
    assert again.status_code == 302  # a draft applies once


def test_the_admin_page_shows_problems_and_staff_without_the_apply_permission_cannot_apply(rich, client):
    from tests.factories import make_person

    client.force_login(make_person("config_app.export_configuration", username="viewer"))
    broken = client.post("/admin/config/", {"document": "version: 1\nagents:\n- key: x\n  sandbox_profile: nope\n"})
    assert "agents[0].sandbox_profile: no sandbox profile named" in broken.content.decode().replace("&#x27;", "'")
    fine = client.post("/admin/config/", {"document": "version: 1\nagents:\n- key: newcomer\n"})
    assert b"newcomer" in fine.content and b'name="draft"' not in fine.content
    assert ConfigDraft.objects.count() == 0
    assert client.post("/admin/config/apply/", {"draft": "00000000-0000-0000-0000-000000000000"}).status_code == 403
    assert not Agent.objects.filter(key="newcomer").exists()
