"""Placeholder: the handoff and delegate tools and their tool source."""


def register() -> None:
    return None
