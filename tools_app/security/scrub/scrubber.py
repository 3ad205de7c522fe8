"""The Scrubber: static detectors (engine.py over detectors.py) plus the
dynamic values an instance has been given, merged into one redaction pass."""
from __future__ import annotations

import functools
import re
import threading
from collections.abc import Iterable
from typing import Any

from .detectors import DETECTORS
from .dynamic import _Dyn
from .engine import Engine, project

REDACTED = "[REDACTED]"

@functools.cache
def default_engine() -> Engine:
    """The compiled default table, shared by every Scrubber: compiled on first use (~0.2 s), not at import, so a
    process that never scrubs (a management command) never pays for it; servers compile it as they start
    (goclaw.warmup)."""
    return Engine(DETECTORS)


def _scan(text: str, dyn: _Dyn, engine: Engine) -> list[tuple[int, int]]:
    """Spans to redact: the static detectors at the prefilter's candidate
    positions, then the dynamic values."""
    out: list[tuple[int, int]] = []
    data = project(text)
    engine.spans(text, data, out)
    dyn.spans(text, data, out)
    return out


# ---------------------------------------------------------------------------
_DATA_KEY_RE = re.compile(
    r"(?i)(pass(?:word|wd|phrase)?|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|"
    r"client[_-]?secret|authorization|auth|credentials?|cookie|session(?:[_-]?id|[_-]?key)?|"
    r"signature|dsn|conn(?:ection)?[_-]?str(?:ing)?|x[_-]api[_-]key)"
)
_DATA_KEY_NONSECRET = re.compile(
    r"(?i)(?:^|[_\-.])(?:count|type|name|length|len|size|limit|ttl|expiry|expires(?:_?in|_?at)?|"
    r"url|uri|endpoint|path|file|dir|version|format|usage|kind|mode|id|ids|enabled|required|"
    r"policy|method|provider|backend|hint|min|max|timeout|status)$|^(?:author|authors|authority|"
    r"tokenizer|tokens|max_tokens|session_timeout|passed|password_reset_url)$"
)


def _data_key_sensitive(key: str) -> bool:
    m = _DATA_KEY_RE.search(key)
    if not m:
        return False
    if _DATA_KEY_NONSECRET.search(key):
        return False
    kl = key.lower()
    # short words must be a whole segment (author, oauth_provider, passenger,
    # bypass... are fine)
    word = m.group(1).lower()
    if word in ("auth", "pass", "pwd"):
        s, e = m.span(1)
        before = key[s - 1:s]
        after = key[e:e + 1]
        if (before and before.isalnum() and not key[s].isupper()) or (after and after.isalpha() and not after.isupper()):
            return False
    if kl in ("tokens", "max_tokens", "token_count", "input_tokens", "output_tokens", "total_tokens"):
        return False
    return True


class Scrubber:
    """Redacts credentials from text and JSON-like data.  ``Scrubber()`` knows
    only the static formats; ``add_values`` teaches it runtime secrets.
    ``engine`` (tests) swaps the detector table."""

    def __init__(self, *, min_dynamic_length: int = 6, engine: Engine | None = None):
        self.min_dynamic_length = int(min_dynamic_length)
        self._engine = engine
        self._lock = threading.Lock()
        self._dyn = _Dyn(frozenset(), self.min_dynamic_length)

    # -- dynamic values ------------------------------------------------------
    def _rebuild(self, values: frozenset) -> None:
        # build outside of readers' view, then swap the reference (atomic)
        self._dyn = _Dyn(values, self.min_dynamic_length)

    def add_values(self, values: Iterable[str]) -> None:
        if isinstance(values, str):
            values = [values]
        new = {str(v) for v in values if v is not None and len(str(v)) >= self.min_dynamic_length}
        with self._lock:
            cur = self._dyn.values
            if new <= cur:
                return
            self._rebuild(cur | new)

    def remove_values(self, values: Iterable[str]) -> None:
        if isinstance(values, str):
            values = [values]
        rm = {str(v) for v in values if v is not None}
        with self._lock:
            cur = self._dyn.values
            if not (rm & cur):
                return
            self._rebuild(cur - rm)

    def clear_values(self) -> None:
        with self._lock:
            self._rebuild(frozenset())

    # -- text ----------------------------------------------------------------
    def scrub(self, text: str) -> tuple[str, int]:
        if not isinstance(text, str):
            text = str(text)
        if not text:
            return text, 0
        dyn = self._dyn  # snapshot (copy-on-write)
        spans = _scan(text, dyn, default_engine() if self._engine is None else self._engine)
        if not spans:
            return text, 0
        spans.sort()
        out = []
        pos = 0
        count = 0
        cur_s, cur_e = spans[0]
        for s, e in spans[1:]:
            if s < cur_e:  # overlapping -> merge
                if e > cur_e:
                    cur_e = e
                continue
            out.append(text[pos:cur_s])
            out.append(REDACTED)
            count += 1
            pos = cur_e
            cur_s, cur_e = s, e
        out.append(text[pos:cur_s])
        out.append(REDACTED)
        count += 1
        out.append(text[cur_e:])
        return "".join(out), count

    def scrub_text(self, text: str) -> str:
        return self.scrub(text)[0]

    # -- structured data -----------------------------------------------------
    def scrub_data(self, obj: Any) -> tuple[Any, int]:
        counter = [0]
        result = self._scrub_obj(obj, counter, 0)
        return result, counter[0]

    def _scrub_obj(self, obj: Any, counter: list, depth: int) -> Any:
        if depth > 100:
            return obj
        if isinstance(obj, str):
            s, n = self.scrub(obj)
            counter[0] += n
            return s
        if isinstance(obj, dict):
            out = {}
            for k, v in obj.items():
                if isinstance(k, str) and _data_key_sensitive(k) and _sensitive_scalar(v):
                    out[k] = REDACTED
                    counter[0] += 1
                else:
                    out[k] = self._scrub_obj(v, counter, depth + 1)
            return out
        if isinstance(obj, list):
            return [self._scrub_obj(v, counter, depth + 1) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self._scrub_obj(v, counter, depth + 1) for v in obj)
        return obj


def _sensitive_scalar(v: Any) -> bool:
    if isinstance(v, bool) or v is None:
        return False
    if isinstance(v, (int, float)):
        return True
    if isinstance(v, str):
        s = v.strip()
        if not s or s == REDACTED:
            return False
        return True
    return False


# ---------------------------------------------------------------------------
