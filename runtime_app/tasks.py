"""django-q2 entry points of hosted agents: one service call each."""
from __future__ import annotations

from runtime_app.spawn import subagents_archive
from runtime_app.teamwork import members_stuck_sweep


def archive_subagents() -> int:
    """Archive subagent sessions that ended longer ago than their agent's archive_after_minutes (default 60)."""
    return subagents_archive()


def team_members_stuck_sweep() -> int:
    """Escalate hosted team members whose runs made no progress for GOCLAW_TEAM_STUCK_MINUTES (runtime_app.teamwork)."""
    return members_stuck_sweep()
