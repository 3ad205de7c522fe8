"""The teams admin: teams, members and the board's records (board.py); handoff routes, agent links and delegations
(delegation.py)."""
from teams_app.admin import board, delegation  # noqa: F401  (registers the ModelAdmins)
