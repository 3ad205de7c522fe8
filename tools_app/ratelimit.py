"""Per-session token buckets shared by every process: one SQL upsert (PostgreSQL) or one Lua call (Redis).

A bucket holds `limit` tokens and refills at limit/3600 per second, so bursts up to the hourly limit are
allowed and the long-run rate is `limit` calls an hour. Idle keys are deleted by a scheduled task
(PostgreSQL) or expire by TTL (Redis); an idle bucket is full anyway, so forgetting it changes nothing.
"""
from __future__ import annotations

import threading

from django.conf import settings
from django.db import connection

from goclaw.db import pg_text

WINDOW_SECONDS = 3600.0

_PG_SQL = """
INSERT INTO tools_app_ratelimitbucket AS b (key, tokens, updated_at, last_allowed)
VALUES (%(key)s, %(cap)s - 1, now(), true)
ON CONFLICT (key) DO UPDATE SET
    tokens = CASE WHEN LEAST(%(cap)s, b.tokens + GREATEST(0, EXTRACT(EPOCH FROM (now() - b.updated_at))) * %(rate)s) >= 1
                  THEN LEAST(%(cap)s, b.tokens + GREATEST(0, EXTRACT(EPOCH FROM (now() - b.updated_at))) * %(rate)s) - 1
                  ELSE LEAST(%(cap)s, b.tokens + GREATEST(0, EXTRACT(EPOCH FROM (now() - b.updated_at))) * %(rate)s) END,
    last_allowed = LEAST(%(cap)s, b.tokens + GREATEST(0, EXTRACT(EPOCH FROM (now() - b.updated_at))) * %(rate)s) >= 1,
    updated_at = now()
RETURNING last_allowed
"""

_REDIS_LUA = """
local cap = tonumber(ARGV[1]); local rate = tonumber(ARGV[2]); local now = tonumber(ARGV[3])
local state = redis.call('HMGET', KEYS[1], 't', 'u')
local tokens = tonumber(state[1]); local updated = tonumber(state[2])
if tokens == nil then tokens = cap; updated = now end
tokens = math.min(cap, tokens + math.max(0, now - updated) * rate)
local allowed = 0
if tokens >= 1 then tokens = tokens - 1; allowed = 1 end
redis.call('HSET', KEYS[1], 't', tostring(tokens), 'u', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(cap / rate) + 60)
return allowed
"""


def _redis_client():
    global _redis, _redis_script
    with _redis_lock:
        if _redis is None:
            import redis

            _redis = redis.Redis.from_url(settings.REDIS_URL)
            _redis_script = _redis.register_script(_REDIS_LUA)
    return _redis_script


_redis = None
_redis_script = None
_redis_lock = threading.Lock()


def rate_limit_allow(key: str, limit_per_hour: int) -> bool:
    """Take one token from `key`'s bucket; False when it is empty. A limit of 0 disables limiting."""
    if limit_per_hour <= 0:
        return True
    rate = limit_per_hour / WINDOW_SECONDS
    if settings.REDIS_URL:
        import time

        return bool(_redis_client()(keys=[f"goclaw:rl:{key}"], args=[limit_per_hour, rate, time.time()]))
    with connection.cursor() as cur:
        cur.execute(_PG_SQL, {"key": pg_text(key[:300]), "cap": float(limit_per_hour), "rate": rate})
        return bool(cur.fetchone()[0])


def rate_limit_cleanup(idle_seconds: float = WINDOW_SECONDS) -> int:
    """Delete PostgreSQL buckets idle for longer than a full refill."""
    from datetime import timedelta

    from django.utils import timezone

    from tools_app.models import RateLimitBucket

    deleted, _ = RateLimitBucket.objects.filter(updated_at__lt=timezone.now() - timedelta(seconds=idle_seconds)).delete()
    return deleted
