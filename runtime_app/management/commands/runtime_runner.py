"""`manage.py runtime_runner`: advance hosted agents' sessions until stopped (SIGTERM / SIGINT). `up` starts one;
more may run anywhere against the same database (docs/runtime.md)."""
from __future__ import annotations

import signal
import threading

from goclaw.management.base import OperationalCommand
from runtime_app.runner import Runner


class Command(OperationalCommand):
    help = "Run hosted agents' sessions (leases runnable sessions from the database; stop with SIGTERM)."

    def add_arguments(self, parser):
        parser.add_argument("--threads", type=int, default=None, help="sessions advanced at once "
                                                                       "(default GOCLAW_RUNTIME_THREADS, 16)")

    def handle(self, *args, threads, **options):
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, frame: stop.set())
        runner = Runner(threads=threads).start()
        self.stdout.write(f"runtime runner {runner.owner}: {runner.threads} threads")
        stop.wait()
        runner.stop()
        self.stdout.write("runtime runner stopped; its sessions were handed back")
