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

Fragments start every few characters; each run of hits is then extended to the whole stretch it shares with its
form, so a piece goes whole, not up to the last fragment boundary.

Costs: a 1 MB output with no hit costs three C passes (projection, skeleton, Hyperscan: ~2-5 ms); hits are mapped back
block by block, and past ``MAX_HITS`` fragment hits the scan stops and the rest of the output is redacted (fail
closed), so an output made only of the value costs ~85 ms per MB at most.  The fragment database is built once per set
of values (an LRU cache) and has at most ``MAX_LITERALS`` literals.
"""
from __future__ import annotations

import base64
import bisect
import codecs
import functools
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
# with a form is always found (it contains a fragment that starts at a multiple of the stride): 12 letters or digits
# of the value, 15 base64 characters, 21 hex digits, 23 decimal or octal digits, 59 bits. Lengths are chosen so a
# chance match on random output is negligible (about 2^48 possibilities or more each); strides keep the database
# small (a 40-character value has ~350 fragments; building takes ~15 ms a value, once).
KINDS: dict[str, tuple[int, int]] = {  # kind: (fragment length, stride)
    "text": (10, 3), "base64": (12, 4), "hex": (16, 6), "digits": (18, 6), "bits": (48, 12),
}
MAX_HITS = 50_000  # fragment hits per output; past this the rest of the output is redacted (see spans)
MAX_LITERALS = 4000  # per set of values: strides grow beyond this (longer runs needed), so building stays ~0.2 s
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


_LUT_LOCK = threading.Lock()


@functools.cache
def _lut():
    """code point -> the byte it projects to, and which code points are filled in: filled lazily for the non-ASCII
    characters met (numpy: one C pass a text). Built on the first non-ASCII text (numpy imports in ~0.3 s)."""
    import numpy

    lut, known = numpy.full(0x110000, ord("?"), dtype=numpy.uint8), numpy.zeros(0x110000, dtype=bool)
    lut[:128], known[:128] = numpy.arange(128, dtype=numpy.uint8), True
    return numpy, lut, known


def project(text: str) -> bytes:
    """One byte per character (so offsets are ``str`` offsets), non-ASCII characters folded by ``_fold_char``."""
    if text.isascii():
        return text.encode("ascii")
    numpy, lut, known = _lut()  # two first callers may each build one: both are correct, one is kept
    points = numpy.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=numpy.uint32)
    new = numpy.unique(points[~known[points]])
    if new.size:
        with _LUT_LOCK:
            for cp in new.tolist():
                lut[cp] = ord(_fold_char(chr(cp))) if not 0xD800 <= cp <= 0xDFFF else ord("?")
                known[cp] = True
    return lut[points].tobytes()


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
    """(kind, text) of every spelling looked for: the value and its common transformations. The reversed value gets
    the encodings a program applies to what it reads (base64, hex, decimal); the layouts of dump programs are for the
    value as stored."""
    raw = value.encode("utf-8")
    rev = value[::-1].encode("utf-8")
    forms: list[tuple[str, str]] = [("text", value), ("text", value[::-1]), ("text", codecs.encode(value, "rot13")),
                                    ("text", urllib.parse.quote(value, safe="")),
                                    ("text", urllib.parse.quote_plus(value))]
    for core in _b64_cores(raw):
        forms += [("base64", core), ("base64", core[::-1])]
    forms += [("base64", core) for core in _b64_cores(rev)]
    forms += [("base64", core) for core in _b32_cores(raw)]
    forms += [("hex", raw.hex()), ("hex", raw.hex()[::-1]), ("hex", rev.hex()),
              ("hex", "".join(f"x{b:02x}" for b in raw)),       # \x67\x68…, printf '\\x%02x'
              ("hex", "".join(f"0x{b:02x}" for b in raw)),      # 0x67, 0x68, …
              ("hex", "".join(f"u{ord(ch):04x}" for ch in value)),  # \u0067…
              ("digits", "".join(str(b) for b in raw)),         # 103 104 …, [ord(c) for c in s]
              ("digits", "".join(str(b) for b in rev)),
              ("digits", "".join(f"{b:03o}" for b in raw)),     # od -b, printf '%03o'
              ("bits", "".join(f"{b:08b}" for b in raw))]       # xxd -b
    for k in range(2):  # od -x / hexdump: 16-bit little-endian words, both alignments
        data = raw[k:]
        forms.append(("hex", "".join(f"{data[i + 1]:02x}{data[i]:02x}" for i in range(0, len(data) - 1, 2))))
    forms += [("digits", text) for text in _octal_words(raw)]
    return forms


# --- the matcher ---------------------------------------------------------------------------------------------------
class KnownValues:
    """The compiled matcher for one set of values: fragments of their forms' skeletons (Hyperscan literals) and
    their verbatim spellings (the value and its JSON-escaped forms, redacted whatever their length)."""

    __slots__ = ("verbatim", "_hs", "_lengths", "_origins", "_forms")

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
        scale = 1
        literals = _fragments(candidates, scale=scale)
        while len(literals) > MAX_LITERALS and scale < 64:  # whole short forms cannot shrink: stop somewhere
            scale *= 2
            literals = _fragments(candidates, scale=scale)
        ordered = sorted(literals)
        self._forms = [skel for skel, _, _ in candidates]
        self._lengths = [len(lit) for lit in ordered]
        self._origins = [literals[lit] for lit in ordered]  # (form index, offset): where a fragment comes from
        self._hs = Hs(ordered, literal=True) if ordered else None

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Spans of `text` holding a transformed value (merged, sorted)."""
        if self._hs is None or not text:
            return []
        data = project(text)
        skel = data.translate(_LOWER, _NOT_ALNUM)
        if not skel:
            return []
        hits: list[tuple[int, int, int]] = []
        truncated = False
        try:
            self._hs.scan(skel, _on_hit, (hits, self._lengths))
        except hyperscan.ScanTerminated:
            truncated = True
        if not hits:
            return []
        runs = self._runs(skel, hits)
        if truncated:
            # An output made of the value over and over: everything from the last hit on goes (fail closed), so
            # the cost stays bounded by MAX_HITS callbacks.
            runs.append((max(s for s, _, _ in hits), len(skel)))
            runs = _merged(runs)
        return _to_text_spans(data, runs)

    def _runs(self, skel: bytes, hits: list[tuple[int, int, int]]) -> list[tuple[int, int]]:
        """Overlapping fragment hits merged, each run then extended to the whole stretch it shares with the form its
        first (and last) fragment came from: fragments start every few characters, the run's edges may not."""
        hits.sort()
        runs: list[tuple[int, int]] = []
        start, end, first, last = hits[0][0], hits[0][1], hits[0][2], hits[0][2]
        for s, e, eid in hits[1:]:
            if s <= end:
                if e > end:
                    end, last = e, eid
                continue
            runs.append(self._extended(skel, start, end, first, last))
            start, end, first, last = s, e, eid, eid
        runs.append(self._extended(skel, start, end, first, last))
        return _merged(runs)

    def _extended(self, skel: bytes, start: int, end: int, first: int, last: int) -> tuple[int, int]:
        form_index, offset = self._origins[first]
        form = self._forms[form_index]
        while start > 0 and offset > 0 and skel[start - 1] == form[offset - 1]:
            start -= 1
            offset -= 1
        form_index, offset = self._origins[last]
        form = self._forms[form_index]
        offset += self._lengths[last]
        while end < len(skel) and offset < len(form) and skel[end] == form[offset]:
            end += 1
            offset += 1
        return start, end

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
    hits.append((end - lengths[eid], end, eid))
    return len(hits) >= MAX_HITS  # True stops the scan


def _verbatim(value: str) -> tuple[str, ...]:
    """The value as printed, and as a JSON string shows it (a program may print it inside JSON)."""
    return value, json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]


def _fragments(candidates: list[tuple[bytes, int, int]], *, scale: int) -> dict[bytes, tuple[int, int]]:
    """Every form's fragments, each with where it first comes from (form index, offset): the whole skeleton when
    it is shorter than a fragment, else fragments starting at every `stride * scale` characters plus the last one
    (so the end is covered)."""
    out: dict[bytes, tuple[int, int]] = {}
    for index, (skel, length, stride) in enumerate(candidates):
        if len(skel) <= length:
            out.setdefault(skel, (index, 0))
            continue
        step = stride * scale
        last = len(skel) - length
        for i in [*range(0, last, step), last]:
            out.setdefault(skel[i:i + length], (index, i))
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
