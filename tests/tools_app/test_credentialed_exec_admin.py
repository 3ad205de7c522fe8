"""The credentialed binaries admin (path checked on the form, env write-only: names and last change shown, values
never) and `manage.py cli_binary_preset` (env values copied from the environment, never from the command line)."""
from __future__ import annotations

import io
import os
import shutil
import tempfile

import pytest
from django.core.management import CommandError, call_command

from tools_app.models import SecureCLIBinary

pytestmark = pytest.mark.django_db

BASE = "/admin/tools_app/secureclibinary/"
SECRET = "admin-planted-cli-secret-9b2c4d"


@pytest.fixture
def fake_gh():
    directory = tempfile.mkdtemp(prefix="goclaw-cli-")
    os.chmod(directory, 0o755)
    path = os.path.join(directory, "gh")
    with open(path, "w") as fh:
        fh.write("#!/bin/sh\necho ok\n")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(directory, ignore_errors=True)


def form(path, **extra):
    return {"name": "gh", "path": path, "deny_args": '["^auth\\\\b"]', "deny_verbose": '["--debug"]',
            "timeout_seconds": "60", "tips": "GitHub", "agent": "", "enabled": "on", "env_set": "", **extra}


def test_adding_a_binary_seals_its_env_and_pages_show_names_never_values(admin_client, fake_gh):
    response = admin_client.post(f"{BASE}add/", form(fake_gh, env_set=f"GH_TOKEN={SECRET}\nOTHER=x-value-2"))
    assert response.status_code == 302, response.content.decode()[:2000]
    row = SecureCLIBinary.objects.get(name="gh")
    assert row.env_names == ["GH_TOKEN", "OTHER"] and SECRET not in row.env_sealed and row.deny_args == ["^auth\\b"]
    page = admin_client.get(f"{BASE}{row.pk}/change/").content.decode()
    assert "GH_TOKEN (set)" in page and SECRET not in page and SECRET not in admin_client.get(BASE).content.decode()
    response = admin_client.post(f"{BASE}{row.pk}/change/", form(fake_gh, env_unset=["OTHER"]))
    assert response.status_code == 302
    row.refresh_from_db()
    assert row.env_names == ["GH_TOKEN"]


def test_a_bad_path_is_a_form_error_and_typed_values_are_not_echoed(admin_client, fake_gh):
    html = admin_client.post(f"{BASE}add/", form("gh", env_set=f"GH_TOKEN={SECRET}")).content.decode()
    assert "not an absolute path" in html and SECRET not in html
    assert not SecureCLIBinary.objects.exists()


def test_the_preset_command_registers_deny_args_and_reads_env_from_the_environment(fake_gh, monkeypatch):
    monkeypatch.setenv("GH_TOKEN", SECRET)
    out = io.StringIO()
    call_command("cli_binary_preset", "gh", "--path", fake_gh, "--env", "GH_TOKEN", stdout=out)
    row = SecureCLIBinary.objects.get(name="gh")
    assert row.env_names == ["GH_TOKEN"] and any("auth" in p for p in row.deny_args) and SECRET not in out.getvalue()
    with pytest.raises(CommandError, match="not set in this environment: NOPE"):
        call_command("cli_binary_preset", "aws", "--path", fake_gh, "--env", "NOPE")
    with pytest.raises(CommandError, match="no preset"):
        call_command("cli_binary_preset", "nope", "--path", fake_gh)


def test_a_program_that_can_reveal_its_credentials_is_saved_only_with_the_risk_acknowledged(admin_client):
    """P15: /usr/bin/env prints its environment: the form says why and which box to tick, and keeps nothing."""
    assert "I accept that this binary can reveal its credentials" in admin_client.get(f"{BASE}add/").content.decode()
    data = {**form("/usr/bin/env", env_set=f"GH_TOKEN={SECRET}"), "name": "env"}
    html = admin_client.post(f"{BASE}add/", data).content.decode()
    assert "can reveal its credentials" in html and "risk_acknowledged: true" in html and SECRET not in html
    assert not SecureCLIBinary.objects.exists()
    response = admin_client.post(f"{BASE}add/", {**data, "risk_acknowledged": "on"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert SecureCLIBinary.objects.get(name="env").risk_acknowledged


def test_the_preset_command_registers_terraform_only_with_accept_risk(monkeypatch):
    directory = tempfile.mkdtemp(prefix="goclaw-cli-")
    os.chmod(directory, 0o755)
    path = os.path.join(directory, "terraform")
    with open(path, "w") as fh:
        fh.write("#!/bin/sh\necho ok\n")
    os.chmod(path, 0o755)
    try:
        with pytest.raises(CommandError, match="terraform: a build.*pass --accept-risk"):
            call_command("cli_binary_preset", "terraform", "--path", path)
        call_command("cli_binary_preset", "terraform", "--path", path, "--accept-risk", stdout=io.StringIO())
        assert SecureCLIBinary.objects.get(name="terraform").risk_acknowledged
    finally:
        shutil.rmtree(directory, ignore_errors=True)
