"""Where an agent's tools come from. A *tool source* contributes tools (and groups) for an (agent, user): built-ins
from code, custom tools from the database, MCP servers' tools, the tools of other apps. `toolset_for(agent,
user_id)` composes them into one `ToolRegistry` view; the catalog, the policy engine, execution and the resumption
of approved calls all use it, so a tool is the same object everywhere a call meets it.

A source whose tools change (an admin edit, an MCP listing refreshed) calls `tools_changed()` in the writing
transaction: every process rebuilds its tool sets within `goclaw.generations.CHECK_SECONDS` (0.5 s).
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Iterable

from django.conf import settings
from django.utils.module_loading import import_string

from goclaw.generations import generation_bump, generation_cache
from tools_app.base import Tool
from tools_app.registry import RegistryError, ToolRegistry, registry

logger = logging.getLogger("goclaw.toolsets")
TOOLSETS_CACHE = "toolsets"


class ToolSource:
    """A contributor of tools. `tools_for` is called when a tool set is (re)built, not per call: it may query the
    database. Names must not collide with another source's (a collision keeps the earlier source's tool)."""

    name = "source"
    # Tool names this source may contribute whatever its data (a name no other source may take, e.g. a custom tool).
    reserved_names: frozenset[str] = frozenset()
    # Name prefixes only this source may use whatever its data (MCP tools: `mcp_`).
    reserved_prefixes: tuple[str, ...] = ()

    def tools_for(self, agent: Any, user_id: str) -> Iterable[Tool]:  # pragma: no cover - abstract
        return ()

    def groups_for(self, agent: Any, user_id: str) -> dict[str, Iterable[str]]:
        """Extra groups (`mcp:<server>` …) → member tool names, beyond each tool's own `group`."""
        return {}


_sources: list[ToolSource] = []
_sources_lock = threading.Lock()
_settings_loaded = False
_cache = generation_cache(TOOLSETS_CACHE)


def tool_source_register(source: ToolSource) -> None:
    """Add a source (apps call this from `AppConfig.ready()`; one with the same name replaces the old one)."""
    with _sources_lock:
        _sources[:] = [s for s in _sources if s.name != source.name] + [source]
    _cache.clear()


def tool_source_unregister(name: str) -> None:
    with _sources_lock:
        _sources[:] = [s for s in _sources if s.name != name]
    _cache.clear()


def tool_sources() -> list[ToolSource]:
    """The registered sources, plus those named by the GOCLAW_TOOL_SOURCES setting (dotted paths, loaded once)."""
    global _settings_loaded
    if not _settings_loaded:
        with _sources_lock:
            if not _settings_loaded:
                for path in getattr(settings, "TOOL_SOURCES", ()):
                    source = import_string(path)()
                    _sources[:] = [s for s in _sources if s.name != source.name] + [source]
                _settings_loaded = True
    return list(_sources)


def reserved_tool_names() -> frozenset[str]:
    """Every name a registered source reserves: a custom tool (or any tool defined in data) may not take one."""
    return frozenset().union(*(source.reserved_names for source in tool_sources()))


def reserved_tool_prefixes() -> tuple[str, ...]:
    """Every name prefix a registered source reserves (a custom tool may not start with one)."""
    return tuple(prefix for source in tool_sources() for prefix in source.reserved_prefixes)


def tools_changed() -> None:
    """A source's tools changed: bump the shared generation (inside the writer's transaction)."""
    generation_bump(TOOLSETS_CACHE)


def toolset_for(agent: Any, user_id: str = "") -> ToolRegistry:
    """The tools `agent` has for `user_id`: the built-in registry with every source's tools layered on top.
    Cached per process until a source reports a change; without sources it is the built-in registry itself."""
    sources = tool_sources()
    if not sources:
        return registry
    generation = _cache.sync()
    return _cache.get((agent.pk, user_id, registry.version), lambda: _compose(agent, user_id, sources, generation))


def _compose(agent: Any, user_id: str, sources: list[ToolSource], generation: int) -> ToolRegistry:
    view = registry.clone(key=("toolset", agent.pk, user_id, generation))
    for source in sources:
        try:
            tools = list(source.tools_for(agent, user_id))
            groups = source.groups_for(agent, user_id)
        except Exception:  # one broken source must not take the built-ins down; its tools are simply absent
            logger.exception("tool source %s failed for agent %s; its tools are left out", source.name, agent.pk)
            continue
        for tool in tools:
            if view.get(tool.name) is not None:
                logger.warning("tool source %s: %s is already provided; ignored", source.name, tool.name)
                continue
            try:
                view.register(tool)
            except RegistryError as exc:
                logger.warning("tool source %s: %s", source.name, exc)
        for group, names in groups.items():
            view.add_group(group, names)
    return view
