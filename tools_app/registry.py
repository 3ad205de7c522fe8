"""Thread-safe tool registry. Apps register their tools from AppConfig.ready(); MCP adds/removes at runtime.

A per-agent registry is a `clone()` layered on the global one: lookups fall through to the parent,
local registrations shadow it, and local `hide()` removes a parent tool from the view.
"""
from __future__ import annotations

import itertools
import threading
from typing import Any, Iterable

import jsonschema

from tools_app.base import Tool


class RegistryError(ValueError):
    pass


_instance_ids = itertools.count(1)


_SCHEMA_PROBLEMS: dict[str, str | None] = {}  # a schema's repr -> why it is not a JSON Schema (None: it is one)


def _schema_problem(schema: Any) -> str | None:
    """Checking a schema against the 2020-12 metaschema costs ~1 ms; every agent's tool set registers the same ones
    again after each change (tools_app/toolsets.py). Remembered by repr: plain data, so the same text is the same
    schema (a tuple and a list differ)."""
    key = repr(schema)
    if key in _SCHEMA_PROBLEMS:
        return _SCHEMA_PROBLEMS[key]
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
        problem = None
    except jsonschema.SchemaError as exc:
        problem = exc.message
    if len(key) <= 65536:  # an MCP server's schema may be huge: only ordinary ones are kept (at most 4,096 of them)
        if len(_SCHEMA_PROBLEMS) >= 4096:
            _SCHEMA_PROBLEMS.clear()
        _SCHEMA_PROBLEMS[key] = problem
    return problem


class ToolRegistry:
    def __init__(self, parent: "ToolRegistry | None" = None, key: Any = None) -> None:
        self._parent = parent
        # What caches derived from this view (catalogs, permissions) are keyed by: never an id(), which Python
        # reuses once a view is garbage collected.
        self._key = key if key is not None else ("registry", next(_instance_ids))
        self._tools: dict[str, Tool] = {}
        self._aliases: dict[str, str] = {}
        self._groups: dict[str, set[str]] = {}
        self._hidden: set[str] = set()
        self._lock = threading.RLock()
        self._version = 0

    # --- registration -------------------------------------------------------------------------
    def register(self, tool: Tool, *, replace: bool = False) -> None:
        if not tool.name or not tool.name.replace("_", "").replace("-", "").replace(".", "").isalnum():
            raise RegistryError(f"invalid tool name {tool.name!r}")
        if problem := _schema_problem(tool.parameters):
            raise RegistryError(f"tool {tool.name}: invalid parameters schema: {problem}")
        if tool.parameters.get("type") != "object":
            raise RegistryError(f"tool {tool.name}: parameters must be a JSON Schema of type object")
        with self._lock:
            if tool.name in self._tools and not replace:
                raise RegistryError(f"tool {tool.name} is already registered")
            self._tools[tool.name] = tool
            self._hidden.discard(tool.name)
            for alias in tool.aliases:
                self._aliases[alias] = tool.name
            if tool.group:
                self._groups.setdefault(tool.group, set()).add(tool.name)
            self._version += 1

    def unregister(self, name: str) -> None:
        with self._lock:
            tool = self._tools.pop(name, None)
            if tool is None:
                if self._parent is not None and self._parent.get(name) is not None:
                    self._hidden.add(name)  # hide the inherited tool in this view only
                    self._version += 1
                return
            for alias in tool.aliases:
                self._aliases.pop(alias, None)
            for members in self._groups.values():
                members.discard(name)
            self._version += 1

    def add_group(self, group: str, names: Iterable[str]) -> None:
        """Add members to a group (apps and MCP add groups such as `mcp:<server>` at runtime)."""
        with self._lock:
            self._groups.setdefault(group, set()).update(names)
            self._version += 1

    def remove_group(self, group: str) -> None:
        with self._lock:
            self._groups.pop(group, None)
            self._version += 1

    # --- lookups ------------------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self._version + (self._parent.version if self._parent else 0)

    @property
    def cache_key(self) -> tuple:
        return (self._key, self.version)

    def canonical_name(self, name: str) -> str:
        with self._lock:
            if name in self._aliases:
                return self._aliases[name]
        return self._parent.canonical_name(name) if self._parent else name

    def get(self, name: str) -> Tool | None:
        name = self.canonical_name(name)
        with self._lock:
            if name in self._hidden:
                return None
            tool = self._tools.get(name)
        if tool is None and self._parent is not None:
            return self._parent.get(name)
        return tool

    def names(self) -> list[str]:
        with self._lock:
            own, hidden = set(self._tools), set(self._hidden)
        inherited = set(self._parent.names()) if self._parent else set()
        return sorted((own | inherited) - hidden)

    def all(self) -> list[Tool]:
        return [t for t in (self.get(n) for n in self.names()) if t is not None]

    def groups(self) -> dict[str, set[str]]:
        """Group name (without `group:`) -> member tool names, including the composite `goclaw` group."""
        merged: dict[str, set[str]] = {g: set(m) for g, m in (self._parent.groups().items() if self._parent else [])}
        with self._lock:
            for group, members in self._groups.items():
                merged.setdefault(group, set()).update(members)
            hidden = set(self._hidden)
        names = set(self.names())
        result = {g: (m - hidden) & names for g, m in merged.items()}
        return result

    def expand(self, names: Iterable[str]) -> set[str]:
        """Expand `group:x` entries and aliases into canonical tool names (unknown names are kept)."""
        groups = None
        out: set[str] = set()
        for name in names:
            if name.startswith("group:"):
                if groups is None:
                    groups = self.groups()
                out |= groups.get(name[6:], set())
            else:
                out.add(self.canonical_name(name))
        return out

    def definitions(self, names: Iterable[str] | None = None) -> list[dict]:
        wanted = self.names() if names is None else sorted({self.canonical_name(n) for n in names})
        return [t.definition() for t in (self.get(n) for n in wanted) if t is not None]

    def clone(self, key: Any = None) -> "ToolRegistry":
        return ToolRegistry(parent=self, key=key)


registry = ToolRegistry()
