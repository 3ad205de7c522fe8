"""django-q2 entry points of the console."""
from console_app.dashboard.services import dashboard_rollup_refresh


def dashboard_rollup() -> None:
    """Every minute: fold the audit rows of the last minutes into the dashboard's rollups."""
    dashboard_rollup_refresh()
