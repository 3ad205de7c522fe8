"""The workspace router for memory: `MEMORY.md`, `memory.md` and `memory/*` are memory documents in PostgreSQL, per
(agent, user) with a shared layer. Reads try the user's document, then the shared one; writes go to the user's
(the shared one when the call has no user id); `.md` writes are chunked and embedded (tools_app.memory.indexing)."""
from __future__ import annotations

from goclaw.errors import ApplicationError
from tools_app.base import ToolError
from tools_app.workspace import Workspace, WorkspaceRouter


def _agent(ws: Workspace):
    from tools_app.models import Agent

    if not ws.agent_key:
        return None
    return Agent.objects.filter(key=ws.agent_key).first()


class MemoryRouter(WorkspaceRouter):
    """Memory paths to `MemoryDocument` rows (registered after the context-file router)."""

    name = "memory"

    def claims(self, ws: Workspace, rel: str) -> bool:
        from tools_app.memory.indexing import is_memory_path

        return bool(ws.agent_key) and is_memory_path(rel)

    def read(self, ws: Workspace, rel: str) -> str:
        from tools_app.memory.indexing import memory_document_get

        agent = _agent(ws)
        document = memory_document_get(agent=agent, user_id=ws.user_id, path=rel) if agent is not None else None
        if document is None:
            raise FileNotFoundError(rel)
        return document.content

    def write(self, ws: Workspace, rel: str, content: str) -> bool:
        from tools_app.memory.indexing import memory_document_write

        agent = _agent(ws)
        if agent is None:
            raise ToolError("memory is not available: this workspace belongs to no agent")
        try:
            return memory_document_write(agent=agent, user_id=ws.user_id, path=rel, content=content).created
        except ApplicationError as exc:
            raise ToolError(exc.message) from None

    def entries(self, ws: Workspace, rel_dir: str) -> list[str]:
        from tools_app.memory.indexing import memory_documents_visible

        agent = _agent(ws)
        if agent is None:
            return []
        prefix = f"{rel_dir}/" if rel_dir else ""
        return [doc.path for doc in memory_documents_visible(agent=agent, user_id=ws.user_id, prefix=prefix)]
