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

from goclaw.db import Combiner, PreparedStatement, pg_text

WINDOW_SECONDS = 3600.0

# PostgreSQL: one statement (the function of migration 0017) takes the tokens of a batch of calls, each call
# all-or-nothing over its buckets, in order. A process's calls that arrive together share one statement (a
# `Combiner`): every call of an agent takes a token from the agent's one bucket row, so one statement per call
# made them queue on that row's lock. Prepared once per connection, parameters bound on the server.
#
# Run on its own (autocommit, the pipeline's case) the statement also makes its own commit asynchronous
# (`set_config(…, true)` lasts until that commit): the commit does not wait for the WAL flush, so the rows it
# locked are free again at once instead of after a disk flush. What that gives up: after a PostgreSQL crash (not a
# process crash) up to wal_writer_delay × 3 (0.6 s by default) of bucket updates may be lost, i.e. a few calls
# counted against no bucket. The audit row keeps a synchronous commit: an answered call's row is always durable.
# Inside a caller's transaction the call is taken alone and the caller's own commit stays synchronous.
_PG_TAKE = PreparedStatement("SELECT call_no, bucket_no FROM goclaw_rate_limit_take($1::json, $2, $3)")


def _pg_take(calls: list[list[dict]]) -> list[list[int]]:
    """Each call's empty-bucket positions, for a batch of calls ([{"key", "cap"}, …] each)."""
    rows = _PG_TAKE.run([orjson.dumps(calls).decode(), WINDOW_SECONDS, not connection.in_atomic_block])
    empty: list[list[int]] = [[] for _ in calls]
    for call_no, bucket_no in rows:
        empty[call_no].append(bucket_no)
    return empty


_pg_take_together = Combiner(_pg_take)

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
        call = [{"key": pg_text(key[:300]), "cap": float(limit)} for _, key, limit in active]
        empty = _pg_take([call])[0] if connection.in_atomic_block else _pg_take_together(call)
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
