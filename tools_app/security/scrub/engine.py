"""The generic scan engine: Hyperscan prefilter + exact ``re`` verification.

One Hyperscan pass over the text finds every position where some detector
*could* match (its prefilter expressions, compiled into one database; it
scans at GB/s in C, so text with no candidates costs only that pass).  Each
tier's patterns are one ``re`` alternation, matched only at that tier's
candidate positions but against the whole text, so look-behinds and
look-aheads see exactly what they would see scanning every position.

Hyperscan scans bytes: the text is projected to one byte per character
(non-ASCII -> ``?``, except characters that case-fold to an ASCII letter),
so offsets are character offsets.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

import hyperscan

from .records import Detector, Keyword, Prefilter


class Hs:
    """A compiled Hyperscan database plus a pool of scratch spaces.

    ``hs_scan`` releases the GIL, so concurrent scans need one scratch each;
    ``list.pop``/``append`` are atomic, so the pool needs no lock.
    """

    __slots__ = ("db", "_pool")

    def __init__(self, exprs: list[bytes], flags: list[int] | int = 0, literal: bool = False):
        self.db = hyperscan.Database()
        self.db.compile(expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs),
                        flags=flags, literal=literal)
        self._pool: list = []

    def scan(self, data: bytes, on_hit=None, ctx=None) -> list[tuple[int, int, int]]:
        """All (expression id, start, end) hits, or, with ``on_hit``, call
        ``on_hit(id, start, end, flags, ctx)`` for each and return []."""
        hits: list = []
        try:
            scratch = self._pool.pop()
        except IndexError:
            scratch = hyperscan.Scratch(self.db)
        try:
            # positional arguments: keyword parsing costs ~0.7 us per call
            if on_hit is None:
                self.db.scan(data, _collect, 0, hits, scratch)
            else:
                self.db.scan(data, on_hit, 0, ctx, scratch)
        finally:
            self._pool.append(scratch)
        return hits


def _collect(eid: int, start: int, end: int, flags: int, hits: list) -> None:
    hits.append((eid, start, end))







_FOLDS = (("\u0130", ord("i")), ("\u0131", ord("i")), ("\u017f", ord("s")), ("\u212a", ord("k")))


def project(text: str) -> bytes:
    """One byte per character, so Hyperscan offsets are ``str`` offsets."""
    if text.isascii():
        return text.encode("ascii")
    data = bytearray(text.encode("ascii", "replace"))
    for ch, b in _FOLDS:
        i = text.find(ch)
        while i >= 0:
            data[i] = b
            i = text.find(ch, i + 1)
    return bytes(data)



class Engine:
    """Compiled form of an ordered detector table.

    Tiers 1 and 2 (the pre-P7 formats) keep their original semantics: at a
    candidate position each tier's alternation reports its first matching
    detector (table order), and tier 2 is tried only where tier 1 did not
    match, so the differential test can prove nothing changed.  A tier-3
    detector is tried on its own at its own candidates: it can only add
    redactions, and neither shadows nor is shadowed by another detector.
    """

    def __init__(self, detectors: Sequence[Detector]):
        names = [d.name for d in detectors]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"duplicate detector names: {sorted(dup)}")
        self.detectors = tuple(detectors)
        self.by_name = {d.name: d for d in detectors}
        # tiers 1 and 2: one alternation each (first match wins); tier 3:
        # one pattern per detector, each tried only at its own candidates
        self.tier_re: dict[int, re.Pattern] = {}
        for tier in (1, 2):
            alts = [d for d in detectors if d.tier == tier]
            if alts:
                self.tier_re[tier] = re.compile("|".join(f"(?P<{d.name}>{d.pattern})" for d in alts))
        self.own_re: dict[str, re.Pattern] = {
            d.name: re.compile(f"(?P<{d.name}>{d.pattern})") for d in detectors if d.tier >= 3
        }
        exprs: list[bytes] = []
        flags: list[int] = []
        table: list[tuple] = []
        for d in detectors:
            # candidates are grouped by tier (1, 2) or by detector (tier 3)
            key = d.tier if d.tier < 3 else d.name
            for pf in d.prefilter:
                if isinstance(pf, Prefilter):
                    exprs.append(pf.expr.encode())
                    flags.append(0)
                    table.append((key, pf.end_offsets(), None, 0))
                elif isinstance(pf, Keyword):
                    if pf.lead and pf.window is None:
                        raise ValueError(f"{d.name}: a keyword lead needs a window")
                    if not pf.keyword_in_expr and pf.window is None:
                        raise ValueError(f"{d.name}: a keyword left out of the expression needs a window")
                    exprs.append((pf.lead + (pf.keyword if pf.keyword_in_expr else "") + pf.tail).encode())
                    flags.append(hyperscan.HS_FLAG_SOM_LEFTMOST if pf.window is None else 0)
                    if pf.starts and pf.window is None:
                        raise ValueError(f"{d.name}: keyword literals need a window")
                    table.append((key, pf.window, tuple(x.encode() for x in pf.starts) or re.compile(pf.keyword),
                                  pf.at))
                else:
                    raise TypeError(f"{d.name}: unknown prefilter {pf!r}")
        self._table = table
        try:
            self._hs = Hs(exprs, flags)
        except hyperscan.error as exc:
            raise ValueError(f"prefilter does not compile: {_culprits(detectors, exc)}") from exc

    def candidates(self, text: str, data: bytes) -> dict:
        """Candidate positions per tier (1, 2) and per tier-3 detector name
        (supersets; may contain negative positions)."""
        found: dict = {1: set(), 2: set()}
        self._hs.scan(data, _on_hit, (found, text, data, self._table))
        return found

    def match_at(self, text: str, s: int) -> list[re.Match]:
        """What trying every detector at ``s`` yields (the slow reference
        path used by the tests: no prefilter)."""
        out = []
        t1, t2 = self.tier_re.get(1), self.tier_re.get(2)
        m = t1.match(text, s) if t1 is not None else None
        if m is None and t2 is not None:
            m = t2.match(text, s)
        if m is not None:
            out.append(m)
        for rx in self.own_re.values():
            m = rx.match(text, s)
            if m is not None:
                out.append(m)
        return out

    def handle(self, text: str, m: re.Match, s: int, out: list) -> None:
        d = self.by_name[m.lastgroup]
        d.redact(text, m, d, s, out)

    def spans(self, text: str, data: bytes, out: list) -> None:
        """Append the spans every detector redacts in ``text``."""
        found = self.candidates(text, data)
        c1 = found[1]
        c2 = found[2]
        if not c1 and not c2 and len(found) == 2:
            return  # no candidate at all (most short strings)
        m1 = self.tier_re[1].match if 1 in self.tier_re else None
        m2 = self.tier_re[2].match if 2 in self.tier_re else None
        by_name = self.by_name
        for s in sorted(c1 | c2) if c2 else sorted(c1):
            if s < 0:
                continue
            # tier 1 first; tier 2 only where its own prefilter hit
            m = m1(text, s) if m1 is not None else None
            if m is None and m2 is not None and s in c2:
                m = m2(text, s)
            if m is not None:
                d = by_name[m.lastgroup]
                d.redact(text, m, d, s, out)
        for key, cands in found.items():
            if key in (1, 2):
                continue
            d = by_name[key]
            match = self.own_re[key].match
            for s in cands:
                if s >= 0:
                    m = match(text, s)
                    if m is not None:
                        d.redact(text, m, d, s, out)


def _on_hit(eid: int, start: int, end: int, flags: int, ctx: tuple) -> None:
    """Hyperscan callback: turn one hit into candidate positions."""
    found, text, data, table = ctx
    key, offsets, kw, at = table[eid]
    cands = found.get(key)
    if cands is None:
        cands = found[key] = set()
    if kw is None:  # fixed offsets from the hit's end
        for d in offsets:
            cands.add(end - d)
    elif type(kw) is tuple:  # windowed keyword given as literals; offsets is the window
        lo = max(0, end - offsets)
        window = data[lo:end].lower()
        for lit in kw:
            i = window.find(lit)
            while i >= 0:
                cands.add(lo + i + at)
                i = window.find(lit, i + 1)
    else:  # keyword regex; offsets: None (start of match tracked) or the window
        for m in kw.finditer(text, start if offsets is None else max(0, end - offsets), end):
            cands.add(m.start() + at)


def _culprits(detectors: Sequence[Detector], exc: Exception) -> str:
    """Name the detectors whose prefilter expressions fail on their own."""
    bad = []
    for d in detectors:
        for pf in d.prefilter:
            expr = pf.expr if isinstance(pf, Prefilter) else pf.lead + (pf.keyword if pf.keyword_in_expr else "") + pf.tail
            flag = hyperscan.HS_FLAG_SOM_LEFTMOST if isinstance(pf, Keyword) and pf.window is None else 0
            try:
                Hs([expr.encode()], [flag])
            except hyperscan.error as e:
                bad.append(f"{d.name}: {expr!r} ({e})")
    return "; ".join(bad) or str(exc)
