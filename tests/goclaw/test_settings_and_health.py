import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

ROOT = Path(__file__).resolve().parents[2]


def _settings_process(env_overrides: dict, code: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_VERSION", "PYTEST_CURRENT_TEST")}
    env.update({"DATABASE_URL": "postgresql://nobody@/none?host=/nonexistent", "DJANGO_SETTINGS_MODULE": "goclaw.settings"})
    env.update(env_overrides)
    return subprocess.run([sys.executable, "-c", f"import django; django.setup(); {code}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_production_without_secrets_refuses_to_start(tmp_path):
    result = _settings_process({"GOCLAW_ENV": "production", "GOCLAW_DATA_DIR": str(tmp_path), "SECRET_KEY": ""}, "pass")
    assert result.returncode != 0
    assert "SECRET_KEY is required when GOCLAW_ENV=production" in result.stderr


def test_development_generates_secrets_once_with_private_mode(tmp_path):
    code = "from django.conf import settings; print(settings.SECRET_KEY); print(settings.GOCLAW_ENCRYPTION_KEY)"
    first = _settings_process({"GOCLAW_DATA_DIR": str(tmp_path)}, code)
    second = _settings_process({"GOCLAW_DATA_DIR": str(tmp_path)}, code)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    assert oct((tmp_path / "secret-key.txt").stat().st_mode & 0o777) == "0o600"
    assert oct((tmp_path / "encryption-key.txt").stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("name,value", [("GOCLAW_PORT", "eighty"), ("GOCLAW_DEBUG", "maybe"), ("GOCLAW_ENV", "staging")])
def test_bad_setting_values_fail_with_the_variable_name(tmp_path, name, value):
    result = _settings_process({"GOCLAW_DATA_DIR": str(tmp_path), name: value}, "pass")
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and name in result.stderr


def test_migrations_are_in_sync_with_models(db):
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


@pytest.mark.django_db
def test_healthz_reports_missing_worker_as_503(admin_client):
    response = admin_client.get("/healthz")
    body = response.json()
    assert body["checks"]["database"]["ok"] and body["checks"]["pgvector"]["ok"]
    assert not body["checks"]["worker"]["ok"]
    assert response.status_code == 503 and body["status"] == "degraded" and body["ok"] is False


@pytest.mark.django_db
def test_healthz_is_200_after_a_worker_heartbeat(admin_client):
    from goclaw.tasks import heartbeat

    heartbeat()
    response = admin_client.get("/healthz")
    assert response.status_code == 200, response.json()
    assert response.json()["status"] == "ok"


@pytest.mark.django_db
def test_anonymous_healthz_callers_get_the_status_only_with_the_same_http_codes(client):
    """The checks describe the machine (whether the server runs as root, the bubblewrap version, cgroup paths, the
    sandbox uid): an anonymous caller learns up or down, nothing else."""
    from goclaw.tasks import heartbeat

    down = client.get("/healthz")
    assert (down.status_code, down.json()) == (503, {"status": "degraded", "ok": False})
    heartbeat()
    up = client.get("/healthz")
    assert (up.status_code, up.json()) == (200, {"status": "ok", "ok": True})
    assert client.head("/healthz").status_code == 200


@pytest.mark.django_db
def test_healthz_details_need_an_agent_token_or_an_active_staff_session(client, api, django_user_model):
    from goclaw.tasks import heartbeat

    heartbeat()
    with_token = api.get("/healthz")
    assert with_token.status_code == 200 and {"database", "worker", "sandbox"} <= set(with_token.json()["checks"])
    staff = django_user_model.objects.create_user("ops", password="pw-ops-123", is_staff=True)
    client.force_login(staff)
    assert "sandbox" in client.get("/healthz").json()["checks"]
    for flags in ({"is_staff": False}, {"is_staff": True, "is_active": False}):
        django_user_model.objects.filter(pk=staff.pk).update(**flags)
        assert client.get("/healthz").json() == {"status": "ok", "ok": True}, flags
    client.logout()
    bad = client.get("/healthz", HTTP_AUTHORIZATION="Bearer gclw_nope_nope")
    assert bad.status_code == 401 and bad.json()["error"]["code"] == "not_authenticated"
    assert "checks" not in bad.json()


@pytest.mark.django_db(transaction=True)
def test_a_burst_of_healthz_requests_runs_the_probes_once_and_other_endpoints_keep_answering(settings, api):
    """64 concurrent /healthz requests share one round of probes (a slow probe would otherwise hold every
    request thread), while an agent's request is answered in between."""
    import threading
    import time

    from django.test import Client

    from goclaw import services

    settings.HEALTH_CACHE_SECONDS = 30
    services._health_last = None
    probes, gate = [], threading.Event()

    def slow_probe():
        probes.append(1)
        gate.wait(10)  # held until the other requests have arrived
        return {"ok": True}

    services.health_check_register("slow_test_probe", slow_probe)
    statuses: list[int] = []
    try:
        def probe_once():
            from django.db import connection

            try:
                statuses.append(Client().get("/healthz").status_code)
            finally:
                connection.close()  # the test client leaves each thread's connection open

        threads = [threading.Thread(target=probe_once) for _ in range(64)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60
        while not probes and time.monotonic() < deadline:
            threading.Event().wait(0.01)
        assert probes, f"no /healthz request reached the probe (answers so far: {statuses})"
        assert api.get("/api/v1/agents/me").status_code == 200  # answered while a probe is in flight
        gate.set()
        for thread in threads:
            thread.join(30)
    finally:
        services.HEALTH_CHECKS.pop("slow_test_probe", None)
        services._health_last = None
    assert len(statuses) == 64 and set(statuses) <= {200, 503}
    assert len(probes) == 1


@pytest.mark.django_db
def test_api_docs_and_schema_render(client, django_user_model):
    schema = client.get("/api/schema/?format=json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    for route in ("/api/v1/tools", "/api/v1/tools/execute", "/api/v1/security/check-command", "/api/v1/security/scrub",
                  "/api/v1/invocations", "/api/v1/agents/me"):
        assert route in paths
    docs = client.get("/api/docs/")
    assert docs.status_code == 200 and b"swagger" in docs.content.lower()


def test_openapi_schema_generates_without_warnings_and_documents_bearer_tokens(tmp_path, capsys):
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yml"))
    schema = (tmp_path / "schema.yml").read_text()
    assert "AgentToken:" in schema and "scheme: bearer" in schema
