"""The PostgreSQL rate-limit take over a batch of calls (the function of migration 0017, fed by a process's
concurrent calls through a Combiner): each call is all-or-nothing over its buckets and the calls are taken in
batch order, exactly as if they had come one after the other; calls at the same moment, from one process or from
several connections, never spend a token twice nor lose one."""
import time

import pytest
from django.db import connection

from tests.concurrency import at_once
from tools_app import ratelimit
from tools_app.models import RateLimitBucket
from tools_app.ratelimit import _pg_take, rate_limit_take

pytestmark = pytest.mark.django_db

THREADS = 16


@pytest.fixture(autouse=True)
def postgres_buckets(settings):
    settings.REDIS_URL = ""


def call(*buckets: tuple[str, float]) -> list[dict]:
    return [{"key": key, "cap": float(cap)} for key, cap in buckets]


def tokens(key: str) -> float:
    return RateLimitBucket.objects.get(key=key).tokens


def test_two_calls_sharing_a_bucket_with_one_token_left_first_in_batch_order_gets_it():
    assert _pg_take([call(("a:shared", 2))]) == [[]]  # one of its two tokens left
    assert _pg_take([call(("s:first", 5), ("a:shared", 2)),
                     call(("s:second", 5), ("a:shared", 2))]) == [[], [1]]  # refused at the agent bucket
    assert tokens("a:shared") == pytest.approx(0, abs=0.01)
    assert tokens("s:first") == pytest.approx(4, abs=0.01)
    assert tokens("s:second") == pytest.approx(5, abs=0.01)  # the refused call took nothing from its session


def test_a_refused_call_does_not_stop_the_later_calls_of_its_batch():
    assert _pg_take([call(("s:drained", 1))]) == [[]]
    assert _pg_take([
        call(("s:drained", 1), ("u:spared", 1)),  # refused: takes nothing, not even u:spared's one token
        call(("u:spared", 1)),  # so this one still gets it
        call(("s:drained", 1)),  # refused again
        call(("s:other", 3), ("u:other", 3)),
    ]) == [[0], [], [0], []]
    assert tokens("u:spared") == pytest.approx(0, abs=0.01)
    assert tokens("s:other") == pytest.approx(2, abs=0.01)


def test_a_refusal_names_every_empty_bucket_of_its_call_in_the_callers_order():
    assert _pg_take([call(("u:x", 1), ("s:x", 1), ("a:x", 9))]) == [[]]
    assert _pg_take([call(("a:x", 9), ("s:x", 1), ("u:x", 1))]) == [[1, 2]]
    assert tokens("a:x") == pytest.approx(8, abs=0.01)


# The same key in two calls of one batch with different caps (a limit changed between two calls made at the same
# moment): the batch answers what the same calls made one after the other answer, and leaves the same buckets.
SAME_KEY_SCENARIOS = {
    "the larger cap first": [[("k", 5)], [("k", 2)], [("k", 2)], [("k", 2)]],
    "the smaller cap first": [[("k", 1)], [("k", 3)], [("k", 3)]],
    "the smaller cap first, in a call refused elsewhere": [[("drained", 1), ("k", 1)], [("k", 3)], [("k", 3)]],
    "the larger cap first, in a call refused elsewhere": [[("drained", 1), ("k", 3)], [("k", 1)], [("k", 1)]],
}


@pytest.mark.parametrize("calls", SAME_KEY_SCENARIOS.values(), ids=SAME_KEY_SCENARIOS.keys())
def test_the_same_key_in_two_calls_with_different_caps_behaves_as_calls_one_after_the_other(calls):
    def taken(prefix: str, batched: bool):
        assert _pg_take([call((f"{prefix}:drained", 1))]) == [[]]  # empty for every scenario that names it
        asked = [call(*((f"{prefix}:{key}", cap) for key, cap in buckets)) for buckets in calls]
        answers = _pg_take(asked) if batched else [_pg_take([one])[0] for one in asked]
        left = {key.split(":", 1)[1]: round(tokens(key), 2)
                for key in RateLimitBucket.objects.filter(key__startswith=f"{prefix}:").values_list("key", flat=True)}
        return answers, left

    assert taken("batch", batched=True) == taken("one-by-one", batched=False)


def hold_first_batch_until_all_queued(monkeypatch, count: int) -> list[int]:
    """The sizes of the take's batches; the first waits (inside its run, before its statement) until all `count`
    calls are in it or queued behind it, so the others are certain to share one statement."""
    combiner = ratelimit._pg_take_together
    real, sizes = combiner.run_batch, []

    def run_batch(items):
        if not sizes:
            deadline = time.monotonic() + 10
            while len(items) + len(combiner.queue) < count:
                assert time.monotonic() < deadline, "the callers never queued"
                time.sleep(0.001)
        sizes.append(len(items))
        return real(items)

    monkeypatch.setattr(combiner, "run_batch", run_batch)
    return sizes


@pytest.mark.django_db(transaction=True)
def test_concurrent_calls_of_a_process_share_the_agents_tokens_exactly(monkeypatch):
    limit = 5
    sizes = hold_first_batch_until_all_queued(monkeypatch, THREADS)
    answers = at_once(lambda n: rate_limit_take([(f"s:together:{n}", 3), ("a:together", limit)]), THREADS)
    allowed = [n for n, empty in enumerate(answers) if empty == []]
    assert len(allowed) == limit  # no token spent twice, none lost
    assert all(empty == [1] for empty in answers if empty)  # the others were refused at the agent's bucket
    assert tokens("a:together") == pytest.approx(0, abs=0.01)
    for n in range(THREADS):  # each allowed call took from its session; a refused one took nothing
        assert tokens(f"s:together:{n}") == pytest.approx(2 if n in allowed else 3, abs=0.01)
    assert sum(sizes) == THREADS and max(sizes) > 1  # taken in shared statements, each call once


@pytest.mark.django_db(transaction=True)
def test_batches_taken_at_once_on_separate_connections_neither_double_spend_nor_deadlock():
    # What several processes do: each sends its own batch on its own connection. Calls name the shared buckets
    # in different orders, and the buckets do not exist yet (every batch races to create them).
    limit = 6

    def batch(n):
        if n % 2:
            return _pg_take([call(("a:x", limit), (f"s:{n}", 5)), call(("a:x", limit), ("a:y", 100))])
        return _pg_take([call((f"s:{n}", 5), ("a:x", limit)), call(("a:y", 100), ("a:x", limit))])

    answers = at_once(batch, THREADS)
    first_allowed = [n for n, (first, _) in enumerate(answers) if first == []]
    second_allowed = [n for n, (_, second) in enumerate(answers) if second == []]
    assert len(first_allowed) + len(second_allowed) == limit
    assert tokens("a:x") == pytest.approx(0, abs=0.01)
    assert tokens("a:y") == pytest.approx(100 - len(second_allowed), abs=0.01)
    for n in range(THREADS):
        assert tokens(f"s:{n}") == pytest.approx(4 if n in first_allowed else 5, abs=0.01)
