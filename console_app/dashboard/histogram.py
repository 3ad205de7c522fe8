"""Fixed log-scale duration buckets shared by the rollup (SQL) and the dashboard (percentiles): bucket 0 holds
calls under 0.25 ms, bucket i >= 1 holds [0.25·√2^(i-1), 0.25·√2^i) ms, the last one everything from ~185 s."""
from __future__ import annotations

import math

BUCKETS = 40
FIRST_MS = 0.25
RATIO = math.sqrt(2)

# The bucket index of `duration_ms` (a float column), as SQL; log2(x) = ln(x) / ln(2), doubled for √2 steps.
BUCKET_SQL = (f"(CASE WHEN duration_ms < {FIRST_MS} THEN 0 ELSE LEAST({BUCKETS - 1}, "
              f"1 + floor(2 * ln(duration_ms / {FIRST_MS}) / ln(2))::int) END)")
# One int[BUCKETS] per group: how many of its rows fell in each bucket.
HISTOGRAM_SQL = "ARRAY[" + ", ".join(f"count(*) FILTER (WHERE {BUCKET_SQL} = {i})" for i in range(BUCKETS)) + "]::int[]"


def bucket_of(duration_ms: float) -> int:
    """The bucket the SQL above puts `duration_ms` in (tests and raw rows read in Python use it)."""
    if duration_ms < FIRST_MS:
        return 0
    return min(BUCKETS - 1, 1 + math.floor(2 * math.log(duration_ms / FIRST_MS) / math.log(2)))


def bucket_bounds(i: int) -> tuple[float, float]:
    """[low, high) of bucket `i` in ms; the last bucket is open (high = inf)."""
    if i == 0:
        return 0.0, FIRST_MS
    high = math.inf if i == BUCKETS - 1 else FIRST_MS * RATIO ** i
    return FIRST_MS * RATIO ** (i - 1), high


def percentile(counts: list[int], q: float) -> float | None:
    """The q-quantile (0 < q < 1) of a histogram, interpolated on a log scale inside its bucket (within ±19 %
    of the exact value); the open last bucket answers its lower bound. None when the histogram is empty."""
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for i, n in enumerate(counts):
        if n and seen + n >= rank:
            low, high = bucket_bounds(i)
            frac = (rank - seen) / n
            if i == 0:
                return low + (high - low) * frac
            if math.isinf(high):
                return low
            return low * (high / low) ** frac
        seen += n
    return bucket_bounds(len(counts) - 1)[0]
