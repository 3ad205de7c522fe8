"""The memory tools (group "memory"): `memory_search` (hybrid full-text + vector search) and `memory_get` (a
document or a line range), and the tool source that gives them to every agent. The user is always the call
context's user_id: a call sees that user's memory and the agent's shared memory, nothing else."""
from __future__ import annotations

import json
from typing import Any, Iterable

from goclaw.errors import ApplicationError
from tools_app.base import Tool, ToolContext, ToolError, ToolResult
from tools_app.memory.chunking import document_lines
from tools_app.memory.search import DEFAULT_RESULTS, MAX_QUERY_CHARS, MAX_RESULTS, memory_search
from tools_app.models.memory import MEMORY_PATH_MAX
from tools_app.toolsets import ToolSource

SOURCE_NAME = "memory"
GET_MAX_OUTPUT_CHARS = 256 * 1024


def _agent(ctx: ToolContext):
    from tools_app.models import Agent

    agent = Agent.objects.filter(pk=ctx.agent_id).first() if ctx.agent_id is not None else None
    if agent is None:
        agent = Agent.objects.filter(key=ctx.agent_key).first() if ctx.agent_key else None
    if agent is None:
        raise ToolError("memory is not available: the call has no agent")
    return agent


def _int(args: dict[str, Any], key: str) -> int | None:
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ToolError(f"argument {key} must be an integer >= 1")
    return value


class MemorySearchTool(Tool):
    name = "memory_search"
    description = (
        "Search your long-term memory (MEMORY.md and memory/*.md) by meaning and by words. Returns up to "
        "`max_results` (default 6) passages as JSON, best first, each with its path, line range, text and score; "
        "your own notes rank above the shared ones. Narrow with `path_prefix` (e.g. \"memory/projects/\") and drop "
        "weak matches with `min_score` (0-1.2). Read a whole file or more lines with memory_get."
    )
    parameters = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS,
                      "description": "What to look for, in natural language or keywords."},
            "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS,
                            "description": f"How many passages to return (default {DEFAULT_RESULTS})."},
            "path_prefix": {"type": "string", "maxLength": MEMORY_PATH_MAX,
                            "description": "Only files whose path starts with this."},
            "min_score": {"type": "number", "minimum": 0, "maximum": 10,
                          "description": "Leave out passages scoring below this (default: none)."},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    group = "memory"
    read_only = True
    timeout_seconds = 30.0

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("argument query must be a non-empty string")
        prefix = args.get("path_prefix") or ""
        if not isinstance(prefix, str):
            raise ToolError("argument path_prefix must be a string")
        min_score = args.get("min_score") or 0.0
        if isinstance(min_score, bool) or not isinstance(min_score, (int, float)):
            raise ToolError("argument min_score must be a number")
        result = memory_search(agent=_agent(ctx), user_id=ctx.user_id, query=query,
                               max_results=_int(args, "max_results"), path_prefix=prefix.removeprefix("./"),
                               min_score=float(min_score))
        payload = result.as_dict()
        for hit in payload["results"]:
            hit.pop("chunk_id", None)
        return ToolResult(for_llm=json.dumps(payload, ensure_ascii=False, indent=1))


class MemoryGetTool(Tool):
    name = "memory_get"
    description = (
        "Read one memory file (MEMORY.md, memory.md or memory/<name>), all of it or lines `from_line`..`to_line` "
        "(1-based, inclusive). Your own file of that path is read if you have one, else the shared one. The "
        "output starts with a header like `[memory/notes.md lines 3-9 of 40]`."
    )
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1, "maxLength": MEMORY_PATH_MAX,
                     "description": "e.g. MEMORY.md or memory/2024-05-01.md"},
            "from_line": {"type": "integer", "minimum": 1, "description": "First line (default 1)."},
            "to_line": {"type": "integer", "minimum": 1, "description": "Last line (default: the end)."},
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    group = "memory"
    read_only = True
    timeout_seconds = 30.0

    def run(self, ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
        from tools_app.memory.indexing import memory_document_get, memory_path_clean

        try:
            path = memory_path_clean(args.get("path"))
        except ApplicationError as exc:
            raise ToolError(exc.message) from None
        start, end = _int(args, "from_line"), _int(args, "to_line")
        if start is not None and end is not None and end < start:
            raise ToolError(f"to_line ({end}) must be >= from_line ({start})")
        document = memory_document_get(agent=_agent(ctx), user_id=ctx.user_id, path=path)
        if document is None:
            raise ToolError(f"no memory file {path}")
        lines = document_lines(document.content)
        total = len(lines)
        first = start or 1
        if total == 0:
            return ToolResult(for_llm=f"[{path} is empty]")
        if first > total:
            raise ToolError(f"from_line {first} is past the end of {path} ({total} lines)")
        last = min(end or total, total)
        text = "\n".join(lines[first - 1:last])
        header = f"[{path} lines {first}-{last} of {total}]"
        if len(text) > GET_MAX_OUTPUT_CHARS:
            text = text[:GET_MAX_OUTPUT_CHARS]
            text = text[:text.rfind("\n")] if "\n" in text else text  # whole lines only
            shown = first + text.count("\n")
            header = f"[{path} lines {first}-{shown} of {total}, cut at {GET_MAX_OUTPUT_CHARS} characters: " \
                     f"continue with from_line={shown + 1}]"
        return ToolResult(for_llm=f"{header}\n{text}")


MEMORY_TOOLS = (MemorySearchTool(), MemoryGetTool())


class MemoryToolSource(ToolSource):
    """Gives every agent memory_search and memory_get (what they reach is scoped per call, not per agent)."""

    name = SOURCE_NAME
    reserved_names = frozenset(tool.name for tool in MEMORY_TOOLS)

    def tools_for(self, agent: Any, user_id: str) -> Iterable[Tool]:
        return MEMORY_TOOLS
