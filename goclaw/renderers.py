"""The API's JSON renderer and parser: DRF's JSONRenderer output, byte for byte, produced by orjson (native code) instead of
the standard library's encoder: a tool catalog renders several times faster. Anything orjson will not take as
DRF would (big integers, non-string keys, deep nesting, indented output) is rendered by DRF's own renderer."""
from __future__ import annotations

import io
import re

import orjson
from django.conf import settings
from rest_framework.exceptions import ParseError
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
    deep nesting, bad JSON) or would read otherwise (integers past 64 bits) goes to DRF's own parser, so every body
    parses, or fails, exactly as it did there; orjson, like DRF's strict mode, takes no NaN or Infinity. One
    difference: a body nested past Python's recursion limit is a 400 (malformed), where DRF's parser raised a 500."""

    def parse(self, stream, media_type=None, parser_context=None):
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        if stream is not None and encoding.lower().replace("-", "") == "utf8":
            body = stream.read()
            if not _PAST_64_BITS.search(body):
                try:
                    return orjson.loads(body)
                except orjson.JSONDecodeError:
                    pass
            stream = io.BytesIO(body)
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:  # nested past Python's recursion limit: DRF let that out as a 500
            raise ParseError("JSON parse error - nested too deeply") from None


# orjson does not refuse an integer past 64 bits: it reads it as a float, its last digits lost. Any such integer
# has 20 digits, or 19 after a minus sign; a body holding such a run of digits (in a string or a fraction too, which
# only costs it the slower parser) goes to DRF's parser, which keeps the integer exact.
_PAST_64_BITS = re.compile(rb"[0-9]{20}|-[0-9]{19}")
