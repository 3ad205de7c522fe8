"""Placeholder: filled in by the routing work."""
urlpatterns: list = []
