"""URLs of the console's playground pages."""
urlpatterns: list = []
