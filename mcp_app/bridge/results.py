"""What a model reads from a tools/call answer: `convert_result` turns the SDK's `CallToolResult` into a
`CallResult` (plain text plus the structured value), so no SDK type leaves the bridge."""
from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from mcp_app.config import CallResult


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=False, default=str)


def _decoded_size(data: str | bytes | None) -> int:
    """Bytes of a base64 payload (without decoding a huge one twice)."""
    if data is None:
        return 0
    if isinstance(data, bytes):
        return len(data)
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)


def _describe(item: Any) -> str:
    """One content block as text: text as is, everything else described (never its bytes)."""
    kind = getattr(item, "type", "")
    if kind == "text":
        return item.text
    if kind in ("image", "audio"):
        return f"[{kind} content: {item.mime_type or 'unknown type'}, {_decoded_size(item.data)} bytes]"
    if kind == "resource_link":
        return f"[resource: {item.uri}]"
    if kind == "resource":
        res = item.resource
        text = getattr(res, "text", None)
        if text is not None:
            return f"[resource: {res.uri}]\n{text}"
        return f"[resource: {res.uri}, {res.mime_type or 'unknown type'}, {_decoded_size(getattr(res, 'blob', None))} bytes]"
    return f"[{kind or 'unknown'} content]"


def _duplicates(text: str, structured: Any) -> bool:
    """Does the text content already say what the structured content says (the SDK's usual mirror)?"""
    try:
        parsed = json.loads(text)
    except (TypeError, ValueError):
        parsed = text
    if parsed == structured:
        return True
    return isinstance(structured, dict) and set(structured) == {"result"} and parsed == structured["result"]


def convert_result(result: Any) -> CallResult:
    """Text content joined with "\\n"; non-text content described (`[image content: image/png, 68 bytes]`,
    `[resource: uri]`); structured content appended as compact JSON unless the text already mirrors it
    (servers usually send both); `isError` kept. `content_types` lists the block types seen, in order."""
    content = list(getattr(result, "content", None) or [])
    parts = [_describe(item) for item in content]
    types: list[str] = []
    for item in content:
        kind = getattr(item, "type", "unknown")
        if kind not in types:
            types.append(kind)
    structured = getattr(result, "structured_content", None)
    text = "\n".join(parts)
    if structured is not None:
        if "structured" not in types:
            types.append("structured")
        text_only = "\n".join(item.text for item in content if getattr(item, "type", "") == "text")
        if not text_only or not _duplicates(text_only, structured):
            text = (text + "\n" if text else "") + _compact(structured)
    return CallResult(text=text, is_error=bool(getattr(result, "is_error", False)), structured=structured,
                      content_types=tuple(types))
