"""Skills agents publish, search and use (docs/skills.md)."""
from __future__ import annotations
