"""Looking at the host's processes from a test: which are still alive after a sandboxed run."""
from __future__ import annotations

import os
import secrets
import threading
import time
from contextlib import contextmanager


def live_pids_with_cmdline(*parts: str) -> list[int]:
    """Live (not zombie) host processes whose command line holds `parts` as consecutive arguments."""
    wanted = "\0".join(parts).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if wanted not in fh.read():
                    continue
            with open(f"/proc/{entry}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X"):
                    found.append(int(entry))
        except (OSError, IndexError):
            pass
    return found


def wait_no_leftovers(*parts: str, seconds: float = 5.0) -> list[int]:
    """The processes matching `parts` still alive once they had `seconds` to go (killed ones need a moment to be
    reaped)."""
    end = time.monotonic() + seconds
    while live_pids_with_cmdline(*parts) and time.monotonic() < end:
        time.sleep(0.05)
    return live_pids_with_cmdline(*parts)


def sleep_marker() -> str:
    """A `sleep` argument no other process on the machine uses, to find a run's processes by command line."""
    return str(800000 + secrets.randbelow(99999))


@contextmanager
def cancel_once_running(*parts: str, count: int = 1, seconds: float = 60.0):
    """A cancel event another thread sets as soon as `count` processes matching `parts` are alive (so the run
    really started them). After `seconds` it gives up and leaves the event unset: a run that never started them
    then ends on its own timeout and the test fails on that, not by hanging."""
    cancel = threading.Event()
    stop = threading.Event()

    def watch() -> None:
        end = time.monotonic() + seconds
        while not stop.is_set() and time.monotonic() < end:
            if len(live_pids_with_cmdline(*parts)) >= count:
                cancel.set()
                return
            stop.wait(0.02)

    watcher = threading.Thread(target=watch, daemon=True, name="cancel-once-running")
    watcher.start()
    try:
        yield cancel
    finally:
        stop.set()
        watcher.join()
