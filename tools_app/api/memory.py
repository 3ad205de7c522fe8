"""API: Memory documents and their chunks, embedded with pgvector (docs/memory.md)."""
urlpatterns: list = []
