"""The runner: a pool of threads that lease runnable sessions and advance them (`manage.py runtime_runner`, started by
`up`; any number of them, on any hosts). Every `POLL` it claims what it has room for, tells runs whose session was
cancelled (or whose lease another runner took) to stop, and renews the leases it holds. A runner that dies leaves
its sessions to the others once their leases run out; one that stops cleanly hands them back at once."""
from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection

from runtime_app.choices import ACTIVE_STATUSES, SessionStatus
from runtime_app.loop import RunControl, session_advance
from runtime_app.models import Session
from runtime_app.services import sessions as svc

logger = logging.getLogger("goclaw.runtime")

POLL_SECONDS = 0.1
STOPPED = (SessionStatus.CANCELLED, SessionStatus.ARCHIVED)
RENEW_SECONDS = svc.LEASE_SECONDS / 3


class Runner:
    """Claims and advances sessions with `threads` threads until `stop()`."""

    def __init__(self, *, threads: int | None = None, owner: str | None = None, poll: float = POLL_SECONDS) -> None:
        self.threads = threads or settings.RUNTIME_THREADS
        self.owner = owner or svc.PROCESS_OWNER
        self.poll = poll
        self._runs: dict[Any, RunControl] = {}
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="goclaw-run")
        self._thread: threading.Thread | None = None

    # --- life ---------------------------------------------------------------------------------------------------
    def start(self) -> "Runner":
        self._thread = threading.Thread(target=self.run_forever, name="goclaw-runner", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop claiming, stop every run (their sessions stay running: another runner resumes them from their
        messages), wait for the threads, and hand the leases back."""
        self._stop.set()
        self._wake.set()
        with self._lock:
            for control in self._runs.values():
                control.cancel.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._pool.shutdown(wait=True, cancel_futures=True)
        try:
            svc.session_leases_release_all(owner=self.owner)
        finally:
            connection.close()

    def wake(self) -> None:
        self._wake.set()

    @property
    def active(self) -> int:
        with self._lock:
            return len(self._runs)

    def wait_idle(self, seconds: float) -> bool:
        """Wait until no run is in progress (tests, benchmarks); False if `seconds` passed first."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._runs, timeout=seconds)

    def run_forever(self) -> None:
        last_renew = time.monotonic()
        while not self._stop.is_set():
            try:
                close_old_connections()
                self._watch()
                if time.monotonic() - last_renew >= RENEW_SECONDS:
                    self._renew()
                    last_renew = time.monotonic()
                self._claim()
            except Exception:  # the database went away, …: log, wait a moment, go on
                logger.exception("runner %s: poll failed", self.owner)
                connection.close()
            self._wake.wait(self.poll)
            self._wake.clear()
        connection.close()

    # --- each poll ----------------------------------------------------------------------------------------------
    def _claim(self) -> None:
        room = self.threads - self.active
        if room <= 0 or self._stop.is_set():
            return
        for session_id in svc.session_claim(owner=self.owner, limit=room):
            control = RunControl(owner=self.owner)
            with self._lock:
                self._runs[session_id] = control
            self._pool.submit(self._work, session_id, control)

    def _watch(self) -> None:
        """Stop the runs whose session was cancelled (or archived) or is now leased to someone else: the runner's own
        and the synchronous runs this process drives. A session that ended by itself needs no stop (and a caller
        may pass the same cancel event to its next synchronous run)."""
        with self._lock:
            runs = {session_id: (self.owner, control.cancel) for session_id, control in self._runs.items()}
        runs.update(svc.held_leases())
        if not runs:
            return
        rows = Session.objects.filter(pk__in=list(runs)).values_list("pk", "status", "lease_owner")
        stop = {pk for pk, status, owner in rows
                if status in STOPPED or (status in ACTIVE_STATUSES and owner != runs[pk][0])}
        stop |= set(runs) - {pk for pk, _, _ in rows}  # deleted
        held = svc.held_leases()  # again, now: a synchronous run that ended meanwhile has left, its event reused
        for session_id in stop:
            owner, cancel = runs[session_id]
            if session_id in self._runs or held.get(session_id, (None, None))[1] is cancel:
                cancel.set()

    def _renew(self) -> None:
        with self._lock:
            ids = set(self._runs)
        by_owner: dict[str, set] = {self.owner: ids}
        for session_id, (owner, _) in svc.held_leases().items():  # synchronous subagent runs of this process
            by_owner.setdefault(owner, set()).add(session_id)
        for owner, held in by_owner.items():
            svc.session_leases_renew(owner=owner, ids=held)

    def _work(self, session_id, control: RunControl) -> None:
        try:
            result = session_advance(session_id, control)
            if result == "lost":  # cancelled, taken over or stopping: give back what is still ours
                svc.session_release(session_id=session_id, owner=self.owner)
        except Exception:
            logger.exception("session %s: the run failed", session_id)
            try:
                svc.run_end(session_id=session_id, owner=self.owner, status="failed", end_reason="runtime_error",
                            error="the run failed inside goclaw (see the server log)")
            except Exception:
                logger.exception("session %s: could not record the failure", session_id)
        finally:
            with self._lock:
                self._runs.pop(session_id, None)
                self._idle.notify_all()
            connection.close()
            self._wake.set()
