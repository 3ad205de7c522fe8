"""Releasing several threads at once against the real database (the concurrency tests of the board and of
delegations): each thread has its own connection, closed when it is done."""
from __future__ import annotations

import threading
from typing import Any, Callable

from django.db import connection


def race(work: Callable[[Any], Any], inputs: list[Any]) -> list[Any]:
    """Run work(input) in one thread per input, all released at once; return results (or exceptions) in order."""
    barrier = threading.Barrier(len(inputs))
    results: list[Any] = [None] * len(inputs)

    def run(index: int, item: Any) -> None:
        barrier.wait()
        try:
            results[index] = work(item)
        except Exception as exc:  # the caller asserts on the exception types
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, item)) for i, item in enumerate(inputs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results
