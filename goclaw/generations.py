"""Per-process caches of values derived from shared data, kept consistent across processes.

Each named cache has a counter row in PostgreSQL (`CacheGeneration`). A write that changes the data behind a cache
calls `generation_bump(name)` inside its transaction; every process reads all counters at most every
`CHECK_SECONDS` (one indexed query, shared by every cache) and drops a cache whose counter moved. So no process
serves a value older than the change by more than `CHECK_SECONDS` plus one request.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

from django.db import transaction
from django.db.models import F

from goclaw.models import CacheGeneration

CHECK_SECONDS = 0.5
MAX_ENTRIES = 10_000
MISSING = object()  # what `peek` answers when only a query (or a computation) could answer


class _Counters:
    """This process's view of every counter, refreshed at most every CHECK_SECONDS."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.values: dict[str, int] = {}
        self.checked_at: float | None = None

    def current(self) -> dict[str, int]:
        now = time.monotonic()
        if self.checked_at is not None and now - self.checked_at < CHECK_SECONDS:
            return self.values
        values = dict(CacheGeneration.objects.values_list("name", "value"))
        with self.lock:
            self.values, self.checked_at = values, now
        return values

    def fresh(self) -> dict[str, int] | None:
        """The counters if they were read less than CHECK_SECONDS ago, else None (never a query)."""
        checked_at = self.checked_at
        if checked_at is not None and time.monotonic() - checked_at < CHECK_SECONDS:
            return self.values
        return None

    def expire(self) -> None:
        with self.lock:
            self.checked_at = None


_counters = _Counters()
_caches: dict[str, "GenerationCache"] = {}


class GenerationCache:
    """A memo (key → value) valid while the named generation stays where it was when the value was computed."""

    def __init__(self, name: str, max_entries: int = MAX_ENTRIES) -> None:
        self.name, self.max_entries = name, max_entries
        self.lock = threading.Lock()
        self.entries: dict[Any, Any] = {}
        self.generation: int | None = None
        _caches[name] = self

    def sync(self) -> int:
        """The current generation (entries computed under an older one are dropped first)."""
        value = _counters.current().get(self.name, 0)
        if value != self.generation:
            with self.lock:
                if value != self.generation:
                    self.entries.clear()
                    self.generation = value
        return value

    def peek_generation(self) -> int | None:
        """`sync()` when it needs no query (the counters are fresh), else None: for code that must not wait on the
        database, e.g. on an event loop, and does the work in a thread when this says None."""
        values = _counters.fresh()
        if values is None or values.get(self.name, 0) != self.generation:
            return None
        return self.generation

    def peek(self, key: Any) -> Any:
        """`get(key, ...)`'s value when it is cached and current without a query, else MISSING."""
        return MISSING if self.peek_generation() is None else self.entries.get(key, MISSING)

    def get(self, key: Any, compute: Callable[[], Any]) -> Any:
        generation = self.sync()
        value = self.entries.get(key, MISSING)
        if value is MISSING:
            value = compute()
            with self.lock:
                # Kept only if the generation did not move while it was computed: a value read before a change
                # must never be filed under the change's generation (it would outlive it).
                if self.generation == generation:
                    if len(self.entries) >= self.max_entries:
                        self.entries.clear()
                    self.entries[key] = value
        return value

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()
            self.generation = None
        _counters.expire()


def generation_cache(name: str) -> GenerationCache:
    """The process's cache called `name` (created on first use)."""
    return _caches.get(name) or GenerationCache(name)


def generation_bump(name: str) -> None:
    """Say the data behind cache `name` changed. Call it inside the writing transaction: the new counter becomes
    visible to other processes with the change. This process's cache is dropped now (the writer sees its own
    change) and again at commit (another thread may have cached the old state meanwhile)."""
    if not CacheGeneration.objects.filter(name=name).update(value=F("value") + 1):
        CacheGeneration.objects.get_or_create(name=name, defaults={"value": 1})
    cache = generation_cache(name)
    cache.clear()
    transaction.on_commit(cache.clear)


def generation_caches_clear() -> None:
    """Drop every cache of this process (tests: a rolled-back write leaves no trace in the counters)."""
    for cache in list(_caches.values()):
        cache.clear()
