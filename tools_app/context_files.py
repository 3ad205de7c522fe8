"""Context files at run time: the workspace router and what apps contribute (docs/context-files.md)."""


def register() -> None:
    """Called from ToolsAppConfig.ready()."""
