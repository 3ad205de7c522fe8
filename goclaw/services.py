"""Platform-level services: worker heartbeat, recurring schedules, health."""
from __future__ import annotations

import os
import socket
import threading
import time
from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from goclaw.models import WorkerHeartbeat

HEARTBEAT_TASK = "goclaw.tasks.heartbeat"
HEARTBEAT_MAX_AGE = timedelta(seconds=90)
# name -> (function path, 6-field cron: the last field is seconds, needs croniter); apps add theirs from
# AppConfig.ready() with schedule_register (goclaw imports no app).
SCHEDULES = {
    "goclaw heartbeat": (HEARTBEAT_TASK, "* * * * * */30"),
    # The audit chains' heads: rows deleted from a chain's end after its head was recorded fail verification.
    "goclaw audit checkpoint": ("goclaw.tasks.audit_checkpoint", "* * * * * */10"),
}


def schedule_register(name: str, func: str, cron: str) -> None:
    """Add a recurring django-q2 job that `schedules_ensure` creates after every migrate. `func` is a dotted path
    (the worker imports it), so registering imports nothing."""
    SCHEDULES[name] = (func, cron)


def heartbeat_record(name: str = "qcluster") -> WorkerHeartbeat:
    beat, _ = WorkerHeartbeat.objects.update_or_create(
        name=name, defaults={"beat_at": timezone.now(), "pid": os.getpid(), "host": socket.gethostname()}
    )
    return beat


@transaction.atomic
def schedules_ensure(extra: dict[str, tuple[str, str]] | None = None) -> None:
    """Create or update the recurring django-q2 schedules (idempotent; runs after every migrate)."""
    from django_q.models import Schedule

    for name, (func, cron) in {**SCHEDULES, **(extra or {})}.items():
        Schedule.objects.update_or_create(
            name=name, defaults={"func": func, "schedule_type": Schedule.CRON, "cron": cron, "repeats": -1}
        )


def database_check() -> str | None:
    """Why the configured database cannot run goclaw (unreachable, or no pgvector available), else None."""
    try:
        with connection.cursor() as cur:
            cur.execute("select 1 from pg_available_extensions where name = 'vector'")
            if cur.fetchone() is None:
                return ("the database has no `vector` extension available: install pgvector on that server "
                        "(or unset DATABASE_URL to use the embedded PostgreSQL, which ships it)")
    except Exception as exc:
        return f"cannot reach the database: {str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}"
    return None


# name -> probe returning {"ok": bool, ...}; apps add theirs from AppConfig.ready() (goclaw imports no app).
HEALTH_CHECKS: dict = {}


def health_check_register(name: str, probe) -> None:
    """Add an app's probe to /healthz; it must answer quickly and report (not raise) what is wrong."""
    HEALTH_CHECKS[name] = probe


_health_lock = threading.Lock()
_health_last: tuple[float, dict] | None = None


def health_status_shared() -> dict:
    """`health_status()` run by one thread at a time and reused for HEALTH_CACHE_SECONDS: a burst of /healthz
    requests costs one round of probes, and while one thread probes, the others answer with the last result
    instead of queueing behind it (only the very first probe of a process makes others wait)."""
    global _health_last
    from django.conf import settings

    last = _health_last
    if last is not None and time.monotonic() - last[0] < settings.HEALTH_CACHE_SECONDS:
        return last[1]
    if not _health_lock.acquire(blocking=last is None):
        return last[1]
    try:
        if _health_last is not last and _health_last is not None:  # another thread probed while we waited
            return _health_last[1]
        status = health_status()
        _health_last = (time.monotonic(), status)
        return status
    finally:
        _health_lock.release()


def health_status() -> dict:
    """Probe database, pgvector, worker heartbeat, channel layer and every registered app check; `ok` is False
    when any is down."""
    checks: dict[str, dict] = {}
    try:
        with connection.cursor() as cur:
            cur.execute("select 1")
            checks["database"] = {"ok": True}
            cur.execute("select extversion from pg_extension where extname = 'vector'")
            row = cur.fetchone()
            if row is None:
                cur.execute("select default_version from pg_available_extensions where name = 'vector'")
                avail = cur.fetchone()
                checks["pgvector"] = {"ok": False, "error": "extension not installed" + ("" if avail else " and not available")}
            else:
                checks["pgvector"] = {"ok": True, "version": row[0]}
    except Exception as exc:  # the probe must report, not raise
        checks["database"] = {"ok": False, "error": str(exc).splitlines()[0][:200]}
        checks["pgvector"] = {"ok": False, "error": "database unavailable"}
    try:
        beat = WorkerHeartbeat.objects.filter(name="qcluster").first() if checks["database"]["ok"] else None
        if beat is None:
            checks["worker"] = {"ok": False, "error": "no heartbeat recorded"}
        else:
            age = (timezone.now() - beat.beat_at).total_seconds()
            checks["worker"] = {"ok": age <= HEARTBEAT_MAX_AGE.total_seconds(), "last_beat": beat.beat_at.isoformat(), "age_seconds": round(age, 1)}
    except Exception as exc:
        checks["worker"] = {"ok": False, "error": str(exc).splitlines()[0][:200]}
    checks["channel_layer"] = _channel_layer_status()
    for name, probe in HEALTH_CHECKS.items():
        try:
            checks[name] = probe() if checks["database"]["ok"] else {"ok": False, "error": "database unavailable"}
        except Exception as exc:  # a probe must report, not raise
            checks[name] = {"ok": False, "error": str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__}
    return {"ok": all(c["ok"] for c in checks.values()), "checks": checks}


def _channel_layer_status() -> dict:
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    try:
        layer = get_channel_layer()
        if layer is None:
            return {"ok": False, "error": "no channel layer configured"}
        backend = type(layer).__name__
        from channels_postgres.core import PostgresChannelLayer

        # Never probe the PostgreSQL layer through async_to_sync here: its pool binds to the first event loop.
        if isinstance(layer, PostgresChannelLayer):
            # Its sends are rows in our database: healthy when the database and its tables answer.
            with connection.cursor() as cur:
                cur.execute("select count(*) from channels_postgres_groupchannel")
            return {"ok": True, "backend": backend}
        if "Redis" in backend:
            import redis
            from django.conf import settings

            redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2).ping()
            return {"ok": True, "backend": backend}
        async_to_sync(layer.group_send)("healthz", {"type": "healthz"})
        return {"ok": True, "backend": backend}
    except Exception as exc:
        return {"ok": False, "error": str(exc).splitlines()[0][:200]}


def admin_ensure(*, username: str, password: str = "", password_file=None) -> tuple[bool, str | None]:
    """Create the first superuser when no superuser exists. Returns (created, generated_password).

    A generated password is written to `password_file` with mode 0600 and returned once so `up` can print it."""
    import secrets

    from django.contrib.auth import get_user_model

    User = get_user_model()
    with transaction.atomic():
        if User.objects.filter(is_superuser=True).exists():
            return False, None
        generated = None
        if not password:
            password = generated = secrets.token_urlsafe(18)
        User.objects.create_superuser(username=username, email="", password=password)
    if generated and password_file is not None:
        password_file.parent.mkdir(parents=True, exist_ok=True)
        if password_file.exists():
            password_file.unlink()
        fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"{username}\n{generated}\n")
    return True, generated


def static_collect() -> bool:
    """collectstatic unless the static sources are exactly those collected last time (by path, size and mtime, in a
    stamp beside STATIC_ROOT): whitenoise compresses every file again on each run (~1.5 s of a restart). True when
    it collected."""
    import hashlib
    from pathlib import Path

    from django.conf import settings
    from django.contrib.staticfiles.finders import get_finders
    from django.core.management import call_command

    digest = hashlib.sha256()
    for finder in get_finders():
        for path, storage in sorted(finder.list(["CVS", ".*", "*~"]), key=lambda found: found[0]):  # collectstatic's
            stat = os.stat(storage.path(path))
            digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    root = Path(settings.STATIC_ROOT)
    stamp = root.with_name(root.name + ".sources")
    if root.is_dir() and stamp.exists() and stamp.read_text() == digest.hexdigest():
        return False
    call_command("collectstatic", interactive=False, verbosity=0)
    stamp.write_text(digest.hexdigest())
    return True
