"""A persistent database connection the server ended while it sat idle (a PostgreSQL restart, an idle timeout,
pg_terminate_backend) is closed when the next request starts, so that request connects again instead of failing
with a 503 on the dead session."""
import select
import time

import psycopg
import pytest
from django.db import connection

from goclaw.management.commands.up import database_url

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def persistent_connections(monkeypatch):
    """Connections kept between requests, as in production (tests otherwise close them after every request)."""
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 600)
    connection.close()
    yield
    connection.close()


def end_session_from_elsewhere(pid: int) -> None:
    with psycopg.connect(database_url(), autocommit=True) as other:
        assert other.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
    deadline = time.monotonic() + 5
    while connection.connection is not None and time.monotonic() < deadline:  # the termination reaches the socket
        if select.select([connection.connection.fileno()], [], [], 0.05)[0]:
            return


def test_a_request_after_the_server_ended_the_idle_connection_connects_again(api, persistent_connections):
    assert api.get("/api/v1/invocations").status_code == 200
    assert connection.connection is not None  # kept for the next request
    pid = connection.connection.info.backend_pid
    end_session_from_elsewhere(pid)
    response = api.get("/api/v1/invocations")
    assert response.status_code == 200, response.content
    assert connection.connection.info.backend_pid != pid


def test_a_live_idle_connection_is_kept(api, persistent_connections):
    assert api.get("/api/v1/invocations").status_code == 200
    pid = connection.connection.info.backend_pid
    assert api.get("/api/v1/invocations").status_code == 200
    assert connection.connection.info.backend_pid == pid
