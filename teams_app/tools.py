"""Placeholder: the team_tasks and team_message tools and their tool source."""


def register() -> None:
    return None
