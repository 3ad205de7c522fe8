"""Writes to custom tools (docs/custom-tools.md): create, update, delete, import and export. Every write checks the
whole definition (schema, template, limits, name collisions), seals the env, and bumps the tool-set generation in its
transaction, so every process serves the change within a second."""
from __future__ import annotations

import json
import logging
import re
from typing import Any

import jsonschema
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from goclaw import crypto
from goclaw.errors import Conflict, ValidationError
from tools_app.custom_tools import ARG_ENV_PREFIX, env_seal_context, template_problems
from tools_app.models import Agent, CustomTool
from tools_app.models.custom_tools import CUSTOM_TOOL_DEFAULT_TIMEOUT, CUSTOM_TOOL_MAX_TIMEOUT, CUSTOM_TOOL_NAME_RE
from tools_app.services.policy import actor_name
from tools_app.toolsets import reserved_tool_names, reserved_tool_prefixes, tools_changed

logger = logging.getLogger("goclaw.custom_tools")

MAX_COMMAND_CHARS = 100_000
MAX_DESCRIPTION_CHARS = 10_000
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
AGENT_KEY_RE = re.compile(r"^[-a-zA-Z0-9_]{1,64}$")
GROUP_RE = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
# Every custom-tool write takes this transaction-level advisory lock: two saves cannot both pass the collision check
# for the same name (one waits for the other's commit, then sees its row).
_WRITE_LOCK = 0x637573746F6D  # "custom"

# The exchange format (import / export): the seed's fields, plus env (import only), working_dir and agent.
EXCHANGE_FIELDS = ("name", "description", "parameters", "command", "timeout_seconds", "enabled")
EXCHANGE_OPTIONAL = ("env", "working_dir", "agent")
EDITABLE = ("name", "description", "parameters", "command", "timeout_seconds", "working_dir", "agent", "enabled",
            "group", "requires_approval", "always_require_approval")


class CustomToolCollision(Conflict):
    code = "custom_tool_name_collision"


# --- validation ----------------------------------------------------------------------------------------------------
def _is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def custom_tool_problems(fields: dict[str, Any]) -> dict[str, str]:
    """field → what is wrong with it, for a complete definition (empty: it can be saved, name collisions aside)."""
    problems: dict[str, str] = {}
    name = fields.get("name")
    if not isinstance(name, str) or not re.match(CUSTOM_TOOL_NAME_RE, name):
        problems["name"] = "must be lower-case letters, digits and _, starting with a letter, at most 64 characters"
    description = fields.get("description")
    if not isinstance(description, str) or not description.strip():
        problems["description"] = "must be a non-empty string"
    elif len(description) > MAX_DESCRIPTION_CHARS:
        problems["description"] = f"must be at most {MAX_DESCRIPTION_CHARS} characters"
    elif "\x00" in description:
        problems["description"] = "must not contain a NUL byte"
    parameters = fields.get("parameters")
    schema_ok = False
    if not isinstance(parameters, dict):
        problems["parameters"] = "must be a JSON Schema object"
    elif parameters.get("type") != "object":
        problems["parameters"] = 'must be a JSON Schema of "type": "object"'
    elif not isinstance(parameters.get("properties", {}), dict):
        problems["parameters"] = '"properties" must be an object'
    elif "\\u0000" in json.dumps(parameters):
        problems["parameters"] = "must not contain a NUL byte"  # PostgreSQL's jsonb cannot hold one
    else:
        try:
            jsonschema.Draft202012Validator.check_schema(parameters)
            schema_ok = True
        except jsonschema.SchemaError as exc:
            where = "/".join(str(p) for p in exc.path)
            problems["parameters"] = f"invalid JSON Schema{' at ' + where if where else ''}: {exc.message}"
    command = fields.get("command")
    if not isinstance(command, str) or not command.strip():
        problems["command"] = "must be a non-empty string"
    elif len(command) > MAX_COMMAND_CHARS:
        problems["command"] = f"must be at most {MAX_COMMAND_CHARS} characters"
    elif "\x00" in command:
        problems["command"] = "must not contain a NUL byte"
    elif schema_ok:
        wrong = template_problems(command, parameters)
        if wrong:
            problems["command"] = "; ".join(wrong)
    timeout = fields.get("timeout_seconds")
    if isinstance(timeout, bool) or not isinstance(timeout, int) or not 1 <= timeout <= CUSTOM_TOOL_MAX_TIMEOUT:
        problems["timeout_seconds"] = f"must be a whole number of seconds from 1 to {CUSTOM_TOOL_MAX_TIMEOUT}"
    working_dir = fields.get("working_dir")
    if not isinstance(working_dir, str):
        problems["working_dir"] = "must be a string (empty: the workspace root)"
    elif working_dir and (working_dir.startswith(("/", "~")) or "\x00" in working_dir
                          or ".." in working_dir.replace("\\", "/").split("/") or len(working_dir) > 1024):
        problems["working_dir"] = "must be a path inside the workspace, relative to it (no /, ~ or ..)"
    group = fields.get("group")
    if not isinstance(group, str) or not GROUP_RE.fullmatch(group):
        problems["group"] = "must be lower-case letters, digits, _ and -, starting with a letter"
    for flag in ("enabled", "requires_approval", "always_require_approval"):
        if not _is_bool(fields.get(flag)):
            problems[flag] = "must be true or false"
    if fields.get("agent") is not None and not isinstance(fields.get("agent"), Agent):
        problems["agent"] = "must be an agent or empty"
    return problems


def _valid_name(name: Any) -> bool:
    return isinstance(name, str) and re.match(CUSTOM_TOOL_NAME_RE, name) is not None


def env_merged(current: dict[str, str], changes: dict[str, str | None]) -> dict[str, str]:
    """`current` with `changes` applied: a value sets a variable, None removes it, others are kept."""
    merged = dict(current)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def env_problems(env: Any, *, allow_unset: bool) -> str | None:
    """What is wrong with an env mapping (names → string values; with `allow_unset`, null removes a name)."""
    if not isinstance(env, dict):
        return "must be an object of variable names to string values"
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME_RE.fullmatch(key):
            return f"{str(key)[:80]!r} is not a valid environment variable name"
        if value is None and allow_unset:
            continue
        if not isinstance(value, str):
            return f"the value of {key} must be a string"
        if "\x00" in value:
            return f"the value of {key} must not contain a NUL byte"  # never echo the value itself
    return None


def tool_env_problems(env: Any, *, allow_unset: bool) -> str | None:
    """`env_problems`, plus the names a custom tool's env may not take: the arguments' variables."""
    problem = env_problems(env, allow_unset=allow_unset)
    if problem is None:
        reserved = sorted(key for key in env if key.startswith(ARG_ENV_PREFIX))
        if reserved:
            return f"{reserved[0]}: names starting with {ARG_ENV_PREFIX} are reserved for the arguments goclaw passes"
    return problem


def _collision(name: str, agent: Agent | None, exclude_pk: Any) -> str | None:
    """Why `name` cannot be used by a tool for `agent` (None: every agent), or None."""
    from tools_app.registry import registry

    existing = registry.get(name)
    if existing is not None:
        return f"{name} is a built-in tool" + (f" (alias of {existing.name})" if existing.name != name else "")
    if name in reserved_tool_names():
        return f"{name} is a tool goclaw provides"
    prefix = next((p for p in reserved_tool_prefixes() if name.startswith(p)), None)
    if prefix:
        return f"names starting with {prefix} are reserved for another tool source"
    clash = CustomTool.objects.filter(name=name).exclude(pk=exclude_pk)
    if agent is not None:
        clash = clash.filter(Q(agent__isnull=True) | Q(agent=agent))
    other = clash.select_related("agent").first()
    if other is None:
        return None
    if other.agent_id is None:
        return f"a global custom tool is already named {name}"
    return f"agent {other.agent.key}'s custom tool is already named {name}"


def custom_tool_check(fields: dict[str, Any], *, exclude_pk: Any = None) -> dict[str, str]:
    """Every problem with a complete definition, name collisions included (forms show them next to the fields;
    the write services repeat the check under their lock)."""
    problems = custom_tool_problems(fields)
    if "name" not in problems and "agent" not in problems:
        clash = _collision(fields["name"], fields.get("agent"), exclude_pk)
        if clash:
            problems["name"] = f"tool name collision: {clash}; choose another name"
    return problems


def _check(fields: dict[str, Any], exclude_pk: Any) -> None:
    problems = custom_tool_problems(fields)
    if problems:
        first = next(iter(problems.items()))
        raise ValidationError(f"{first[0]}: {first[1]}", code="custom_tool_invalid", details=problems)
    clash = _collision(fields["name"], fields.get("agent"), exclude_pk)
    if clash:
        raise CustomToolCollision(f"tool name collision: {clash}; choose another name", details={"name": clash})


def _lock() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_WRITE_LOCK])


def _seal_env(tool: CustomTool, env: dict[str, str]) -> None:
    tool.env_sealed = crypto.encrypt_json(env, associated_data=env_seal_context(tool.pk)) if env else ""
    tool.env_names = sorted(env)
    tool.env_changed_at = timezone.now()


def custom_tool_env_names(tool: CustomTool) -> list[str]:
    """The names of the variables set (never the values: the env is write-only)."""
    return list(tool.env_names or [])


def _open_env(tool: CustomTool) -> dict[str, str]:
    if not tool.env_sealed:
        return {}
    return crypto.decrypt_json(tool.env_sealed, associated_data=env_seal_context(tool.pk))


# --- writes --------------------------------------------------------------------------------------------------------
def _defaults() -> dict[str, Any]:
    return {"timeout_seconds": CUSTOM_TOOL_DEFAULT_TIMEOUT, "working_dir": "", "agent": None, "enabled": True,
            "group": "custom", "requires_approval": True, "always_require_approval": False}


@transaction.atomic
def custom_tool_create(*, actor, env: dict[str, str] | None = None, **fields: Any) -> CustomTool:
    """A new custom tool, checked whole (a clear error for a name a built-in or a visible custom tool has)."""
    unknown = set(fields) - set(EDITABLE)
    if unknown:
        raise ValidationError(f"unknown field(s): {', '.join(sorted(unknown))}", code="custom_tool_invalid")
    data = {**_defaults(), **fields}
    if env is not None and (problem := tool_env_problems(env, allow_unset=False)):
        raise ValidationError(f"env: {problem}", code="custom_tool_invalid", details={"env": problem})
    _lock()
    _check(data, None)
    tool = CustomTool.objects.create(created_by=actor if getattr(actor, "pk", None) else None, **data)
    if env:
        _seal_env(tool, env)
        tool.save(update_fields=["env_sealed", "env_names", "env_changed_at"])
    tools_changed()
    logger.info("custom tool %s (id %s) created by %s", tool.name, tool.pk, actor_name(actor))
    return tool


@transaction.atomic
def custom_tool_update(*, actor, tool: CustomTool, env: dict[str, str | None] | None = None,
                       **changes: Any) -> CustomTool:
    """Change some fields of a custom tool; `env` sets the given variables (null removes one) and leaves the rest."""
    unknown = set(changes) - set(EDITABLE)
    if unknown:
        raise ValidationError(f"unknown field(s): {', '.join(sorted(unknown))}", code="custom_tool_invalid")
    if env is not None and (problem := tool_env_problems(env, allow_unset=True)):
        raise ValidationError(f"env: {problem}", code="custom_tool_invalid", details={"env": problem})
    _lock()
    tool = CustomTool.objects.select_for_update().get(pk=tool.pk)
    data = {name: getattr(tool, name) for name in EDITABLE}
    data.update(changes)
    _check(data, tool.pk)
    for name, value in changes.items():
        setattr(tool, name, value)
    if env:
        _seal_env(tool, env_merged(_open_env(tool), env))
    tool.save()
    tools_changed()
    logger.info("custom tool %s (id %s) updated by %s: %s%s", tool.name, tool.pk, actor_name(actor),
                ", ".join(sorted(changes)) or "-", f"; env names {sorted(env)}" if env else "")
    return tool


@transaction.atomic
def custom_tool_delete(*, actor, tool: CustomTool) -> None:
    """Remove a custom tool; every process drops it within a second."""
    _lock()
    name, pk = tool.name, tool.pk
    CustomTool.objects.filter(pk=pk).delete()
    tools_changed()
    logger.info("custom tool %s (id %s) deleted by %s", name, pk, actor_name(actor))


# --- import / export -----------------------------------------------------------------------------------------------
def custom_tool_export(*, agent: Agent | None = None, ids: list[Any] | None = None) -> list[dict[str, Any]]:
    """Custom tools in the exchange format (all of them, global ones first; or one agent's own; or those in `ids`). Never the env values: a re-import keeps
    the values already set, and a tool moved elsewhere needs them set again."""
    rows = CustomTool.objects.select_related("agent").order_by(F("agent__key").asc(nulls_first=True), "name")
    if agent is not None:
        rows = rows.filter(agent=agent)
    if ids is not None:
        rows = rows.filter(pk__in=ids)
    return [{"name": row.name, "description": row.description, "parameters": row.parameters, "command": row.command,
             "timeout_seconds": row.timeout_seconds, "enabled": row.enabled, "working_dir": row.working_dir,
             "agent": row.agent.key if row.agent_id else None} for row in rows]


def _import_entry(position: str, entry: Any, agents: dict[str, Agent], problems: list[str]) -> dict[str, Any] | None:
    """One entry of an import checked on its own: its fields ready for create/update, or None (problems added)."""
    def problem(field: str, message: str) -> None:
        problems.append(f"{position}.{field}: {message}" if position else f"{field}: {message}")

    if not isinstance(entry, dict):
        problems.append(f"{position or '(top)'}: must be an object")
        return None
    unknown = set(entry) - set(EXCHANGE_FIELDS) - set(EXCHANGE_OPTIONAL)
    for key in sorted(map(str, unknown)):
        problem(key[:80], "unknown field")
    for key in ("name", "description", "parameters", "command"):
        if key not in entry:
            problem(key, "is required")
    agent_key = entry.get("agent")
    agent = None
    if agent_key is not None:
        agent = agents.get(agent_key) if isinstance(agent_key, str) else None
        if agent is None:
            problem("agent", f"no agent has the key {str(agent_key)[:80]!r}")
    fields = {**_defaults(), **{k: v for k, v in entry.items() if k in EDITABLE}, "agent": agent}
    existing = CustomTool.objects.filter(name=fields["name"], agent=agent).first() \
        if _valid_name(fields.get("name")) else None
    if existing is not None:  # an update keeps what the exchange format does not carry
        for name in ("group", "requires_approval", "always_require_approval"):
            fields[name] = getattr(existing, name)
    for field, message in custom_tool_problems(fields).items():
        if field in entry or field not in ("name", "description", "parameters", "command"):
            problem(field, message)
    env = entry.get("env")
    if env is not None and (message := tool_env_problems(env, allow_unset=False)):
        problem("env", message)
    return {"fields": fields, "env": env, "existing": existing}


@transaction.atomic
def custom_tool_import(*, actor, data: Any) -> dict[str, list[str]]:
    """Create or update (same name, same agent) the tools in `data`, one object or a list, all or nothing: every
    problem is reported with its position (`[2].parameters: …`) and nothing is saved unless there are none."""
    single = isinstance(data, dict)
    entries = [data] if single else data
    if not isinstance(entries, list):
        raise ValidationError("import: expected one tool object or a list of them", code="custom_tool_import_invalid",
                              details={"problems": ["(top): must be an object or a list of objects"]})
    _lock()
    keys = {e.get("agent") for e in entries if isinstance(e, dict) and isinstance(e.get("agent"), str)
            and AGENT_KEY_RE.fullmatch(e["agent"])}
    agents = {agent.key: agent for agent in Agent.objects.filter(key__in=keys)}
    problems: list[str] = []
    checked: list[tuple[str, dict[str, Any]]] = []
    for index, entry in enumerate(entries):
        position = "" if single else f"[{index}]"
        item = _import_entry(position, entry, agents, problems)
        if item is not None:
            checked.append((position, item))
    seen: dict[str, list[tuple[str, Agent | None]]] = {}
    for position, item in checked:
        fields = item["fields"]
        name, agent = fields.get("name"), fields.get("agent")
        if not _valid_name(name):
            continue  # already reported
        where = f"{position}.name" if position else "name"
        for other_position, other_agent in seen.get(name, []):
            if agent is None or other_agent is None or other_agent == agent:
                problems.append(f"{where}: {name} is also defined at {other_position}, visible to the same agent")
                break
        seen.setdefault(name, []).append((position, agent))
        exclude = item["existing"].pk if item["existing"] else None
        clash = _collision(name, agent, exclude)
        # A clash with a row this import replaces (same name, other scope) is still a clash: the rows coexist.
        if clash:
            problems.append(f"{where}: tool name collision: {clash}")
    if problems:
        raise ValidationError(f"import refused, nothing was saved: {len(problems)} problem(s); first: {problems[0]}",
                              code="custom_tool_import_invalid", details={"problems": problems})
    report: dict[str, list[str]] = {"created": [], "updated": []}
    for _, item in checked:
        fields, env, existing = item["fields"], item["env"], item["existing"]
        label = fields["name"] + (f" ({fields['agent'].key})" if fields["agent"] else "")
        if existing is None:
            custom_tool_create(actor=actor, env=env, **fields)
            report["created"].append(label)
        else:
            custom_tool_update(actor=actor, tool=existing, env=env, **fields)
            report["updated"].append(label)
    return report
