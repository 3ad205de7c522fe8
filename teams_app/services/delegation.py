"""Delegation over agent links (docs/teams.md, "Delegation"). Placeholder until the delegation services land."""
from __future__ import annotations

from typing import Any


def delegation_task_finished(task: Any) -> None:
    """Called by the task services, in their transaction, when a task reaches completed / failed / cancelled: the
    delegation the task carries (if any) takes its outcome."""
    return None
