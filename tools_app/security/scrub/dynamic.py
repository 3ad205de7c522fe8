"""Dynamic secrets: values injected at runtime (decrypted credentials) and
their common encodings, found with a Hyperscan literal database that is
rebuilt copy-on-write when the set changes."""
from __future__ import annotations

import base64
import urllib.parse

from .engine import Hs as _Hs
from .engine import project as _project


# ---------------------------------------------------------------------------
def _forms(value: str) -> set[str]:
    """The value plus its base64 (std/urlsafe, padding not required),
    URL-encoded (quote/quote_plus) and hex (lower/upper) encodings."""
    out = {value}
    raw = value.encode("utf-8")
    out.add(base64.b64encode(raw).decode().rstrip("="))
    out.add(base64.urlsafe_b64encode(raw).decode().rstrip("="))
    out.add(urllib.parse.quote(value, safe=""))
    out.add(urllib.parse.quote_plus(value))
    h = raw.hex()
    out.add(h)
    out.add(h.upper())
    return out


class _Dyn:
    """Immutable snapshot: dynamic values and a Hyperscan literal database of
    all their forms (projected like the text; a hit is confirmed against the
    real text with ``str.startswith``)."""

    __slots__ = ("values", "forms", "hs", "by_id")

    def __init__(self, values: frozenset, min_len: int):
        self.values = values
        forms: set[str] = set()
        for v in values:
            forms.update(f for f in _forms(v) if f and len(f) >= min_len)
        self.forms = frozenset(forms)
        by_literal: dict[bytes, list[str]] = {}
        for f in sorted(forms):
            by_literal.setdefault(_project(f), []).append(f)
        self.by_id = list(by_literal.values())
        self.hs = _Hs(list(by_literal), literal=True) if by_literal else None

    def spans(self, text: str, data: bytes, out: list) -> None:
        if self.hs is None:
            return
        by_id = self.by_id
        for eid, _, end in self.hs.scan(data):
            for form in by_id[eid]:
                s = end - len(form)
                if text.startswith(form, s):
                    out.append((s, end))
