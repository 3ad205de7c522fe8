"""Placeholder: Team, TeamTask, TeamEvent, TeamMessage admin."""
