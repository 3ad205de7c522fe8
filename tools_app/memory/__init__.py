"""Memory at run time: the workspace router, chunking, embedders, hybrid search, the memory tools (docs/memory.md)."""

BACKFILL_SCHEDULE = "memory embeddings back-fill"


def register() -> None:
    """Called from ToolsAppConfig.ready() after the context-file router: the memory router, the `memory` tool
    source, the back-fill schedule (every minute), and the HTTP embedder's key in the scrubber."""
    from django.conf import settings

    from goclaw.services import schedule_register
    from tools_app.memory.router import MemoryRouter
    from tools_app.memory.tools import MemoryToolSource
    from tools_app.security.scrub import default_scrubber
    from tools_app.toolsets import tool_source_register
    from tools_app.workspace import workspace_router_register

    workspace_router_register(MemoryRouter())
    tool_source_register(MemoryToolSource())
    schedule_register(BACKFILL_SCHEDULE, "tools_app.memory.tasks.backfill_embeddings", "* * * * *")
    key = getattr(settings, "MEMORY_EMBEDDINGS_API_KEY", "")
    if key:
        default_scrubber.add_values([key])
