"""Skills at run time: the skill tools and their search index (docs/skills.md)."""


def register() -> None:
    """Called from ToolsAppConfig.ready()."""
