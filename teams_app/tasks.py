"""django-q2 entry points of teams_app."""


def board_sweep() -> dict:
    """Every minute: expired locks back to pending, long-waiting tasks marked stale (services/sweeps.py)."""
    from teams_app.services.sweeps import board_sweep as sweep

    return sweep()
