"""Reading and writing the document: YAML (or JSON) text in and out, the top-level shape checked, and GoClaw's JSON
shapes (custom tool lists, MCP servers, MCP grants) converted to the same sections."""
from __future__ import annotations

import json
from typing import Any

import yaml

from config_app.errors import ConfigInvalid, problem
from config_app.sections import SECTIONS_BY_NAME

DOCUMENT_VERSION = 1
MAX_DOCUMENT_BYTES = 10 * 1024 * 1024
MAX_DEPTH = 32  # far deeper than any section needs; deeper nesting would only exhaust the stack downstream
TOP_LEVEL = ("version", "literal_secrets")
# GoClaw's export carries row metadata goclaw does not import: dropped, never an error.
_GOCLAW_METADATA = ("id", "tenant_id", "created_by", "created_at", "updated_at", "granted_by", "server_id", "agent_id")
_GOCLAW_SECTIONS = {"custom_tools": "custom_tools", "tools": "custom_tools", "mcp_servers": "mcp_servers",
                    "servers": "mcp_servers", "grants": "mcp_agent_grants", "agent_grants": "mcp_agent_grants",
                    "mcp_agent_grants": "mcp_agent_grants", "user_grants": "mcp_user_grants",
                    "mcp_user_grants": "mcp_user_grants"}
_GOCLAW_RENAMES = {"timeout_sec": "timeout_seconds", "server_name": "server", "agent_key": "agent"}


class _Loader(yaml.SafeLoader):
    """safe_load without aliases (an alias can expand a small document into a huge one: billion laughs) and without
    duplicate keys (a reviewer would read one value while the import applies the other)."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.MarkedYAMLError("while reading the document", None, "aliases (*name) are not accepted",
                                       event.start_mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode):
                    continue
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.MarkedYAMLError("while reading the document", None, f"duplicate key {str(key)[:80]!r}",
                                               key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def document_load(text: str | bytes) -> Any:
    """The parsed document (YAML; JSON is YAML too). ConfigInvalid when it is not readable."""
    if isinstance(text, bytes):
        if len(text) > MAX_DOCUMENT_BYTES:
            raise ConfigInvalid([problem("(document)", f"larger than {MAX_DOCUMENT_BYTES} bytes")])
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigInvalid([problem("(document)", "not UTF-8 text")]) from None
    if len(text) > MAX_DOCUMENT_BYTES:
        raise ConfigInvalid([problem("(document)", f"larger than {MAX_DOCUMENT_BYTES} bytes")])
    try:
        data = _json_or_yaml(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" (line {where.line + 1}, column {where.column + 1})" if where else ""
        reason = getattr(exc, "problem", None) or "not valid YAML or JSON"
        raise ConfigInvalid([problem("(document)", f"{reason}{at}")]) from None
    except RecursionError:
        raise ConfigInvalid([problem("(document)", f"nested deeper than {MAX_DEPTH} levels")]) from None
    if _too_deep(data):
        raise ConfigInvalid([problem("(document)", f"nested deeper than {MAX_DEPTH} levels")])
    return data


def _json_or_yaml(text: str) -> Any:
    """JSON is YAML, except for details such as tab indentation: JSON-looking text is read as JSON first."""
    if text.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(text, object_pairs_hook=_unique_keys)
        except _DuplicateKey as exc:
            raise ConfigInvalid([problem("(document)", f"duplicate key {exc.args[0][:80]!r}")]) from None
        except ValueError:
            pass
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data = dict(pairs)
    if len(data) != len(pairs):
        raise _DuplicateKey(next(k for i, (k, _) in enumerate(pairs) if k in dict(pairs[:i])))
    return data


def _too_deep(data: Any) -> bool:
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > MAX_DEPTH:
                return True
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return False


def document_dump(document: dict[str, Any], *, fmt: str = "yaml") -> str:
    """The document as text: YAML (block style, keys in the export's order) or JSON."""
    if fmt == "json":
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, default_flow_style=None, width=120)


def _goclaw_entry(entry: Any) -> Any:
    if not isinstance(entry, dict):
        return entry
    return {_GOCLAW_RENAMES.get(k, k): v for k, v in entry.items() if k not in _GOCLAW_METADATA}


def _from_goclaw(data: Any) -> dict[str, Any] | None:
    """A GoClaw-shaped JSON document as sections, or None when `data` is not one."""
    if isinstance(data, list):
        return {"custom_tools": [_goclaw_entry(e) for e in data]}
    if not isinstance(data, dict):
        return None
    if "transport" in data and "name" in data:
        return {"mcp_servers": [_goclaw_entry(data)]}
    if "command" in data and "name" in data:
        return {"custom_tools": [_goclaw_entry(data)]}
    if data and all(k in _GOCLAW_SECTIONS or k == "literal_secrets" for k in data):
        sections: dict[str, Any] = {}
        for key, value in data.items():
            if key in _GOCLAW_SECTIONS:
                entries = [_goclaw_entry(e) for e in value] if isinstance(value, list) else value
                sections.setdefault(_GOCLAW_SECTIONS[key], [])
                if isinstance(entries, list) and isinstance(sections[_GOCLAW_SECTIONS[key]], list):
                    sections[_GOCLAW_SECTIONS[key]] += entries
                else:
                    sections[_GOCLAW_SECTIONS[key]] = entries
        return sections
    return None


def document_normalize(data: Any) -> tuple[dict[str, list], dict[str, Any]]:
    """(sections present in the document, options) from a parsed document. Options: `literal_secrets` (literal
    values accepted) and `partial` (GoClaw shapes: fields an entry leaves out keep their current value)."""
    if isinstance(data, dict) and "version" in data:
        problems = []
        if data["version"] != DOCUMENT_VERSION or isinstance(data["version"], bool):
            problems.append(problem("version", f"must be {DOCUMENT_VERSION}"))
        for key in data:
            if key not in TOP_LEVEL and key not in SECTIONS_BY_NAME:
                problems.append(problem(str(key)[:80], "unknown section; sections are " + ", ".join(SECTIONS_BY_NAME)))
        if not isinstance(data.get("literal_secrets", False), bool):
            problems.append(problem("literal_secrets", "true or false"))
        sections = {k: v for k, v in data.items() if k in SECTIONS_BY_NAME}
        options = {"literal_secrets": data.get("literal_secrets") is True, "partial": False}
    else:
        converted = _from_goclaw(data)
        if converted is None:
            raise ConfigInvalid([problem("version", f"missing: a goclaw document starts with version: "
                                                     f"{DOCUMENT_VERSION} (or is one of GoClaw's JSON shapes)")])
        problems, sections = [], converted
        # GoClaw's formats carry env and header values in clear: that is what a GoClaw user moves over with.
        options = {"literal_secrets": True, "partial": True}
    for name, entries in sections.items():
        if entries is None:
            sections[name] = []
        elif not isinstance(entries, list):
            problems.append(problem(name, "must be a list of entries"))
    if problems:
        raise ConfigInvalid(problems)
    return sections, options
