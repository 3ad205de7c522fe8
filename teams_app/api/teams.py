"""Placeholder: filled in by the teams work."""
urlpatterns: list = []
