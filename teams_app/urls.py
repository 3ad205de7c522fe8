"""Pages for people: the live team board (views.py)."""
urlpatterns: list = []
