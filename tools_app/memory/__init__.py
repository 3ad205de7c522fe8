"""Memory at run time: the workspace router, chunking, embedders, hybrid search, the memory tools (docs/memory.md)."""


def register() -> None:
    """Called from ToolsAppConfig.ready()."""
