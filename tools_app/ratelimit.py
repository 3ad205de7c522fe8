"""Token buckets shared by every process: one SQL statement (PostgreSQL) or one Lua call (Redis) per call,
however many buckets the call is counted in (its session, its user, its agent).

A bucket holds `limit` tokens and refills at limit/3600 per second, so bursts up to the hourly limit are
allowed and the long-run rate is `limit` calls an hour. A call takes one token from every bucket or from none:
a refused call costs nothing, so a flood on one fresh session key cannot drain its user's or agent's budget
any faster than the calls that were allowed. Idle keys are deleted by a scheduled task (PostgreSQL) or expire
by TTL (Redis); an idle bucket is full anyway, so forgetting it changes nothing.
"""
from __future__ import annotations

import threading
import time
from typing import Sequence

import orjson
from django.conf import settings
from django.db import connection

from goclaw.db import PreparedStatement, pg_text

WINDOW_SECONDS = 3600.0

# `locked` locks the existing rows in key order (no deadlock between calls sharing buckets) and, under READ
# COMMITTED, returns their latest committed state; `level` refills each bucket (a missing row is a full one);
# the upsert takes one token from every bucket only when none is empty, computing from the row it updates, so
# two calls racing to create the same bucket both pay. The statement returns the empty buckets' positions.
# $1 the buckets as JSON ([{"key", "cap"}, …]: one text parameter binds faster than two arrays), $2 the refill
# window in seconds. Prepared once per connection, parameters bound on the server: parsing and planning these
# CTEs cost more than running them.
#
# Run on its own (autocommit, the pipeline's case) the statement also makes its own commit asynchronous
# (`set_config(…, true)` lasts until that commit): the commit does not wait for the WAL flush, so the rows it
# locked — the agent's bucket is shared by all its calls — are free again at once instead of after a disk flush,
# which serialized an agent's concurrent calls. What that gives up: after a PostgreSQL crash (not a process
# crash) up to wal_writer_delay × 3 (0.6 s by default) of bucket updates may be lost, i.e. a few calls counted
# against no bucket. The audit row keeps a synchronous commit: an answered call's row is always durable. Inside
# a caller's transaction the plain statement runs, so the caller's own commit stays synchronous.
_PG_SQL = """
WITH wanted AS MATERIALIZED (
    SELECT w.key, w.cap, w.pos FROM ROWS FROM (json_to_recordset($1::json) AS (key text, cap float8))
                                    WITH ORDINALITY AS w(key, cap, pos)
), locked AS MATERIALIZED (
    SELECT b.key, b.tokens, b.updated_at FROM tools_app_ratelimitbucket b
    WHERE b.key = ANY(ARRAY(SELECT key FROM wanted)) ORDER BY b.key FOR UPDATE
), level AS (
    SELECT w.key, w.cap, w.pos,{async_commit}
           LEAST(w.cap, COALESCE((SELECT c.tokens + GREATEST(0, EXTRACT(EPOCH FROM (now() - c.updated_at))) * w.cap / $2
                                  FROM locked c WHERE c.key = w.key), w.cap)) AS tokens
    FROM wanted w
), take AS (
    INSERT INTO tools_app_ratelimitbucket AS b (key, tokens, updated_at, last_allowed)
    SELECT l.key, l.cap - 1, now(), true FROM level l WHERE NOT EXISTS (SELECT 1 FROM level e WHERE e.tokens < 1)
    ORDER BY l.key
    ON CONFLICT (key) DO UPDATE SET
        tokens = LEAST(EXCLUDED.tokens + 1, b.tokens + GREATEST(0, EXTRACT(EPOCH FROM (now() - b.updated_at)))
                                                   * (EXCLUDED.tokens + 1) / $2) - 1,
        updated_at = now(), last_allowed = true
)
SELECT pos - 1 FROM level WHERE tokens < 1 ORDER BY pos
"""
_PG_TAKE = PreparedStatement(_PG_SQL.format(async_commit=""))
# `level` has a row per bucket and is read whole, so set_config runs (once per bucket) on every call.
_PG_TAKE_ASYNC = PreparedStatement(_PG_SQL.format(
    async_commit=" set_config('synchronous_commit', 'off', true) AS async_commit,"))

_REDIS_LUA = """
local now = tonumber(ARGV[1]); local window = tonumber(ARGV[2])
local levels = {}; local empty = {}
for i, key in ipairs(KEYS) do
  local cap = tonumber(ARGV[i + 2])
  local state = redis.call('HMGET', key, 't', 'u')
  local tokens = tonumber(state[1]); local updated = tonumber(state[2])
  if tokens == nil or updated == nil then tokens = cap; updated = now end
  tokens = math.min(cap, tokens + math.max(0, now - updated) * cap / window)
  levels[i] = tokens
  if tokens < 1 then empty[#empty + 1] = i - 1 end
end
if #empty == 0 then
  for i, key in ipairs(KEYS) do
    redis.call('HSET', key, 't', tostring(levels[i] - 1), 'u', tostring(now))
    redis.call('EXPIRE', key, math.ceil(window) + 60)
  end
end
return empty
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


def rate_limit_take(buckets: Sequence[tuple[str, int]]) -> list[int]:
    """Take one token from each (key, limit per hour) bucket, or none if any is empty. Returns the positions of
    the empty buckets (an empty list: the call is allowed). A limit of 0 or less disables that bucket."""
    active = [(i, key, limit) for i, (key, limit) in enumerate(buckets) if limit > 0]
    if not active:
        return []
    if len({key for _, key, _ in active}) != len(active):
        raise ValueError("rate_limit_take: bucket keys must be distinct")
    if settings.REDIS_URL:
        # Several keys in one script: they must live on one node (a single Redis, not Redis Cluster).
        empty = _redis_client()(keys=[f"goclaw:rl:{key}" for _, key, _ in active],
                                args=[time.time(), WINDOW_SECONDS, *(limit for _, _, limit in active)])
    else:
        statement = _PG_TAKE if connection.in_atomic_block else _PG_TAKE_ASYNC
        buckets_json = orjson.dumps([{"key": pg_text(key[:300]), "cap": float(limit)} for _, key, limit in active])
        rows = statement.run([buckets_json.decode(), WINDOW_SECONDS])
        empty = [row[0] for row in rows]
    return [active[int(pos)][0] for pos in empty]


def rate_limit_allow(key: str, limit_per_hour: int) -> bool:
    """Take one token from `key`'s bucket; False when it is empty. A limit of 0 disables limiting."""
    return not rate_limit_take([(key, limit_per_hour)])


def rate_limit_cleanup(idle_seconds: float = WINDOW_SECONDS) -> int:
    """Delete PostgreSQL buckets idle for longer than a full refill."""
    from datetime import timedelta

    from django.utils import timezone

    from tools_app.models import RateLimitBucket

    deleted, _ = RateLimitBucket.objects.filter(updated_at__lt=timezone.now() - timedelta(seconds=idle_seconds)).delete()
    return deleted
