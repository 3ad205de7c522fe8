"""What a server process does once its app is loaded, before its first request (goclaw/wsgi.py, goclaw/asgi.py)."""
from __future__ import annotations

import gc
from collections.abc import Callable


# A young collection every 7,000 net allocations rather than 700: a WebSocket server fanning one event out to 1,000
# sockets allocates ~7,000 objects, and every 100 young collections the collector walks everything alive.
GC_THRESHOLDS = (7_000, 10, 10)

_WARMERS: list[Callable[[], object]] = []


def warmer_register(warmer: Callable[[], object]) -> None:
    """An app's one-time work (a compiled table, a parser's import) that a server does before its first request
    instead of during it; a management command, which never needs it, never pays for it."""
    _WARMERS.append(warmer)


def warm() -> None:
    """Run every app's warmer (servers: settle() below, and the MCP server's app)."""
    for warmer in _WARMERS:
        warmer()


def settle() -> None:
    """Load what the first request would (the URLconf: every view, serializer and admin page; the apps' warmers),
    then move every object alive now into the garbage collector's permanent generation, and collect less often.
    Those objects live as long as the process anyway; left to the collector, every full collection walked all of
    them again: ~220 ms during which a WebSocket server with 1,000 sockets delivered nothing, every ~10 events
    (benchmarks/bench_ws_fanout.py; ~110-160 ms after the freeze alone)."""
    from django.conf import settings
    from django.urls import get_resolver

    if settings.TESTING:  # a test process imports the app to call it in-process: its collector stays as it is
        return
    get_resolver().url_patterns  # noqa: B018 - imported for its side effect
    warm()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
