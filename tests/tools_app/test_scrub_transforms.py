"""Known values in their common transformations (tools_app/security/scrub/transforms.py): what a credentialed
binary's process can print of its own credentials — reversed, base64, hex, split by separators, dumped by od —
is redacted; ordinary output is left alone. Pure Python plus real `od` / `base64` processes for the dumps."""
from __future__ import annotations

import base64
import codecs
import os
import subprocess
import urllib.parse

import pytest

from tools_app.security.scrub import REDACTED
from tools_app.security.scrub.transforms import KINDS, MAX_HITS, known_values, scrub_known_values, skeleton, value_forms

SECRET = "ghp_R7kQ2mX9vL4tB8nW1cZ5yH3jF6dP0sA2eU4i"
PASSWORD = "p@ss/w0rd+Zq9!x7-long"
ENVIRON = f"PATH=/usr/bin\0HOME=/tmp\0GH_TOKEN={SECRET}\0LANG=C.UTF-8\0"
CORPUS = os.path.join(os.path.dirname(__file__), "corpus")


def b64(data: str) -> str:
    return base64.b64encode(data.encode()).decode()


def assert_no_run_of_the_value_left(out: str, value: str) -> None:
    """The guarantee: no run of any form of `value` as long as `fragment + stride - 1` survives in `out` (compared
    as skeletons: letters and digits only, lower case; a marker separates what it stood between)."""
    left = "|".join(skeleton(part).decode() for part in out.split(REDACTED))
    for kind, text in value_forms(value):
        form = skeleton(text).decode()
        size = sum(KINDS[kind]) - 1
        for i in range(0, max(0, len(form) - size) + 1):
            assert form[i:i + size] not in left, (kind, text, form[i:i + size], out)


SPELLINGS = {
    "verbatim": SECRET,
    "reversed": SECRET[::-1],
    "base64": b64(SECRET),
    "base64 without padding": b64(SECRET).rstrip("="),
    "base64 urlsafe": base64.urlsafe_b64encode(SECRET.encode()).decode().rstrip("="),
    "base64 of the environ (offset 1)": b64("A=" + ENVIRON),
    "base64 of the environ (offset 2)": b64("AB=" + ENVIRON),
    "base64 of the environ (offset 0)": b64("ABC=" + ENVIRON),
    "base64 of the reversed value": b64(SECRET[::-1]),
    "base64 reversed": b64(SECRET)[::-1],
    "base32 of the environ": base64.b32encode(ENVIRON.encode()).decode(),
    "hex": SECRET.encode().hex(),
    "HEX": SECRET.encode().hex().upper(),
    "hex bytes with spaces": SECRET.encode().hex(" "),
    "hex reversed": SECRET.encode().hex()[::-1],
    "\\x escapes": "".join(f"\\x{b:02x}" for b in SECRET.encode()),
    "0x list": ", ".join(f"0x{b:02x}" for b in SECRET.encode()),
    "url-encoded": urllib.parse.quote(PASSWORD, safe=""),
    "split by spaces": " ".join(SECRET),
    "one per line": "\n".join(SECRET),
    "split by commas and quotes": str(list(SECRET)),
    "zero-width joiners": "\u200b".join(SECRET),
    "reversed and split": "-".join(SECRET[::-1]),
    "reversed one per line": "\n".join(SECRET[::-1]),
    "rot13": codecs.encode(SECRET, "rot13"),
    "upper case": SECRET.upper(),
    "fullwidth letters": "".join(chr(ord(c) + 0xFEE0) if c.isalnum() else c for c in SECRET),
    "cyrillic look-alikes": SECRET.replace("c", "\u0441").replace("B", "\u0412"),
    "decimal codes": str(list(SECRET.encode())),
    "octal codes": " ".join(f"{b:03o}" for b in SECRET.encode()),
    "bits": " ".join(f"{b:08b}" for b in SECRET.encode()),
    "first half": SECRET[:20],
    "second half": SECRET[20:],
}


@pytest.mark.parametrize("name", sorted(SPELLINGS))
def test_every_common_spelling_of_a_known_value_is_redacted(name):
    spelled = SPELLINGS[name]
    out, count = scrub_known_values(f"before: {spelled} :after", [SECRET, PASSWORD])
    assert count >= 1 and REDACTED in out, out
    assert out.startswith("before: ") and out.endswith(" :after"), out
    assert spelled not in out and SECRET not in out and SECRET[::-1] not in out
    assert_no_run_of_the_value_left(out, SECRET)
    assert_no_run_of_the_value_left(out, PASSWORD)


@pytest.mark.parametrize("argv", [["od", "-c"], ["od", "-An", "-tx1"], ["od", "-b"], ["od", "-x"], ["od"],
                                  ["base64", "-w", "16"], ["base32", "-w", "20"]])
def test_dumps_of_the_environment_by_real_programs_are_redacted(argv):
    """od and base64 print the environ in lines with offsets between them: every line's run of the value goes."""
    dump = subprocess.run(argv, input=ENVIRON.encode(), capture_output=True, check=True).stdout.decode()
    out, count = scrub_known_values(dump, [SECRET])
    assert count >= 1, dump
    assert_no_run_of_the_value_left(out, SECRET)


def test_short_values_are_redacted_verbatim_only():
    """Under 8 letters and digits a value's split or reversed spellings are ordinary text (a word spelled out)."""
    out, count = scrub_known_values("k3y-9 and 9-y3k and k 3 y 9", ["k3y-9"])
    assert out == f"{REDACTED} and 9-y3k and k 3 y 9" and count == 1


def test_a_value_that_is_part_of_the_marker_does_not_break_earlier_markers():
    out, _ = scrub_known_values(f"x {SECRET[::-1]} ACT y", [SECRET, "ACT"])
    assert out == f"x {REDACTED} {REDACTED} y"


def test_json_escaped_values_are_redacted_verbatim():
    value = 'pa"ss\\word-0123456789'
    out, _ = scrub_known_values('{"v": "pa\\"ss\\\\word-0123456789"}', [value])
    assert out == '{"v": "' + REDACTED + '"}'


def test_ordinary_output_is_left_alone():
    """The benign corpus, with realistic credentials of a CLI registered, comes out byte-identical."""
    with open(os.path.join(CORPUS, "clean_output.txt"), encoding="utf-8") as fh:
        text = fh.read()
    values = [SECRET, PASSWORD, "AKIA75PNR5UHQXCFPE4I", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
              "xoxb-569791719649-7148867231410-jcmifNVqSXU17q1cD7CCgpGL"]
    assert scrub_known_values(text, values) == (text, 0)


def test_a_large_output_full_of_the_value_is_redacted_whole_and_stays_bounded():
    """1 MB of spelled-out copies: past MAX_HITS fragments the rest of the output goes (fail closed)."""
    line = " ".join(SECRET) + "\n"
    text = "head\n" + line * (1024 * 1024 // len(line))
    out, count = scrub_known_values(text, [SECRET])
    assert out == "head\n" + REDACTED + "\n" and count == 1
    assert MAX_HITS < len(text)


def test_a_large_ordinary_output_keeps_one_planted_copy_out():
    filler = "".join(f"{i:08x} {'lorem ipsum dolor sit amet ' * 2}\n" for i in range(20000))
    text = filler + " ".join(SECRET[::-1]) + "\n" + filler
    out, count = scrub_known_values(text, [SECRET])
    assert count == 1 and out == filler + REDACTED + "\n" + filler


def test_the_matcher_is_built_once_per_set_of_values():
    assert known_values([SECRET, PASSWORD]) is known_values([PASSWORD, SECRET])
