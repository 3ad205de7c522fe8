"""API: Skills agents publish, search and use (docs/skills.md)."""
urlpatterns: list = []
