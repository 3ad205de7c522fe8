"""django-q2 entry points of hosted agents: one service call each."""
from __future__ import annotations

from runtime_app.spawn import subagents_archive


def archive_subagents() -> int:
    """Archive subagent sessions that ended longer ago than their agent's archive_after_minutes (default 60)."""
    return subagents_archive()
