"""Admin screens: Skills agents publish, search and use (docs/skills.md)."""
