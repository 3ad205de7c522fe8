"""Writes to context files (docs/context-files.md). Every change - an agent's write_file or edit, a person's save in
the admin or the API, a restore - goes through `context_file_write` / `context_file_delete`, which record a
`ContextFileVersion` (the text after, the hash before, a unified diff, who) in the same transaction."""
from __future__ import annotations

import difflib
import hashlib
import logging
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from goclaw import events
from goclaw.errors import NotFound, PermissionDenied, ValidationError
from tools_app.models import Agent
from tools_app.models.context_files import (BOOTSTRAP_NAME, CONTEXT_FILE_NAMES, PREDEFINED_PER_USER_NAMES,
                                            USER_ID_MAX_LENGTH, AgentContextFile, ContextActorKind, ContextFileVersion,
                                            UserContextFile)
from tools_app.selectors_context import bootstrap_completed, context_file_agent_may_write, context_file_is_per_user

logger = logging.getLogger("goclaw.context_files")

CONTEXT_FILE_MAX_CHARS = 1_000_000  # a system-prompt file; the file tools' own 5 MB limit is far above any use


class ContextFileInvalid(ValidationError):
    code = "context_file_invalid"


class ContextFileNotFound(NotFound):
    code = "context_file_not_found"


class ContextFileReadOnly(PermissionDenied):
    code = "context_file_read_only"


@dataclass(frozen=True)
class ContextActor:
    """Who writes: the agent through a tool (`agent:<key>`), a person in the admin or API, or the system."""

    kind: str
    name: str

    @classmethod
    def of_agent(cls, agent: Agent | str) -> ContextActor:
        return cls(ContextActorKind.AGENT, agent if isinstance(agent, str) else agent.key)

    @classmethod
    def of_person(cls, user) -> ContextActor:
        """A staff user (None or an anonymous user: the system)."""
        if user is None or not getattr(user, "is_authenticated", False):
            return cls(ContextActorKind.SYSTEM, "system")
        return cls(ContextActorKind.PERSON, user.get_username())

    @classmethod
    def system(cls, name: str = "system") -> ContextActor:
        return cls(ContextActorKind.SYSTEM, name)


@dataclass(frozen=True)
class ContextFileChange:
    """What a write did: created the file, replaced it, deleted it, or nothing (same text); `version` is the history
    row it left (None when nothing changed)."""

    created: bool
    deleted: bool
    version: ContextFileVersion | None


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def context_file_check(name: str, user_id: str, content: str | None = None) -> None:
    """Refuse what cannot be stored: an unknown name, a malformed user id, text over the limit or with a NUL byte
    (PostgreSQL text cannot hold one)."""
    if name not in CONTEXT_FILE_NAMES:
        raise ContextFileInvalid(f"{name[:64]!r} is not a context file (they are {', '.join(CONTEXT_FILE_NAMES)})",
                                 details={"name": "unknown context file"})
    if not isinstance(user_id, str) or len(user_id) > USER_ID_MAX_LENGTH or "\x00" in user_id:
        raise ContextFileInvalid(f"a user id is a string of at most {USER_ID_MAX_LENGTH} characters without NUL",
                                 details={"user_id": "invalid"})
    if content is None:
        return
    if not isinstance(content, str):
        raise ContextFileInvalid("content must be a string", details={"content": "must be a string"})
    if len(content) > CONTEXT_FILE_MAX_CHARS:
        raise ContextFileInvalid(f"content is too large ({len(content)} characters; limit {CONTEXT_FILE_MAX_CHARS})",
                                 details={"content": "too large"})
    if "\x00" in content:
        raise ContextFileInvalid("content must not contain a NUL character", details={"content": "contains NUL"})


def _diff(name: str, before: str | None, after: str | None) -> str:
    lines = difflib.unified_diff((before or "").splitlines(keepends=True), (after or "").splitlines(keepends=True),
                                 fromfile=f"a/{name}" if before is not None else "/dev/null",
                                 tofile=f"b/{name}" if after is not None else "/dev/null")
    # A last line without a newline would run into the next diff line.
    return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)


def _locked_row(agent: Agent, name: str, user_id: str) -> AgentContextFile | UserContextFile | None:
    if user_id:
        return UserContextFile.objects.select_for_update().filter(agent=agent, user_id=user_id, name=name).first()
    return AgentContextFile.objects.select_for_update().filter(agent=agent, name=name).first()


def _record(agent: Agent, name: str, user_id: str, actor: ContextActor, before: str | None, after: str | None,
            restored_from: ContextFileVersion | None) -> ContextFileVersion:
    version = ContextFileVersion.objects.create(
        agent=agent, user_id=user_id, name=name, content=after or "", deleted=after is None,
        previous_hash=content_hash(before) if before is not None else "", diff=_diff(name, before, after),
        actor_kind=actor.kind, actor_name=actor.name[:150], restored_from=restored_from)
    events.publish("context_file.deleted" if after is None else "context_file.written",
                   {"agent": agent.key, "user_id": user_id, "name": name, "version_id": version.pk, "actor": version.actor,
                    "restored_from": restored_from.pk if restored_from else None},
                   [events.agent_group(agent.key)])
    logger.info("%s %s context file %s of agent %s%s", version.actor, "deleted" if after is None else "wrote", name,
                agent.key, " for a user" if user_id else "")
    return version


@transaction.atomic
def context_file_write(*, agent: Agent, name: str, content: str, user_id: str = "", actor: ContextActor,
                       restored_from: ContextFileVersion | None = None) -> ContextFileChange:
    """Store `content` as the agent-level file (`user_id` "") or the user's own, versioned. Writing an empty
    BOOTSTRAP.md for a user deletes their row ("first run completed"). The same text again changes nothing."""
    context_file_check(name, user_id, content)
    if user_id and name == BOOTSTRAP_NAME and content == "":
        change = _delete(agent=agent, name=name, user_id=user_id, actor=actor, restored_from=restored_from)
        if change.version is None and not bootstrap_completed(agent, user_id):
            # The user ran from the agent-level template and never had a row: remember the completion all the same.
            change = ContextFileChange(False, True, _record(agent, name, user_id, actor, None, None, restored_from))
        return change
    row = _locked_row(agent, name, user_id)
    if row is None:
        model = UserContextFile if user_id else AgentContextFile
        fields = {"user_id": user_id} if user_id else {}
        try:
            with transaction.atomic():
                row = model.objects.create(agent=agent, name=name, content=content, **fields)
        except IntegrityError:  # created by a concurrent write since we looked: write over it like any other
            row = _locked_row(agent, name, user_id)
            if row is None:
                raise
        else:
            return ContextFileChange(True, False, _record(agent, name, user_id, actor, None, content, restored_from))
    before = row.content
    if before == content:
        return ContextFileChange(False, False, None)
    row.content = content
    row.save(update_fields=["content", "updated_at"])
    return ContextFileChange(False, False, _record(agent, name, user_id, actor, before, content, restored_from))


def _delete(*, agent: Agent, name: str, user_id: str, actor: ContextActor,
            restored_from: ContextFileVersion | None = None) -> ContextFileChange:
    row = _locked_row(agent, name, user_id)
    if row is None:
        return ContextFileChange(False, False, None)
    before = row.content
    row.delete()
    return ContextFileChange(False, True, _record(agent, name, user_id, actor, before, None, restored_from))


def context_file_write_by_agent(*, agent: Agent, name: str, content: str, user_id: str = "") -> ContextFileChange:
    """An agent's own write through a file tool, routed by the table (docs/context-files.md): to the user's file or
    the agent-level one, versioned as `agent:<key>`; ContextFileReadOnly for a predefined agent's configuration."""
    context_file_check(name, user_id, content)
    if not context_file_agent_may_write(agent, name, user_id):
        where = "" if user_id else " (and without a user id there is no per-user file to write)"
        raise ContextFileReadOnly(
            f"{name} is part of agent {agent.key}'s predefined configuration and is read-only to the agent{where}; "
            f"only {' and '.join(PREDEFINED_PER_USER_NAMES)} can be written, per user. Ask an operator to change {name}.")
    scope_user = user_id if context_file_is_per_user(agent, name, user_id) else ""
    return context_file_write(agent=agent, name=name, content=content, user_id=scope_user,
                              actor=ContextActor.of_agent(agent))


@transaction.atomic
def context_file_delete(*, agent: Agent, name: str, user_id: str = "", actor: ContextActor) -> ContextFileChange:
    """Remove the agent-level file or the user's own (versioned, so it can be restored); ContextFileNotFound if there
    is none."""
    context_file_check(name, user_id)
    change = _delete(agent=agent, name=name, user_id=user_id, actor=actor)
    if not change.deleted:
        raise ContextFileNotFound(f"agent {agent.key} has no {name}{' for this user' if user_id else ''}")
    return change


@transaction.atomic
def context_file_restore(*, version: ContextFileVersion, actor: ContextActor) -> ContextFileChange:
    """Put the file back as it was after `version` (a version that deleted it deletes it again): a new versioned
    write by `actor` that names the version it restored."""
    if version.deleted:
        return _delete(agent=version.agent, name=version.name, user_id=version.user_id, actor=actor,
                       restored_from=version)
    return context_file_write(agent=version.agent, name=version.name, content=version.content,
                              user_id=version.user_id, actor=actor, restored_from=version)
