"""django-q2 entry points for memory (scheduled from `tools_app.memory.register`)."""
from __future__ import annotations


def backfill_embeddings() -> dict:
    """Give vectors to chunks stored without one (an embedder failure) or with another model's (a switch)."""
    from tools_app.memory.indexing import memory_embeddings_backfill

    return memory_embeddings_backfill()
