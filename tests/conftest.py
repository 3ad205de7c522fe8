"""Test set-up: one embedded PostgreSQL (with pgvector) for the whole run, outside the repo."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

TEST_PGDATA = Path(os.environ.get("GOCLAW_TEST_PGDATA", "/tmp/goclaw-pgtest/data"))


@pytest.fixture(scope="session")
def embedded_pg():
    from goclaw.embedded_db import get_embedded_server

    fresh = not (TEST_PGDATA / "PG_VERSION").exists()
    server = get_embedded_server(TEST_PGDATA, cleanup_mode="stop")
    if fresh:
        server.psql("ALTER SYSTEM SET fsync=off; ALTER SYSTEM SET synchronous_commit=off; "
                    "ALTER SYSTEM SET full_page_writes=off; SELECT pg_reload_conf();")
    yield server
    server.cleanup()


@pytest.fixture(scope="session")
def django_db_modify_db_settings(embedded_pg, django_db_modify_db_settings_parallel_suffix):
    from django.conf import settings

    from goclaw.embedded_db import db_settings_from_uri

    if os.environ.get("DATABASE_URL"):
        return
    settings.DATABASES["default"].update(db_settings_from_uri(embedded_pg.get_uri(database="postgres")))
    settings.DATABASES["default"]["NAME"] = "goclaw"


@pytest.fixture
def agent(db):
    from tests.factories import make_agent

    return make_agent()


@pytest.fixture
def agent_token(agent):
    from tools_app.services.agents import token_issue

    return token_issue(agent=agent, name="test")[1]


@pytest.fixture
def api(agent_token):
    """A DRF client authenticated as the `agent` fixture."""
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_token}")
    return client


@pytest.fixture
def staff_api(db, django_user_model):
    from rest_framework.test import APIClient

    user = django_user_model.objects.create_user("staff", password="pw-staff-123", is_staff=True)
    client = APIClient()
    client.force_login(user)
    return client
