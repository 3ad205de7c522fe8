"""Where an MCP call's context comes from: `X-Goclaw-*` headers (per HTTP request, captured at initialize for the
session) and per-call `params._meta` keys `goclaw/<field>`, which win. Values are checked exactly like the REST
execute body's `context` (the same parser)."""
from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping

from tools_app.api.serializers import call_context_parse
from tools_app.calls import CallContext

# The one mapping table: REST context field -> (HTTP header, `_meta` key). docs/mcp-server.md repeats it.
CONTEXT_KEYS: dict[str, tuple[str, str]] = {
    "user_id": ("x-goclaw-user", "goclaw/user_id"),
    "session_key": ("x-goclaw-session", "goclaw/session_key"),
    "channel": ("x-goclaw-channel", "goclaw/channel"),
    "chat_id": ("x-goclaw-chat-id", "goclaw/chat_id"),
    "provider": ("x-goclaw-provider", "goclaw/provider"),
    "peer_kind": ("x-goclaw-peer-kind", "goclaw/peer_kind"),
}


def raw_context_from_headers(headers: Mapping[str, str]) -> dict[str, Any]:
    """The REST-shaped context fields the request's headers carry (absent headers are not fields)."""
    return {name: headers[header] for name, (header, _) in CONTEXT_KEYS.items() if header in headers}


def raw_context_from_meta(meta: Any) -> dict[str, Any]:
    """The REST-shaped context fields a call's `_meta` carries (anything but an object carries none)."""
    if not isinstance(meta, Mapping):
        return {}
    return {name: meta[key] for name, (_, key) in CONTEXT_KEYS.items() if key in meta}


def call_context(*layers: dict[str, Any], request_id: str = "") -> CallContext:
    """Merge context layers (later ones win) and validate them with the REST parser; ValidationError names the
    offending fields. A context of text fields only (headers, nearly every `_meta`) is parsed once per process."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update(layer)
    if all(isinstance(value, str) for value in merged.values()):
        context = _text_context(tuple(sorted(merged.items())))
    else:
        context = call_context_parse(merged)
    return context.replace(request_id=request_id[:64]) if request_id else context


@lru_cache(maxsize=1024)
def _text_context(items: tuple[tuple[str, str], ...]) -> CallContext:
    return call_context_parse(dict(items))  # CallContext is immutable; a refusal is raised again, never kept
