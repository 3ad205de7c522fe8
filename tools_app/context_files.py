"""Context files at run time (docs/context-files.md): the workspace router that sends SOUL.md, USER.md, … at the
workspace root to PostgreSQL, and the registry through which other apps contribute generated files (TEAM.md,
DELEGATION.md) to an agent's context."""
from __future__ import annotations

from typing import TYPE_CHECKING

from goclaw.errors import ApplicationError
from tools_app.base import ToolError
from tools_app.models.context_files import CONTEXT_FILE_NAMES
# The registry of generated files lives with the reads that merge them; apps import it from here.
from tools_app.selectors_context import (ContextFileProvider, context_file_provider_register,  # noqa: F401
                                         context_file_provider_unregister, context_file_providers)
from tools_app.workspace import Workspace, WorkspaceRouter, workspace_router_register

if TYPE_CHECKING:
    from tools_app.models import Agent

class ContextFileRefused(ToolError, PermissionError):
    """A file tool may not write this context file (a predefined agent's configuration). A ToolError, so the
    model sees exactly this message; a PermissionError for callers that treat it as one."""


class ContextFileRouter(WorkspaceRouter):
    """The seven context files at the workspace root (never in a subdirectory) live in PostgreSQL: reads, writes,
    edits and listings follow the routing table of docs/context-files.md, and every write is versioned as the
    agent's. A workspace that names no agent routes nothing."""

    name = "context_files"
    _names = frozenset(CONTEXT_FILE_NAMES)

    def claims(self, ws: Workspace, rel: str) -> bool:
        return rel in self._names and bool(ws.agent_key)

    @staticmethod
    def _agent(ws: Workspace) -> Agent:
        from tools_app.models import Agent

        agent = Agent.objects.filter(key=ws.agent_key).first()
        if agent is None:
            raise ToolError(f"agent {ws.agent_key} does not exist")
        return agent

    def read(self, ws: Workspace, rel: str) -> str:
        from tools_app.selectors_context import context_file_resolve

        found = context_file_resolve(self._agent(ws), rel, ws.user_id)
        if found is None:
            raise FileNotFoundError(rel)
        return found.content

    def write(self, ws: Workspace, rel: str, content: str) -> bool:
        from tools_app.services.context_files import ContextFileReadOnly, context_file_write_by_agent

        try:
            change = context_file_write_by_agent(agent=self._agent(ws), name=rel, content=content, user_id=ws.user_id)
        except ContextFileReadOnly as exc:
            raise ContextFileRefused(exc.message) from None
        except ApplicationError as exc:
            raise ToolError(exc.message) from None
        return change.created

    def entries(self, ws: Workspace, rel_dir: str) -> list[str]:
        if rel_dir not in ("", ".") or not ws.agent_key:
            return []
        from tools_app.models import Agent
        from tools_app.selectors_context import context_files_visible

        agent = Agent.objects.filter(key=ws.agent_key).first()
        return [f.name for f in context_files_visible(agent, ws.user_id)] if agent is not None else []


context_file_router = ContextFileRouter()


def register() -> None:
    """Called from ToolsAppConfig.ready(): route the context files before any other router sees them."""
    workspace_router_register(context_file_router)
