"""The console's own tables (dashboard rollups)."""
