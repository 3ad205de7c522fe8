"""Admin screens: Context files (SOUL.md, USER.md, …) stored in PostgreSQL (docs/context-files.md)."""
