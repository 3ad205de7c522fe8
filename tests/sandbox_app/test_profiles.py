"""Sandbox profiles: validation, which calls they isolate, the self-test (command and admin), health."""
from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.db.models import ProtectedError

from sandbox_app.models import SandboxProfile
from sandbox_app.selectors import BUILTIN_DEFAULT_NAME, sandbox_profile_get
from tests.factories import make_agent

pytestmark = pytest.mark.django_db


def test_migration_creates_a_default_bubblewrap_profile_without_network():
    profile = SandboxProfile.objects.get(is_default=True)
    assert (profile.name, profile.backend, profile.mode, profile.network) == ("default", "bubblewrap", "all", "off")
    spec = profile.spec()
    assert spec.backend == "bubblewrap" and spec.network is False and spec.profile == "default"
    limits = profile.limits(timeout_seconds=30, grace_seconds=1, max_output_bytes=4096)
    assert limits.memory_bytes == 1024 * 1024 * 1024 and limits.max_processes == 256 and limits.cpu_seconds == 300


def test_without_any_default_profile_the_builtin_sandbox_applies_never_the_host():
    SandboxProfile.objects.all().delete()
    profile = sandbox_profile_get(None)
    assert profile.name == BUILTIN_DEFAULT_NAME and profile.sandboxed
    assert profile.spec().backend == "bubblewrap" and profile.spec().network is False


@pytest.mark.parametrize("fields, field", [
    ({"backend": "host", "mode": "all"}, "backend"),
    ({"backend": "host", "mode": "non-main"}, "backend"),
    ({"network": "off", "network_local": True}, "network_local"),
    ({"ro_binds": ["relative/path"]}, "ro_binds"),
    ({"ro_binds": ["/opt/../etc"]}, "ro_binds"),
    ({"ro_binds": "/opt"}, "ro_binds"),
])
def test_inconsistent_profiles_are_refused_with_the_field_named(fields, field):
    profile = SandboxProfile(name="p", **fields)
    with pytest.raises(ValidationError) as exc:
        profile.full_clean()
    assert field in exc.value.message_dict


def test_host_is_only_used_when_the_sandbox_is_off():
    off = SandboxProfile(name="off", backend="bubblewrap", mode="off")
    off.full_clean()
    assert not off.sandboxed and off.spec(sandboxed=off.sandboxed).backend == "host"


@pytest.mark.parametrize("mode, depth, session, isolated", [
    ("all", 0, "", True), ("all", 0, "main", True), ("off", 3, "x", False),
    ("non-main", 0, "", False), ("non-main", 0, "main", False), ("non-main", 0, "agent:a:main", False),
    ("non-main", 1, "main", True), ("non-main", 0, "telegram:123", True),
])
def test_which_calls_a_profile_isolates(mode, depth, session, isolated):
    assert SandboxProfile(mode=mode).applies_to(subagent_depth=depth, session_key=session) is isolated


def test_a_profile_in_use_cannot_be_deleted():
    profile = SandboxProfile.objects.create(name="strict")
    make_agent(sandbox_profile=profile)
    with pytest.raises(ProtectedError):
        profile.delete()


def test_selftest_command_reports_every_probe_held_in_the_default_profile(capsys):
    call_command("sandbox_selftest")
    out = capsys.readouterr().out
    assert "profile default: backend bubblewrap" in out and "FAILED" not in out and "probes held" in out
    profile = SandboxProfile.objects.get(name="default")
    assert profile.selftest_ok is True and profile.selftest_at is not None
    assert len(profile.selftest_report["probes"]) >= 8


def test_selftest_command_fails_for_a_profile_with_the_sandbox_off(capsys):
    SandboxProfile.objects.create(name="hostonly", backend="host", mode="off")
    with pytest.raises(CommandError, match="did not hold"):
        call_command("sandbox_selftest", "hostonly")
    out = capsys.readouterr().out
    assert "backend host" in out and "FAILED" in out
    assert SandboxProfile.objects.get(name="hostonly").selftest_ok is False


def test_selftest_command_names_the_profiles_when_one_is_unknown():
    with pytest.raises(CommandError, match=r"no sandbox profile named 'nope' \(profiles: default\)"):
        call_command("sandbox_selftest", "nope")


def test_admin_lists_profiles_and_shows_the_host_as_unsandboxed(admin_client):
    SandboxProfile.objects.create(name="hostonly", backend="host", mode="off")
    page = admin_client.get("/admin/sandbox_app/sandboxprofile/").content.decode()
    assert "host — sandbox off" in page and "bubblewrap (all)" in page
    assert admin_client.get("/admin/sandbox_app/sandboxprofile/add/").status_code == 200


def test_admin_selftest_action_shows_each_probe(admin_client):
    profile = SandboxProfile.objects.get(name="default")
    response = admin_client.post("/admin/sandbox_app/sandboxprofile/",
                                 {"action": "run_selftest", "_selected_action": [profile.pk]})
    page = response.content.decode()
    assert response.status_code == 200 and "every probe held" in page
    for probe in SandboxProfile.objects.get(pk=profile.pk).selftest_report["probes"]:
        assert probe["name"] in page


def test_admin_refuses_a_host_backend_with_the_sandbox_on(admin_client):
    response = admin_client.post("/admin/sandbox_app/sandboxprofile/add/", {
        "name": "bad", "backend": "host", "mode": "all", "network": "off", "timeout_seconds": 300, "cpu_seconds": 1,
        "memory_mb": 1, "max_processes": 1, "max_open_files": 1, "max_file_mb": 1, "ro_binds": "[]"})
    assert response.status_code == 200 and "only for profiles with mode off" in response.content.decode()
    assert not SandboxProfile.objects.filter(name="bad").exists()


def test_healthz_reports_the_sandbox(client):
    from goclaw.services import health_status

    sandbox = health_status()["checks"]["sandbox"]
    assert sandbox["ok"] is True and sandbox["backend"] == "bubblewrap" and sandbox["profile"] == "default"
