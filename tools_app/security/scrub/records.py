"""The detector record: everything about one credential format in one place.

A detector is found in two steps.  Its ``prefilter`` expressions (Hyperscan,
run once over the whole text) are NECESSARY conditions that propose
candidate positions; its ``pattern`` (Python ``re``) is then matched at those
positions only, and its ``redact`` strategy validates the match and says
which span goes.  The engine (engine.py) is generic over this record.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

# the candidate position handed to a pattern is where its ``pattern`` starts
# matching; a strategy appends (start, end) spans to redact to ``out``
Redact = Callable[[str, "re.Match[str]", "Detector", int, list], None]


@dataclass(frozen=True)
class Prefilter:
    """A Hyperscan expression that must match wherever the detector matches.

    ``start`` is where the detector's pattern starts, counted from the start
    of a hit (negative: that many characters before it, when the expression
    only covers the pattern's rarer middle); the expression must then have a
    bounded width (the engine turns
    it into offsets from the hit's end, which is what Hyperscan reports
    cheaply).  For an unbounded expression give ``from_end`` instead: the
    pattern starts that many characters before the hit's end.
    """

    expr: str
    start: int = 0
    from_end: int | None = None

    def end_offsets(self) -> tuple[int, ...]:
        if self.from_end is not None:
            return (self.from_end,)
        lo, hi = _width(self.expr)
        if hi - lo > 64:
            raise ValueError(f"prefilter {self.expr!r}: unbounded width, give from_end")
        return tuple(w - self.start for w in range(lo, hi + 1))


@dataclass(frozen=True)
class Keyword:
    """A keyword followed by a variable tail (``token = …``): every occurrence
    of ``keyword`` inside a hit of ``keyword + tail`` is a candidate, ``at``
    characters after the keyword's start."""

    keyword: str
    tail: str
    at: int = 0
    # when set, no start-of-match tracking (much cheaper for Hyperscan): the
    # candidates are the keyword occurrences in the ``window`` characters
    # before the hit's end, so keyword + tail must be at most that long
    window: int | None = None
    # a necessary context just before the keyword (windowed keywords only)
    lead: str = ""
    # windowed keywords: lowercase literals that every keyword match starts
    # with; the engine then finds them with bytes.find instead of ``re``
    # (several times faster on the window)
    starts: tuple[str, ...] = ()
    # windowed keywords: leave the keyword out of the Hyperscan expression
    # (lead + tail only) when the tail holds the rarer literal; the keyword is
    # then only looked for in the window
    keyword_in_expr: bool = True


@dataclass(frozen=True)
class Detector:
    """One credential format.

    name        unique identifier (also the regex group name)
    group       catalogue section in docs/scrubbing.md
    pattern     regex matched at candidate positions; it may start inside
                the credential context (after a look-behind), ``back``
                characters after the context's start
    prefilter   necessary conditions (Prefilter / Keyword records)
    redact      strategy: validates the match and appends the span(s)
    check       optional validator of the matched token (plain tokens)
    tier        1 and 2: the pre-P7 formats (tier 2 is tried at a position
                only where tier 1 did not match); 3: the P7 additions, tried
                on their own so they can only add redactions
    """

    name: str
    group: str
    pattern: str
    prefilter: tuple = ()
    redact: Redact | None = None
    check: Callable[[str, int, int], bool] | None = None
    tier: int = 2
    back: int = 0
    description: str = ""
    options: dict = field(default_factory=dict, compare=False, hash=False)


def _width(expr: str) -> tuple[int, int]:
    """(min, max) characters matched by ``expr`` (max capped)."""
    import re._parser as sre_parse  # CPython's own regex parser

    lo, hi = sre_parse.parse(expr).getwidth()
    return lo, min(hi, 1 << 20)
