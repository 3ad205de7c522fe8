"""Known secret values in their common transformations (docs/scrubbing.md, "Known values and their transformations").

A process that holds a secret (a credentialed binary's env) can print it reversed, base64- or hex-encoded, one
character per line, in an ``od``/``xxd`` dump, or in pieces.  Matching each spelling is hopeless; instead both sides
are reduced to a *skeleton*: letters and digits only, lower case (non-ASCII letters folded to the ASCII letter they
stand for where Unicode or a look-alike says so; everything else is a separator).  ``s e c r e t``, ``S-E-C-R-E-T``,
``s\\ne\\nc…`` and ``secret`` share the skeleton ``secret``.  Each value's *forms* (the value, reversed, ROT13,
URL-encoded, base64 and base32 at every byte offset, hex in several layouts, decimal, octal, bits) are reduced the
same way, cut into overlapping fragments, and looked for in the output's skeleton with one Hyperscan literal pass; a
hit is mapped back to the output and that span (separators included) is redacted.

Fragments make pieces count: a dump that breaks the value into lines with offsets between them (``od -c``, ``xxd``,
``base64 -w``) still shows runs of it longer than a fragment.  Shorter pieces separated by letters or digits are not
found (``xxd -c1``, every character followed by a letter): a program that can do that is a program that can start
other programs or print its environment, which is why such binaries need the operator's acknowledgement.

Costs: a 1 MB output with no hit costs three C passes (projection, skeleton, Hyperscan); hits are mapped back block
by block, so even an output made only of hits costs one pass of Python over each block that has one.  The fragment
database is built once per set of values (an LRU cache) and has at most ``MAX_LITERALS`` literals.
"""
from __future__ import annotations

import base64
import bisect
import codecs
import hashlib
import json
import re
import threading
import unicodedata
import urllib.parse
from collections import OrderedDict
from collections.abc import Iterable

import hyperscan

from .engine import Hs

REDACTED = "[REDACTED]"

# A value is looked for in its transformations only when its skeleton has at least this many letters and digits:
# below that, its reversed or split spellings occur by chance in ordinary output (a 6-character skeleton is
# 36^6 ≈ 2e9 possibilities, and 1 MB of text has about 1e6 positions per form and ~40 forms), and a character per line
# of a short word is ordinary text.  Shorter values are still redacted verbatim, whatever their length.
MIN_SKELETON_CHARS = 8
# Fragment lengths and strides per kind of form: a run of at least `length + stride - 1` skeleton characters shared
# with a form is always found (it contains a fragment that starts at a multiple of the stride).  Lengths are chosen
# so a chance match on random output is negligible (about 2^48 or more possibilities each: 10 letters/digits, 12
# base64 characters, 16 hex digits, 18 decimal digits, 48 bits).
KINDS: dict[str, tuple[int, int]] = {  # kind: (fragment length, stride)
    "text": (10, 2), "base64": (12, 3), "hex": (16, 4), "digits": (18, 4), "bits": (48, 8),
}
MAX_HITS = 50_000  # fragment hits per output; past this the rest of the output is redacted (see spans)
MAX_LITERALS = 8000  # per set of values: strides grow beyond this (longer runs needed), so building stays ~0.2 s
_BLOCK = 4096
_CACHE_SIZE = 32

# Look-alike letters Unicode does not fold (NFKC leaves them): Cyrillic and Greek capitals and small letters that
# read as Latin ones.  Data, deliberately short: the common substitutions, not Unicode's whole confusables list.
CONFUSABLES = {
    "а": "a", "в": "b", "е": "e", "ё": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p", "с": "c", "т": "t",
    "у": "y", "х": "x", "і": "i", "ї": "i", "ј": "j", "ѕ": "s", "ԁ": "d", "ԛ": "q", "ԝ": "w", "ɡ": "g", "һ": "h",
    "ո": "n", "ս": "u", "α": "a", "β": "b", "ε": "e", "ζ": "z", "η": "n", "ι": "i", "κ": "k", "μ": "u", "ν": "v",
    "ο": "o", "ρ": "p", "τ": "t", "υ": "u", "χ": "x", "ω": "w", "ϲ": "c", "ϳ": "j",
}
_ASCII_ALNUM = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789")
# bytes.translate: upper -> lower; everything but [a-z0-9] deleted
_LOWER = bytes(range(256)).translate(bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz"))
_NOT_ALNUM = bytes(b for b in range(256) if b not in _ASCII_ALNUM and not (65 <= b <= 90))
_ALNUM_RE = re.compile(rb"[A-Za-z0-9]")


def _fold_char(ch: str) -> str:
    """The ASCII letter or digit a non-ASCII character stands for, else "?" (a separator)."""
    low = ch.lower()
    if low in CONFUSABLES:
        return CONFUSABLES[low]
    folded = unicodedata.normalize("NFKC", ch)
    if len(folded) == 1 and folded.isascii() and folded.isalnum():
        return folded
    stripped = unicodedata.normalize("NFKD", folded)[:1]  # é -> e, ñ -> n
    if stripped.isascii() and stripped.isalnum() and unicodedata.category(ch).startswith("L"):
        return stripped
    return "?"


def project(text: str) -> bytes:
    """One byte per character (so offsets are ``str`` offsets), non-ASCII characters folded by ``_fold_char``."""
    if text.isascii():
        return text.encode("ascii")
    table = {ord(ch): _fold_char(ch) for ch in set(text) if ord(ch) > 127}
    return text.translate(table).encode("ascii", "replace")


def skeleton(text: str) -> bytes:
    """Letters and digits only, lower case: the form every spelling of a value is compared in."""
    return project(text).translate(_LOWER, _NOT_ALNUM)


# --- the forms of a value ------------------------------------------------------------------------------------------
def _b64_cores(payload: bytes) -> list[str]:
    """The base64 characters that depend only on `payload`, for each of the 3 byte offsets it can have inside a
    longer encoded text (so a base64 of "TOKEN=<value>\\n…" still shows one of them)."""
    out = []
    for k in range(3):
        enc = base64.b64encode(b"\0" * k + payload + b"\0\0").decode()
        first, last = -(-8 * k // 6), (8 * (k + len(payload))) // 6
        out.append(enc[first:last])
    return out


def _b32_cores(payload: bytes) -> list[str]:
    out = []
    for k in range(5):
        enc = base64.b32encode(b"\0" * k + payload + b"\0" * 4).decode()
        first, last = -(-8 * k // 5), (8 * (k + len(payload))) // 5
        out.append(enc[first:last])
    return out


def _octal_words(payload: bytes) -> list[str]:
    """`od`'s default: 16-bit little-endian words in 6 octal digits, for both alignments of the value."""
    out = []
    for k in range(2):
        data = b"\0" * k + payload
        words = [data[i] | (data[i + 1] << 8) for i in range(0, len(data) - 1, 2)]
        text = "".join(f"{w:06o}" for w in words)
        out.append(text[6:] if k else text)  # the first word of the shifted layout holds a byte not in the value
    return out


def value_forms(value: str) -> list[tuple[str, str]]:
    """(kind, text) of every spelling looked for: the value and its common transformations."""
    raw = value.encode("utf-8")
    rev = value[::-1].encode("utf-8")
    rot = codecs.encode(value, "rot13")
    forms: list[tuple[str, str]] = [("text", value), ("text", value[::-1]), ("text", rot), ("text", rot[::-1]),
                                    ("text", urllib.parse.quote(value, safe="")), ("text", urllib.parse.quote_plus(value))]
    for payload in (raw, rev):
        for core in _b64_cores(payload):
            forms += [("base64", core), ("base64", core[::-1])]
        forms += [("base64", core) for core in _b32_cores(payload)]
        hexed = payload.hex()
        forms += [("hex", hexed), ("hex", hexed[::-1]),
                  ("hex", "".join(f"x{b:02x}" for b in payload)),       # \x67\x68…, printf '\\x%02x'
                  ("digits", "".join(str(b) for b in payload))]          # 103 104 …, [ord(c) for c in s]
        for k in range(2):  # od -x / hexdump: 16-bit little-endian words
            data = payload[k:]
            forms.append(("hex", "".join(f"{data[i + 1]:02x}{data[i]:02x}" for i in range(0, len(data) - 1, 2))))
    forms += [("hex", "".join(f"0x{b:02x}" for b in raw)),
              ("hex", "".join(f"u{ord(ch):04x}" for ch in value)),         # \u0067…
              ("digits", "".join(f"{b:03o}" for b in raw)),                # od -b, printf '%03o'
              ("bits", "".join(f"{b:08b}" for b in raw))]                  # xxd -b
    forms += [("digits", text) for text in _octal_words(raw)]
    return forms


# --- the matcher ---------------------------------------------------------------------------------------------------
class KnownValues:
    """The compiled matcher for one set of values: fragments of their forms' skeletons (Hyperscan literals) and
    their verbatim spellings (the value and its JSON-escaped forms, redacted whatever their length)."""

    __slots__ = ("verbatim", "_hs", "_lengths")

    def __init__(self, values: Iterable[str]):
        values = sorted({v for v in values if isinstance(v, str) and v})
        self.verbatim = sorted({form for v in values for form in _verbatim(v) if form}, key=len, reverse=True)
        candidates: list[tuple[bytes, int, int]] = []  # (skeleton of a form, fragment length, stride)
        for value in values:
            if len(skeleton(value)) < MIN_SKELETON_CHARS:
                continue
            for kind, text in value_forms(value):
                skel = skeleton(text)
                length, stride = KINDS[kind]
                if len(skel) >= min(length, MIN_SKELETON_CHARS if kind in ("text", "base64") else length):
                    candidates.append((skel, length, stride))
        literals = _fragments(candidates, scale=1)
        scale = 1
        while len(literals) > MAX_LITERALS and scale < 64:  # whole short forms cannot shrink: stop somewhere
            scale *= 2
            literals = _fragments(candidates, scale=scale)
        ordered = sorted(literals)
        self._lengths = [len(lit) for lit in ordered]
        self._hs = Hs(ordered, literal=True) if ordered else None

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Spans of `text` holding a transformed value (merged, sorted)."""
        if self._hs is None or not text:
            return []
        data = project(text)
        skel = data.translate(_LOWER, _NOT_ALNUM)
        if not skel:
            return []
        hits: list[tuple[int, int]] = []
        try:
            self._hs.scan(skel, _on_hit, (hits, self._lengths))
        except hyperscan.ScanTerminated:
            # An output made of the value over and over: everything from the last hit on goes (fail closed), so
            # the cost stays bounded by MAX_HITS callbacks.
            hits.append((hits[-1][0], len(skel)))
        if not hits:
            return []
        return _to_text_spans(data, _merged(hits))

    def scrub(self, text: str) -> tuple[str, int]:
        """`text` with every transformed and verbatim occurrence replaced by [REDACTED], and how many."""
        spans = self.spans(text)
        count = len(spans)
        if spans:
            parts, pos = [], 0
            for start, end in spans:
                parts += [text[pos:start], REDACTED]
                pos = end
            parts.append(text[pos:])
            text = "".join(parts)
        if self.verbatim:
            pieces = text.split(REDACTED)  # never cut into a marker already there
            for i, piece in enumerate(pieces):
                for form in self.verbatim:
                    if form in piece:
                        count += piece.count(form)
                        piece = piece.replace(form, REDACTED)
                pieces[i] = piece
            text = REDACTED.join(pieces)
        return text, count


def _on_hit(eid: int, start: int, end: int, flags: int, ctx: tuple) -> bool:
    hits, lengths = ctx
    hits.append((end - lengths[eid], end))
    return len(hits) >= MAX_HITS  # True stops the scan


def _verbatim(value: str) -> tuple[str, ...]:
    """The value as printed, and as a JSON string shows it (a program may print it inside JSON)."""
    return value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]


def _fragments(candidates: list[tuple[bytes, int, int]], *, scale: int) -> set[bytes]:
    """Every form's fragments: the whole skeleton when it is shorter than a fragment, else fragments starting at
    every `stride * scale` characters plus the last one (so the end is covered)."""
    out: set[bytes] = set()
    for skel, length, stride in candidates:
        if len(skel) <= length:
            out.add(skel)
            continue
        step = stride * scale
        last = len(skel) - length
        out.update(skel[i:i + length] for i in range(0, last, step))
        out.add(skel[last:])
    return out


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    spans.sort()
    out = [list(spans[0])]
    for start, end in spans[1:]:
        if start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def _to_text_spans(data: bytes, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Skeleton spans back to text spans: from the first letter or digit of a hit to its last one. Blocks of the
    text are counted (C speed); only blocks that hold a hit's end are walked character by character."""
    counts = [0]
    for lo in range(0, len(data), _BLOCK):
        counts.append(counts[-1] + len(data[lo:lo + _BLOCK].translate(None, _NOT_ALNUM)))
    positions: dict[int, list[int]] = {}

    def at(k: int) -> int:  # text offset of the k-th letter or digit
        block = bisect.bisect_right(counts, k) - 1
        found = positions.get(block)
        if found is None:
            lo = block * _BLOCK
            found = positions[block] = [m.start() for m in _ALNUM_RE.finditer(data, lo, lo + _BLOCK)]
        return found[k - counts[block]]

    out = []
    for start, end in spans:
        s, e = at(start), at(end - 1) + 1
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


_cache: OrderedDict[bytes, KnownValues] = OrderedDict()
_cache_lock = threading.Lock()


def known_values(values: Iterable[str]) -> KnownValues:
    """The matcher for these values, built once per set (an LRU keyed by a digest, not by the values)."""
    values = sorted({v for v in values if isinstance(v, str) and v})
    key = hashlib.sha256(b"\0".join(v.encode("utf-8", "surrogatepass") for v in values)).digest()
    with _cache_lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    built = KnownValues(values)
    with _cache_lock:
        _cache[key] = built
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return built


def scrub_known_values(text: str, values: Iterable[str]) -> tuple[str, int]:
    """`text` without `values`, verbatim (any length) or transformed (skeleton of 8+ letters and digits)."""
    return known_values(values).scrub(text)
