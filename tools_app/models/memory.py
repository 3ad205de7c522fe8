"""Memory documents and their chunks, embedded with pgvector (docs/memory.md)."""
from __future__ import annotations
