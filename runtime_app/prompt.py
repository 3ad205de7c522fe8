"""The system prompt of a hosted agent's turn, assembled from its context files as the design documents describe:
SOUL.md, AGENTS.md, TOOLS.md, USER.md, MEMORY.md (per user for open agents), then the generated ones (TEAM.md for a
team's lead, DELEGATION.md when it has links). A subagent also gets its task; a session started for other work
(a team member's) gets the note it was started with."""
from __future__ import annotations

from runtime_app.choices import SessionOrigin
from runtime_app.models import Session
from tools_app.selectors_context import agent_context_for

SUBAGENT_NOTE = ("You are a subagent working on one task for another agent (session {parent}). Do the task with the "
                 "tools you have, then answer with the result: your final reply is what the other agent receives.")


def system_prompt(session: Session) -> str:
    """The files in prompt order, each under its name, then the session's task (if any)."""
    context = agent_context_for(session.agent, session.user_id)
    parts = [f"# {f.name}\n\n{f.content.strip()}" for f in context.files]
    if not parts:
        parts.append(f"You are {session.agent.display_name or session.agent.key}, an AI agent run by goclaw.")
    if session.origin == SessionOrigin.SUBAGENT:
        parts.append("# Task\n\n" + SUBAGENT_NOTE.format(parent=session.parent_id) + "\n\n" + session.task)
    elif session.task:
        parts.append("# Task\n\n" + session.task)
    return "\n\n".join(parts)
