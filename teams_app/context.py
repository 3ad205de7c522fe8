"""Placeholder: TEAM.md and DELEGATION.md, generated context files served by the context API (P10)."""


def register() -> None:
    return None
