"""URLs of the console's audit pages."""
urlpatterns: list = []
