"""URLs of the console's dashboard pages."""
urlpatterns: list = []
