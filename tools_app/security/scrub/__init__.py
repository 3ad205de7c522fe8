"""Credential scrubber for tool output and audit-logged tool arguments.

Public API::

    REDACTED = "[REDACTED]"
    scrubber = Scrubber(min_dynamic_length=6)
    scrubber.add_values([...])          # decrypted secrets injected at runtime
    text, n = scrubber.scrub(text)
    data, n = scrubber.scrub_data(obj)  # deep scrub of JSON-like data
    default_scrubber / scrub(text)

Layout (docs/scrubbing.md): ``records`` (the Detector record), ``detectors``
(the table), ``strategies`` (what a match redacts), ``checks`` (value
validators), ``engine`` (Hyperscan prefilter + ``re`` verification),
``dynamic`` (runtime values), ``scrubber`` (the Scrubber).
"""
from __future__ import annotations

from typing import Any

from .scrubber import REDACTED, Scrubber

__all__ = ["REDACTED", "Scrubber", "default_scrubber", "scrub", "scrub_text", "scrub_data"]

default_scrubber = Scrubber()


def scrub(text: str) -> tuple[str, int]:
    return default_scrubber.scrub(text)


def scrub_text(text: str) -> str:
    return default_scrubber.scrub(text)[0]


def scrub_data(obj: Any) -> tuple[Any, int]:
    return default_scrubber.scrub_data(obj)
