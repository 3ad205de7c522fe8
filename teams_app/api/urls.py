"""/api/v1/… of teams_app: the board (`teams/…`, api/teams.py) and handoff routes, agent links and delegations
(`routes/…`, `agent-links/…`, `delegations/…`, api/routing.py)."""
from teams_app.api import routing, teams

urlpatterns = [*teams.urlpatterns, *routing.urlpatterns]
