"""Threads released together, for tests of what concurrent callers of one process do."""
from __future__ import annotations

import threading

from django.db import connection


def at_once(target, count: int) -> list:
    """target(n) on `count` threads released together; their answers by n (exceptions re-raised here)."""
    barrier = threading.Barrier(count)
    answers: list = [None] * count
    errors: list[BaseException] = []

    def body(n):
        try:
            barrier.wait()
            answers[n] = target(n)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=body, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not any(thread.is_alive() for thread in threads), "a thread never returned"
    if errors:
        raise errors[0]
    return answers
