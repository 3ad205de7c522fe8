"""The per-process caches that follow a generation counter in PostgreSQL (goclaw/generations.py)."""
import pytest

from goclaw.generations import generation_bump, generation_cache

pytestmark = pytest.mark.django_db


def test_a_cached_value_is_served_until_its_generation_moves():
    cache, computed = generation_cache("test-gen-basic"), []

    def compute():
        computed.append(1)
        return len(computed)

    assert cache.get("k", compute) == 1 and cache.get("k", compute) == 1
    generation_bump("test-gen-basic")
    assert cache.get("k", compute) == 2


def test_a_value_computed_while_the_generation_moved_is_not_kept():
    """A reader that read the old state while a writer changed it must not file that old value under the new
    generation, where nothing would ever drop it."""
    cache, state = generation_cache("test-gen-race"), {"value": "old"}

    def compute_while_a_change_lands():
        seen = state["value"]
        state["value"] = "new"
        generation_bump("test-gen-race")  # the change (and its counter) land while this read is under way
        cache.sync()                      # another thread of this process notices the new generation
        return seen

    assert cache.get("k", compute_while_a_change_lands) == "old"
    assert cache.get("k", lambda: state["value"]) == "new"
