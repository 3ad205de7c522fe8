"""What a call may store, show or echo. Every caller-supplied string of a call (user id, session key, channel, chat
id, request id, tool name) is scrubbed once, when the pipeline builds the call's context, into `CallLabels`; the
audit row, the `tool.executed` event, stored outputs, rate-limit keys, approvals and refusal texts use the labels,
never the raw values. The tool itself gets the raw values: it acts for the real caller."""
from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from goclaw.db import pg_text
from tools_app.calls import CallContext
from tools_app.security.scrub import default_scrubber

LABEL_PSEUDONYM_HEX = 16
ECHO_MAX_CHARS = 80
_PSEUDONYM_TAIL_RE = re.compile(rf"~[0-9a-f]{{{LABEL_PSEUDONYM_HEX}}}\Z")
_pseudonym_key: bytes | None = None


def pseudonym(value: str) -> str:
    """A keyed hash of `value` (hex): distinct values stay distinguishable, and the value cannot be guessed back
    from it offline (the key is derived from SECRET_KEY)."""
    global _pseudonym_key
    if _pseudonym_key is None:
        _pseudonym_key = hashlib.sha256(b"goclaw.pipeline.label\0" + settings.SECRET_KEY.encode()).digest()
    digest = hmac.new(_pseudonym_key, value.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()
    return digest[:LABEL_PSEUDONYM_HEX]


def label(value: str, width: int) -> str:
    """`value` as it may be stored or shown: scrubbed, storable, at most `width` characters. A value that had to
    change (a credential was redacted, it was too long, it held NUL or a lone surrogate, or it already ends like a
    pseudonym) ends in `~` + a pseudonym of the whole raw value, so two distinct values never share a label
    unless their keyed hashes collide; any other value is kept as it is."""
    if not value:
        return ""
    text, count = default_scrubber.scrub(value)
    if not count and len(value) <= width and not _PSEUDONYM_TAIL_RE.search(value) and pg_text(value) == value:
        return value
    suffix = "~" + pseudonym(value)
    return pg_text(text)[: width - len(suffix)] + suffix


def echo(value: Any, limit: int = ECHO_MAX_CHARS) -> str:
    """A caller value as a refusal may quote it: scrubbed, storable, cut to `limit` characters."""
    text = value if isinstance(value, str) else repr(value)
    # Scrub before cutting (a cut token may no longer look like one); a credential is not longer than 4 KB
    # except a PEM block, whose header alone is redacted with everything after it.
    text, _ = default_scrubber.scrub(text[: limit + 4096])
    text = pg_text(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class CallLabels:
    """The caller-supplied identity strings of one call, scrubbed once (see `label`), at their audit widths."""

    user_id: str = ""
    session_key: str = ""
    channel: str = ""
    chat_id: str = ""
    request_id: str = ""


def call_labels(call: CallContext) -> CallLabels:
    # 200, not the 255-character columns: rate-limit keys hold an agent key and a label in 300 characters.
    return CallLabels(user_id=label(call.user_id, 200), session_key=label(call.session_key, 200),
                      channel=label(call.channel, 64), chat_id=label(call.chat_id, 200),
                      request_id=label(call.request_id, 64))


def labels_of(ctx: Any) -> CallLabels:
    """The labels of a tool context (computed now for a context built outside the pipeline)."""
    return ctx.labels if ctx.labels is not None else call_labels(ctx.call)
