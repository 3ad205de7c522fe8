"""Reads of context files (docs/context-files.md): which stored row a name means for an (agent, user), the files an
agent sees, the merged set for its system prompt, and the version history. Writes live in
`tools_app.services.context_files`."""
from __future__ import annotations

import hashlib
import json
import logging
import threading
from dataclasses import dataclass
from typing import Callable

from django.db.models import QuerySet

from tools_app.choices import AgentType
from tools_app.models import Agent
from tools_app.models.context_files import (BOOTSTRAP_NAME, CONTEXT_FILE_NAMES, PREDEFINED_PER_USER_NAMES,
                                            AgentContextFile, ContextFileVersion, UserContextFile)

logger = logging.getLogger("goclaw.context_files")

SOURCE_USER, SOURCE_AGENT, SOURCE_GENERATED = "user", "agent", "generated"

ContextFileProvider = Callable[[Agent, str], str]

_providers: tuple[tuple[str, ContextFileProvider], ...] = ()
_providers_lock = threading.Lock()


def context_file_provider_register(name: str, provider: ContextFileProvider) -> None:
    """Contribute a generated file `name` to every agent's context: `provider(agent, user_id)` returns its text
    ("" leaves it out). Apps call this from `ready()`; registering a name again replaces its provider."""
    global _providers
    if not isinstance(name, str) or not name.strip() or "/" in name or name in CONTEXT_FILE_NAMES:
        raise ValueError(f"a generated context file needs a plain file name that is not a stored one: {name!r}")
    if not callable(provider):
        raise TypeError("a context file provider must be callable(agent, user_id) -> str")
    with _providers_lock:
        _providers = (*((n, p) for n, p in _providers if n != name), (name, provider))


def context_file_provider_unregister(name: str) -> None:
    global _providers
    with _providers_lock:
        _providers = tuple((n, p) for n, p in _providers if n != name)


def context_file_providers() -> tuple[tuple[str, ContextFileProvider], ...]:
    """(name, provider) in registration order."""
    return _providers


@dataclass(frozen=True)
class ContextFileText:
    """One context file as an agent sees it: its text and where it came from (user | agent | generated)."""

    name: str
    content: str
    source: str


def context_file_is_per_user(agent: Agent, name: str, user_id: str) -> bool:
    """Whether `name` means the user's own file for a call by `user_id` (else the agent-level one): open agents keep
    every file per user, predefined agents only USER.md and BOOTSTRAP.md; without a user, agent-level files."""
    if not user_id:
        return False
    return agent.agent_type == AgentType.OPEN or name in PREDEFINED_PER_USER_NAMES


def context_file_agent_may_write(agent: Agent, name: str, user_id: str) -> bool:
    """Whether the agent itself may write `name` (through the file tools): an open agent any of its files, a
    predefined agent only its per-user files; the rest is configuration an operator sets."""
    return agent.agent_type == AgentType.OPEN or context_file_is_per_user(agent, name, user_id)


def bootstrap_completed(agent: Agent, user_id: str) -> bool:
    """Whether this user's BOOTSTRAP.md was removed (first run completed): the agent-level template must not come
    back for them."""
    latest = (ContextFileVersion.objects.filter(agent=agent, user_id=user_id, name=BOOTSTRAP_NAME)
              .order_by("-created_at", "-id").values_list("deleted", flat=True).first())
    return bool(latest)


def context_file_resolve(agent: Agent, name: str, user_id: str) -> ContextFileText | None:
    """The file `name` as the agent sees it in a call by `user_id`: the user's own file when it is per-user,
    else (or while the user has none) the agent-level file; None when neither exists."""
    if context_file_is_per_user(agent, name, user_id):
        own = UserContextFile.objects.filter(agent=agent, user_id=user_id, name=name).values_list("content", flat=True).first()
        if own is not None:
            return ContextFileText(name, own, SOURCE_USER)
        if name == BOOTSTRAP_NAME and bootstrap_completed(agent, user_id):
            return None
    shared = AgentContextFile.objects.filter(agent=agent, name=name).values_list("content", flat=True).first()
    return ContextFileText(name, shared, SOURCE_AGENT) if shared is not None else None


def context_files_visible(agent: Agent, user_id: str) -> list[ContextFileText]:
    """Every context file the agent sees in a call by `user_id`, in prompt order (empty ones included), in at most
    three queries."""
    shared = dict(AgentContextFile.objects.filter(agent=agent).values_list("name", "content"))
    own: dict[str, str] = {}
    completed = False
    if user_id:
        own = dict(UserContextFile.objects.filter(agent=agent, user_id=user_id).values_list("name", "content"))
        if BOOTSTRAP_NAME not in own and context_file_is_per_user(agent, BOOTSTRAP_NAME, user_id):
            completed = bootstrap_completed(agent, user_id)
    files = []
    for name in CONTEXT_FILE_NAMES:
        if context_file_is_per_user(agent, name, user_id):
            if name in own:
                files.append(ContextFileText(name, own[name], SOURCE_USER))
                continue
            if name == BOOTSTRAP_NAME and completed:
                continue
        if name in shared:
            files.append(ContextFileText(name, shared[name], SOURCE_AGENT))
    return files


@dataclass(frozen=True)
class AgentContext:
    """The merged set an agent loop puts into its system prompt, and its content hash (the API's ETag)."""

    agent: str
    user_id: str
    files: list[ContextFileText]
    hash: str

    def as_dict(self) -> dict:
        return {"agent": self.agent, "user_id": self.user_id, "hash": self.hash,
                "files": [{"name": f.name, "content": f.content, "source": f.source} for f in self.files]}


def agent_context_for(agent: Agent, user_id: str) -> AgentContext:
    """The stored files (per-user over agent-level, empty ones skipped) followed by the files other apps generate
    (TEAM.md, DELEGATION.md, …), with a hash of all of it."""
    files = [f for f in context_files_visible(agent, user_id) if f.content.strip()]
    for name, provider in context_file_providers():
        try:
            text = provider(agent, user_id)
        except Exception:  # one app's failure must not keep an agent from loading its context
            logger.exception("context file provider %s failed for agent %s", name, agent.key)
            continue
        if isinstance(text, str) and text.strip():
            files.append(ContextFileText(name, text, SOURCE_GENERATED))
    body = json.dumps([[f.name, f.source, f.content] for f in files], ensure_ascii=False, separators=(",", ":"))
    return AgentContext(agent.key, user_id, files, hashlib.sha256(body.encode("utf-8", "surrogatepass")).hexdigest())


def context_file_get(agent: Agent, name: str, user_id: str = "") -> AgentContextFile | UserContextFile | None:
    """The stored row for exactly this scope (no fallback): the agent-level file, or `user_id`'s own."""
    if user_id:
        return UserContextFile.objects.filter(agent=agent, user_id=user_id, name=name).first()
    return AgentContextFile.objects.filter(agent=agent, name=name).first()


def context_file_list(agent: Agent, user_id: str = "") -> QuerySet:
    """The stored rows of one scope (agent-level, or one user's), by name."""
    if user_id:
        return UserContextFile.objects.filter(agent=agent, user_id=user_id).order_by("name")
    return AgentContextFile.objects.filter(agent=agent).order_by("name")


def context_file_versions(agent: Agent, name: str, user_id: str = "") -> QuerySet[ContextFileVersion]:
    """The history of one file, newest first."""
    return ContextFileVersion.objects.filter(agent=agent, user_id=user_id, name=name).order_by("-created_at", "-id")
