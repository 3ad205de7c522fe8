"""The API's JSON renderer and parser: DRF's JSONRenderer output, byte for byte, produced by orjson (native code) instead of
the standard library's encoder: a tool catalog renders several times faster. Anything orjson will not take as
DRF would (big integers, non-string keys, deep nesting, indented output) is rendered by DRF's own renderer."""
from __future__ import annotations

import io

import orjson
from django.conf import settings
from rest_framework.parsers import JSONParser
from rest_framework.renderers import JSONRenderer
from rest_framework.utils.encoders import JSONEncoder

# Dates, times and dataclasses go through DRF's encoder (`Z` for UTC, its errors), everything else natively.
_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
_default = JSONEncoder().default


class FastJSONRenderer(JSONRenderer):
    """JSONRenderer (compact, UTF-8, U+2028/U+2029 escaped) through orjson. Its one difference: NaN and infinities
    render as null, where DRF's strict JSON raised (a 500)."""

    def render(self, data, accepted_media_type=None, renderer_context=None):
        if data is None:
            return b""
        if accepted_media_type and "indent" in accepted_media_type or renderer_context and renderer_context.get("indent"):
            return super().render(data, accepted_media_type, renderer_context)
        try:
            body = orjson.dumps(data, default=_default, option=_OPTIONS)
        except orjson.JSONEncodeError:
            return super().render(data, accepted_media_type, renderer_context)
        if b"\xe2\x80\xa8" in body or b"\xe2\x80\xa9" in body:  # JSON allows them raw, JavaScript does not
            body = body.replace(b"\xe2\x80\xa8", b"\\u2028").replace(b"\xe2\x80\xa9", b"\\u2029")
        return body


class FastJSONParser(JSONParser):
    """JSONParser through orjson for UTF-8 bodies. Whatever orjson refuses (other encodings, lone surrogate escapes,
    integers past 64 bits, deep nesting, bad JSON) goes to DRF's own parser, so every body parses, or fails, exactly
    as it did there; orjson, like DRF's strict mode, takes no NaN or Infinity."""

    def parse(self, stream, media_type=None, parser_context=None):
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        if stream is None or encoding.lower().replace("-", "") != "utf8":
            return super().parse(stream, media_type, parser_context)
        body = stream.read()
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            return super().parse(io.BytesIO(body), media_type, parser_context)
