"""Admin screens: Memory documents and their chunks, embedded with pgvector (docs/memory.md)."""
