"""Writes to skills (docs/skills.md): publish (create or new version), staff edits, enable / disable, delete, and the
usage record. Every write that changes what agents can find bumps the tool-set generation in its transaction, so
every process rebuilds its skill index within a second."""
from __future__ import annotations

import hashlib
import logging
import re
from typing import Any, Iterable

from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils.text import slugify

from goclaw import events
from goclaw.errors import Conflict, ValidationError
from tools_app.models import Agent
from tools_app.models.skills import SKILL_SLUG_MAX, Skill, SkillUse
from tools_app.services.policy import actor_name
from tools_app.toolsets import tools_changed

logger = logging.getLogger("goclaw.skills")

NAME_MAX_CHARS = 100
DESCRIPTION_MAX_CHARS = 2000
TAG_MAX_CHARS = 40
TAGS_MAX = 20
CONTENT_MAX_BYTES = 256 * 1024
FILE_MAX_BYTES = 256 * 1024
FILES_MAX = 64
FILES_TOTAL_MAX_BYTES = 2 * 1024 * 1024
FILE_PATH_MAX_CHARS = 500
ARGUMENTS_MAX = 20
ARGUMENT_DESCRIPTION_MAX_CHARS = 300
_ARGUMENT_NAME = r"[A-Za-z][A-Za-z0-9_-]{0,39}"
_ARGUMENT_NAME_RE = re.compile(rf"^{_ARGUMENT_NAME}$")
_ARGUMENT_RE = re.compile(rf"^({_ARGUMENT_NAME})(\?)?[ \t]*(?::[ \t]*(.*))?$")
# What staff may change through the API and the admin (the slug and name stay what the publisher chose).
EDITABLE = ("description", "tags", "content", "enabled", "agent")
_CONTENT_FIELDS = ("description", "tags", "content")
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class SkillInvalid(ValidationError):
    code = "skill_invalid"


class SkillSlugTaken(Conflict):
    code = "skill_slug_taken"


class SkillAmbiguous(Conflict):
    code = "skill_ambiguous"


# --- validation ----------------------------------------------------------------------------------------------------
def skill_slug_for(name: str) -> str:
    """The slug a skill name publishes under (ASCII letters, digits and -; "" if the name has none)."""
    return slugify(name)[:SKILL_SLUG_MAX].strip("-")


def skill_tags_normalize(tags: Any) -> list[str]:
    """Tags as stored: a list (or comma-separated string) of short strings, lower-cased, stripped, without repeats.
    Raises SkillInvalid naming the problem."""
    if tags is None:
        return []
    if isinstance(tags, str):
        tags = tags.split(",")
    if not isinstance(tags, (list, tuple)):
        raise SkillInvalid("tags must be a list of strings", details={"tags": "must be a list of strings"})
    out: list[str] = []
    for tag in tags:
        if not isinstance(tag, str):
            raise SkillInvalid("tags must be a list of strings", details={"tags": "must be a list of strings"})
        tag = " ".join(tag.split()).lower()
        if not tag or tag in out:
            continue
        if len(tag) > TAG_MAX_CHARS or _CONTROL_RE.search(tag):
            raise SkillInvalid(f"tag {tag[:60]!r} is longer than {TAG_MAX_CHARS} characters or holds control characters",
                               details={"tags": f"each tag at most {TAG_MAX_CHARS} printable characters"})
        out.append(tag)
    if len(out) > TAGS_MAX:
        raise SkillInvalid(f"a skill has at most {TAGS_MAX} tags", details={"tags": f"at most {TAGS_MAX}"})
    return out


def skill_arguments_normalize(arguments: Any) -> list[dict[str, Any]]:
    """The arguments a skill declares (what it takes as an MCP prompt), as stored: [{"name", "description",
    "required"}]. Takes SKILL.md's strings — "topic: what to summarise", "audience?: …" (optional), or a
    comma-separated string of names — or stored mappings. Raises SkillInvalid naming the problem."""
    if arguments is None:
        return []
    if isinstance(arguments, str):
        arguments = [part for part in arguments.split(",") if part.strip()]
    if not isinstance(arguments, (list, tuple)):
        raise SkillInvalid("arguments must be a list", details={"arguments": "must be a list"})
    if len(arguments) > ARGUMENTS_MAX:
        raise SkillInvalid(f"a skill declares at most {ARGUMENTS_MAX} arguments", details={"arguments": f"at most {ARGUMENTS_MAX}"})
    out: list[dict[str, Any]] = []
    for item in arguments:
        if isinstance(item, str):
            match = _ARGUMENT_RE.match(item.strip())
            if match is None:
                raise SkillInvalid(f"argument {item.strip()[:60]!r}: expected 'name: description' (a name of letters, "
                                   "digits, - and _, at most 40; 'name?' for an optional one)",
                                   details={"arguments": "name: description"})
            name, description, required = match.group(1), (match.group(3) or "").strip(), not match.group(2)
        elif isinstance(item, dict) and isinstance(item.get("name"), str) and _ARGUMENT_NAME_RE.match(item["name"]):
            name, description, required = item["name"], item.get("description") or "", item.get("required", True)
            if not isinstance(description, str) or not isinstance(required, bool):
                raise SkillInvalid(f"argument {name}: description is text and required true or false",
                                   details={"arguments": "description text, required true or false"})
        else:
            raise SkillInvalid("each argument is 'name: description' or {name, description, required}",
                               details={"arguments": "name: description"})
        if len(description) > ARGUMENT_DESCRIPTION_MAX_CHARS or "\n" in description or _CONTROL_RE.search(description):
            raise SkillInvalid(f"argument {name}: the description is one line of at most "
                               f"{ARGUMENT_DESCRIPTION_MAX_CHARS} characters", details={"arguments": "description too long"})
        if any(seen["name"] == name for seen in out):
            raise SkillInvalid(f"argument {name} is declared twice", details={"arguments": "declared twice"})
        out.append({"name": name, "description": description, "required": required})
    return out


def skill_problems(fields: dict[str, Any]) -> dict[str, str]:
    """field → what is wrong with it, for the fields present in `fields` (name, description, content, files)."""
    problems: dict[str, str] = {}
    if "name" in fields:
        name = fields["name"]
        if not isinstance(name, str) or not name.strip():
            problems["name"] = "must be a non-empty string"
        elif len(name) > NAME_MAX_CHARS or "\n" in name or _CONTROL_RE.search(name):
            problems["name"] = f"must be one line of at most {NAME_MAX_CHARS} characters"
        elif not skill_slug_for(name):
            problems["name"] = "must contain ASCII letters or digits (the skill's slug is made from them)"
    if "description" in fields:
        description = fields["description"]
        if not isinstance(description, str) or not description.strip():
            problems["description"] = "must be a non-empty string"
        elif len(description) > DESCRIPTION_MAX_CHARS:
            problems["description"] = f"must be at most {DESCRIPTION_MAX_CHARS} characters"
        elif "\x00" in description:
            problems["description"] = "must not contain a NUL byte"
    if "content" in fields:
        content = fields["content"]
        if not isinstance(content, str) or not content.strip():
            problems["content"] = "must be non-empty text (the instructions after SKILL.md's front matter)"
        elif len(content.encode("utf-8", "surrogatepass")) > CONTENT_MAX_BYTES:
            problems["content"] = f"must be at most {CONTENT_MAX_BYTES // 1024} KB"
        elif "\x00" in content:
            problems["content"] = "must not contain a NUL byte"
    if "files" in fields:
        files = fields["files"]
        if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
            problems["files"] = "must map relative paths to text"
        elif len(files) > FILES_MAX:
            problems["files"] = f"at most {FILES_MAX} files"
        elif sum(len(v.encode("utf-8", "surrogatepass")) for v in files.values()) > FILES_TOTAL_MAX_BYTES:
            problems["files"] = f"at most {FILES_TOTAL_MAX_BYTES // (1024 * 1024)} MB in all"
        elif any("\x00" in k or "\x00" in v or len(k) > FILE_PATH_MAX_CHARS for k, v in files.items()):
            problems["files"] = "paths and texts must not contain NUL bytes; paths at most 500 characters"
    return problems


def _check(fields: dict[str, Any]) -> None:
    problems = skill_problems(fields)
    if problems:
        field, message = next(iter(problems.items()))
        raise SkillInvalid(f"{field}: {message}", details=problems)


def _lock(agent_id: Any, slug: str) -> None:
    """Serialise writers of one (scope, slug): two first publishes cannot both try to create the row."""
    digest = hashlib.sha256(f"skill:{agent_id or ''}:{slug}".encode()).digest()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [int.from_bytes(digest[:8], "big", signed=True)])


def _announce(event: str, skill: Skill) -> None:
    """The scoped agent's event group hears about its skills (global skills have no agent group to tell)."""
    if skill.agent_id:
        events.publish(event, {"slug": skill.slug, "version": skill.version, "enabled": skill.enabled},
                       [events.agent_group(skill.agent.key)])


def _differs(skill: Skill, key: str, value: Any) -> bool:
    if key == "agent":
        return skill.agent_id != (value.pk if value is not None else None)
    return getattr(skill, key) != value


# --- writes --------------------------------------------------------------------------------------------------------
@transaction.atomic
def skill_publish(*, agent: Agent | None, name: str, description: str, content: str, tags: Iterable[str] = (),
                  files: dict[str, str] | None = None, source_path: str = "", published_by: str = "",
                  arguments: Iterable[Any] = ()) -> tuple[Skill, bool]:
    """Create the skill `name` in `agent`'s scope (None: every agent's), or replace its content (and the arguments it
    declares) as the next version. Returns (skill, created). An operator's enabled / disabled choice survives a
    re-publish."""
    files = dict(files or {})
    _check({"name": name, "description": description, "content": content, "files": files})
    tags = skill_tags_normalize(list(tags))
    arguments = skill_arguments_normalize(list(arguments))
    slug = skill_slug_for(name)
    agent_id = agent.pk if agent is not None else None
    _lock(agent_id, slug)
    skill = Skill.objects.select_for_update().filter(slug=slug, agent_id=agent_id).first()
    created = skill is None
    if created:
        skill = Skill(slug=slug, agent=agent, version=1)
    else:
        skill.version += 1
    skill.name, skill.description, skill.content = name.strip(), description.strip(), content
    skill.tags, skill.files, skill.source_path, skill.published_by = tags, files, source_path[:1024], published_by[:255]
    skill.arguments = arguments
    skill.save()
    tools_changed()
    _announce("skill.published", skill)
    logger.info("skill %s v%s published by %s", skill, skill.version, published_by or "system")
    return skill, created


@transaction.atomic
def skill_update(*, actor, skill: Skill, **changes: Any) -> Skill:
    """Staff edits (EDITABLE fields): a change of description, tags or content is a new version; moving a skill to
    another scope is refused when that scope already has the slug."""
    unknown = set(changes) - set(EDITABLE)
    if unknown:
        raise SkillInvalid(f"these fields cannot be changed: {', '.join(sorted(unknown))}",
                           details={name: "not editable" for name in sorted(unknown)})
    skill = Skill.objects.select_for_update(of=("self",)).select_related("agent").get(pk=skill.pk)
    _check({k: v for k, v in changes.items() if k in ("description", "content")})
    if "tags" in changes:
        changes["tags"] = skill_tags_normalize(changes["tags"])
    if "enabled" in changes and not isinstance(changes["enabled"], bool):
        raise SkillInvalid("enabled must be true or false", details={"enabled": "must be true or false"})
    if "agent" in changes and changes["agent"] is not None and not isinstance(changes["agent"], Agent):
        raise SkillInvalid("agent must be an agent or empty", details={"agent": "must be an agent or empty"})
    changed = [key for key, value in changes.items() if _differs(skill, key, value)]
    if not changed:
        return skill
    if "agent" in changed:
        target = changes["agent"].pk if changes["agent"] is not None else None
        _lock(target, skill.slug)
        if Skill.objects.filter(slug=skill.slug, agent_id=target).exclude(pk=skill.pk).exists():
            where = f"agent {changes['agent'].key}" if target else "the global scope"
            raise SkillSlugTaken(f"{where} already has a skill {skill.slug}", details={"agent": "slug taken there"})
    for key in changed:
        setattr(skill, key, changes[key])
    if any(key in _CONTENT_FIELDS for key in changed):
        skill.version += 1
    skill.save()
    tools_changed()
    _announce("skill.updated", skill)
    logger.info("skill %s changed by %s: %s", skill, actor_name(actor), ", ".join(changed))
    return skill


@transaction.atomic
def skill_set_enabled(*, actor, skills: QuerySet, enabled: bool) -> int:
    """Enable or disable several skills at once (admin actions); returns how many changed."""
    ids = list(skills.exclude(enabled=enabled).values_list("pk", flat=True))
    count = Skill.objects.filter(pk__in=ids).update(enabled=enabled)
    if count:
        tools_changed()
        logger.info("%s %d skill(s) %s", actor_name(actor), count, "enabled" if enabled else "disabled")
    return count


@transaction.atomic
def skill_delete(*, actor, skill: Skill) -> None:
    """Remove a skill and its usage records."""
    logger.info("skill %s deleted by %s", skill, actor_name(actor))
    _announce("skill.deleted", skill)
    skill.delete()
    tools_changed()


@transaction.atomic
def skill_use_record(*, skill: Skill, agent_key: str, user_id: str = "", session_key: str = "") -> SkillUse:
    """Count one load of `skill` (labels as the audit stores them: already scrubbed and bounded)."""
    return SkillUse.objects.create(skill=skill, agent_key=agent_key[:64], user_id=user_id[:255],
                                   session_key=session_key[:255])
