"""The API parses request bodies with orjson (goclaw.renderers.FastJSONParser); every body must still parse, or be
refused, exactly as DRF's JSONParser did: the same values (exact big integers, lone surrogates), the same 400
envelope for NaN, Infinity and malformed JSON, and never a 500."""
import io
import json

import pytest
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from goclaw.renderers import FastJSONParser

EXECUTE = "/api/v1/tools/execute"


def typed(value):
    """`value` with every scalar's type kept (1 and 1.0, True and 1 compare equal in Python; here they differ)."""
    if isinstance(value, dict):
        return {key: typed(v) for key, v in value.items()}
    if isinstance(value, list):
        return [typed(v) for v in value]
    return (type(value).__name__, repr(value))


def parsed(parser, body: bytes, encoding: str = "utf-8"):
    """("value", the parsed value with its types) or ("refused", DRF's error detail)."""
    try:
        return "value", typed(parser.parse(io.BytesIO(body), "application/json", {"encoding": encoding}))
    except ParseError as exc:
        return "refused", str(exc.detail)


BODIES = {
    "an ordinary request":
        b'{"tool": "datetime", "arguments": {"timezone": "Europe/Paris", "n": [1, 2.5, -3e2, true, null]}}',
    "escapes and non-ASCII text": '{"text": "caf\\u00e9 \\ud83d\\ude00 \\n\\t\\"\\\\ ☃ é"}'.encode(),
    "a lone surrogate escape": b'{"text": "\\ud800 and \\udfff"}',
    "a scalar at the top": b'  42 ',
    "a duplicate key (the last one wins)": b'{"a": 1, "a": 2}',
    "the largest unsigned 64-bit integer": b'{"n": 18446744073709551615}',
    "an integer past 64 bits": b'{"n": 18446744073709551616}',
    "a long integer": b'{"n": 123456789012345678901234567890}',
    "a negative integer past 64 bits": b'{"n": -9223372036854775809}',
    "a float too large for a double": b'{"n": 1e400}',
    "nesting two hundred deep": b"[" * 200 + b"]" * 200,
    "NaN": b'{"n": NaN}',
    "Infinity": b'{"n": Infinity}',
    "-Infinity": b'[-Infinity]',
    "a trailing comma": b'{"a": 1,}',
    "a missing value": b'{"tool": }',
    "an unterminated object": b'{"tool": "datetime"',
    "a raw control character in a string": b'{"a": "\x01"}',
    "bytes that are not UTF-8": b'{"a": "\xff\xfe"}',
    "a UTF-8 byte order mark": b'\xef\xbb\xbf{}',
    "single quotes": b"{'a': 1}",
    "trailing garbage": b'{} {}',
}


@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
def test_every_body_parses_or_is_refused_exactly_as_drfs_parser_does_it(body):
    assert parsed(FastJSONParser(), body) == parsed(JSONParser(), body)


@pytest.mark.parametrize("text, encoding", [("{\"name\": \"Zoë ½\"}", "latin-1"), ("{\"name\": \"Zoë ☃\"}", "utf-16")])
def test_a_body_in_another_charset_parses_as_drfs_parser_does_it(text, encoding):
    body = text.encode(encoding)
    assert parsed(FastJSONParser(), body, encoding) == parsed(JSONParser(), body, encoding)
    assert parsed(FastJSONParser(), body, encoding)[0] == "value"


def test_integers_past_64_bits_keep_every_digit():
    value = FastJSONParser().parse(io.BytesIO(b'{"big": 18446744073709551617, "small": -9223372036854775809}'),
                                   "application/json", {"encoding": "utf-8"})
    assert value == {"big": 18446744073709551617, "small": -9223372036854775809}
    assert all(type(n) is int for n in value.values())


def execute(api, body: bytes, content_type: str = "application/json"):
    return api.post(EXECUTE, data=body, content_type=content_type)


def drf_refusal(body: bytes) -> dict:
    """The error envelope the API answered for a body DRF's JSONParser refused."""
    with pytest.raises(ParseError) as refused:
        JSONParser().parse(io.BytesIO(body), "application/json", {"encoding": "utf-8"})
    return {"error": {"code": "malformed_request", "message": f"malformed request body: {refused.value.detail}",
                      "details": None}}


def test_an_ordinary_call_runs_through_the_api(api):
    response = execute(api, json.dumps({"tool": "datetime", "arguments": {"timezone": "UTC"}}).encode())
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "ok"


def test_a_body_holding_a_lone_surrogate_escape_is_still_accepted(api, agent):
    # orjson refuses "\ud800"; DRF's parser took it, so the call reaches the pipeline as it did (which stores the
    # arguments made storable).
    from tools_app.models import ToolInvocation

    response = execute(api, b'{"tool": "datetime", "arguments": {"timezone": "UTC", "note": "a\\ud800b"}}')
    assert response.status_code == 200, response.content
    row = ToolInvocation.objects.get(pk=response.json()["invocation_id"])
    assert row.agent_key == agent.key
    assert row.arguments["note"][0] == "a" and row.arguments["note"][2] == "b"  # the surrogate replaced, not refused


@pytest.mark.parametrize("body", [b'{"tool": "datetime", "arguments": {"n": NaN}}',
                                  b'{"tool": "datetime", "arguments": {"n": Infinity}}',
                                  b'{"tool": "datetime", "arguments": {"n": -Infinity}}'],
                         ids=["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_refused_with_the_same_400_envelope_as_before(api, body):
    response = execute(api, body)
    assert response.status_code == 400
    assert response.json() == drf_refusal(body)


MALFORMED = {
    "a missing value": b'{"tool": }',
    "an unterminated object": b'{"tool": "datetime"',
    "a trailing comma": b'{"tool": "datetime",}',
    "a raw control character": b'{"tool": "date\x01time"}',
    "bytes that are not UTF-8": b'{"tool": "\xff"}',
    "a byte order mark": b'\xef\xbb\xbf{"tool": "datetime"}',
    "two documents": b'{"tool": "datetime"} {}',
    "a bare word": b'datetime',
}


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_malformed_json_is_a_400_in_the_error_envelope(api, body):
    response = execute(api, body)
    assert response.status_code == 400, response.content[:300]
    assert response.json() == drf_refusal(body)


@pytest.mark.parametrize("depth", [1100, 100_000])
def test_json_nested_deeper_than_any_parser_takes_is_a_400_not_a_500(api, depth):
    response = execute(api, b'[' * depth + b']' * depth)
    assert response.status_code == 400, response.content[:300]
    assert response.json()["error"]["code"] == "malformed_request"
