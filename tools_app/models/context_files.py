"""Context files (SOUL.md, USER.md, …) stored in PostgreSQL (docs/context-files.md)."""
from __future__ import annotations
