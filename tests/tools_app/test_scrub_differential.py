"""Differential test: the restructured scrubber against the frozen pre-P7
implementation (tests/tools_app/reference/scrub_v1.py).

On thousands of inputs generated from the corpora with mutations:

* the new package with the P7 detectors switched off redacts exactly what
  the old module redacted (same text, same count), dynamic values included;
* with them switched on, the result is the old redactions plus what the P7
  detectors find on their own: the additions are listed below by class,
  each with the reason it was added;
* P15: tokens glued to a preceding letter or digit (``aghp_…``) are found
  too (``detectors.GLUED``): with that switched off the legacy detectors are
  the reference again, and with it on every added span starts right after a
  letter or digit.

Delete this file with the reference once the restructure has settled.
"""
from __future__ import annotations

import json
import os
import random
from dataclasses import replace

import pytest

from tests.tools_app.reference import scrub_v1 as reference
from tools_app.security.scrub import Scrubber
from tools_app.security.scrub.detectors import DETECTORS, LEGACY_DETECTORS
from tools_app.security.scrub.dynamic import _Dyn
from tools_app.security.scrub.engine import Engine
from tools_app.security.scrub.scrubber import _scan, default_engine

CORPUS = os.path.join(os.path.dirname(__file__), "corpus")

# Intentional differences: every detector the reference does not have, by
# class, with the reason.  They live in tier 3, so they can only ADD spans.
WIDENED_CLASSES: dict[str, tuple[str, tuple[str, ...]]] = {
    "vendor formats by their own shape": (
        "credentials with a distinctive prefix or shape are found without a key = value context",
        ("azure_ad", "cloudflare_ca", "yandex", "openshift", "scalingo", "defined_net", "sonarqube", "sourcegraph",
         "circleci", "harness", "octopus", "infracost", "prefect", "readme", "contentful", "typeform", "frameio",
         "posthog", "intra42", "crates", "clojars", "flutterwave", "shippo", "easypost", "duffel", "brevo",
         "mailersend", "elevenlabs", "pinecone", "twitter_bearer", "adafruit"),
    ),
    "password hashes": (
        "Kerberos, PBKDF2/scrypt strings, LDAP, database verifiers, phpass and NTLM hashes can be cracked offline",
        ("krb5", "pbkdf2", "ldap_hash", "db_hash", "phpass", "ntlm"),
    ),
    "credential-named fields whatever the value": (
        "a field named PASSWORD/SECRET/TOKEN/CREDENTIAL/DSN/…_KEY/VIRTUAL_* holds a credential even when the value "
        "is short or word-like; also the Makefile / PHP assignment operators (?=, +=, ::=)",
        ("named_field",),
    ),
    "typed declarations": ("var x string = \"…\", val x: String = \"…\" put a type between name and value",
                           ("typed_decl",)),
    "XML elements and attributes": ("<password>…</password>, key=\"…\" value=\"…\" pairs",
                                    ("xml_element", "xml_attr", "xml_keyed")),
    "function-call arguments": ("setProperty(\"X_TOKEN\", \"…\"), env[\"API_KEY\"] = \"…\"", ("call_arg",)),
    "command lines": (
        "password flags and positional credentials of common tools",
        ("cli_flag", "cli_user_pass", "psexec", "redis_cli", "rdp_pass", "net_use", "smb_user", "htpasswd",
         "securestring"),
    ),
    "connection strings": ("ODBC / ADO.NET Password=…; values with spaces or braces", ("connstr",)),
    "Kubernetes Secret manifests": ("every data / stringData value of a Secret is a credential", ("k8s_secret",)),
}

WIDENED = {name: cls for cls, (_, names) in WIDENED_CLASSES.items() for name in names}


def _unglued(detectors):
    """The detectors as the reference had them: a leading word boundary required (P15's glued tokens off)."""
    return [replace(d, options={k: v for k, v in d.options.items() if k != "glued"}) for d in detectors]


LEGACY_ENGINE = Engine(_unglued([d for d in DETECTORS if d.name not in WIDENED]))
LEGACY_GLUED_ENGINE = Engine([d for d in DETECTORS if d.name not in WIDENED])
WIDENED_ENGINE = Engine([d for d in DETECTORS if d.name in WIDENED])


def _lines(name):
    path = os.path.join(CORPUS, name)
    with open(path, encoding="utf-8") as fh:
        return [raw for raw in fh.read().split("\n") if raw and not raw.startswith("# ")]


def _corpus():
    secrets, texts = [], []
    for name in sorted(os.listdir(CORPUS)):
        if not name.endswith(".txt") or name.startswith("shell_"):
            continue
        for line in _lines(name):
            if "\t" in line:
                line, secret = line.split("\t", 1)
                secrets.append(secret)
            texts.append(line)
            if "\\n" in line:  # also as the multi-line text it stands for
                texts.append(line.replace("\\n", "\n"))
    return secrets, texts


SECRETS, TEXTS = _corpus()
NOISE = ["é", "\u017f", "\u212a", "中文", "\u00a0", "😀", "\r\n", "\\n", "\t", '"', "'", "=", ": ", "@", "://"]


def _mutate(rng: random.Random, text: str) -> str:
    op = rng.randrange(10)
    if op == 0 or not text:
        return text
    if op == 1:  # point edits
        chars = list(text)
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(chars) + 1)
            kind = rng.randrange(3)
            if kind == 0 and i < len(chars):
                del chars[i]
            elif kind == 1:
                chars.insert(i, rng.choice("aZ09_-./+=:;\"' \n"))
            elif i < len(chars):
                chars[i] = rng.choice("xX7_-.")
        return "".join(chars)
    if op == 2:  # case flip of a segment
        i = rng.randrange(len(text))
        j = min(len(text), i + rng.randint(1, 12))
        return text[:i] + text[i:j].swapcase() + text[j:]
    if op == 3:  # truncation
        return text[: rng.randrange(len(text))]
    if op == 4:  # concatenation
        sep = rng.choice([" ", "\n", "\t", ", ", "; ", "&", ""])
        return sep.join([text] + [rng.choice(TEXTS) for _ in range(rng.randint(1, 3))])
    if op == 5:  # wrapping in config / code
        wrap = rng.choice(['{{"value": {}}}', "export X={}", "    {}", "'{}'", "<v>{}</v>", "f({})", "# {}"])
        return wrap.format(json.dumps(text) if wrap.startswith("{") else text)
    if op == 6 and SECRETS:  # swap the secret for another one
        for s in SECRETS:
            if s in text:
                return text.replace(s, rng.choice(SECRETS))
        return text
    if op == 7:  # non-ASCII / separators inserted
        i = rng.randrange(len(text) + 1)
        return text[:i] + rng.choice(NOISE) + text[i:]
    if op == 8:  # a bare secret with different neighbours
        return rng.choice(["", "x", "_", "=", " ", "\n", "/"]) + rng.choice(SECRETS or [text]) + rng.choice(["", "x", "0", " ", "\n", ")"])
    return text + rng.choice(NOISE) + _mutate(rng, rng.choice(TEXTS))


def _generated(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = list(TEXTS)
    while len(out) < n:
        out.append(_mutate(rng, rng.choice(TEXTS)))
    return out


CASES = _generated(6000, 20240)


def _merge(spans):
    out = []
    for s, e in sorted(spans):
        if out and s < out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def test_generated_input_is_large_and_varied():
    assert len(CASES) >= 6000
    assert len(set(CASES)) > 4000
    assert sum(1 for c in CASES if not c.isascii()) > 300


def test_every_detector_missing_from_the_reference_is_listed_as_intentional():
    legacy = {name for name, _, _ in reference._ALTS + reference._ALTS_EXT}
    assert {d.name for d in LEGACY_DETECTORS} == legacy
    assert {d.name for d in DETECTORS} - legacy == set(WIDENED)
    assert all(d.tier == 3 for d in DETECTORS if d.name in WIDENED)


def test_legacy_patterns_are_the_reference_patterns():
    assert LEGACY_ENGINE.tier_re[1].pattern == reference._TIER1_RE.pattern
    assert LEGACY_ENGINE.tier_re[2].pattern == reference._TIER2_RE.pattern


def test_without_the_widening_the_result_is_the_reference_result():
    old, new = reference.Scrubber(), Scrubber(engine=LEGACY_ENGINE)
    for text in CASES:
        assert new.scrub(text) == old.scrub(text), text


def test_dynamic_values_behave_as_before():
    rng = random.Random(5)
    values = rng.sample(SECRETS, min(60, len(SECRETS))) + ["hunter2hunter2", "p\u00e4ssw\u00f6rt-42"]
    old, new = reference.Scrubber(), Scrubber(engine=LEGACY_ENGINE)
    old.add_values(values)
    new.add_values(values)
    for text in CASES[::3]:
        assert new.scrub(text) == old.scrub(text), text
    data = {"password": "x1", "nested": [{"token": 5, "name": CASES[7]}, (CASES[9], None)], "api_key": ""}
    assert new.scrub_data(data) == old.scrub_data(data)


def test_widening_only_adds_the_listed_detectors_redactions():
    """Full result = reference spans + spans of the listed P7 detectors."""
    empty = _Dyn(frozenset(), 6)
    for text in CASES:
        full = _merge(_scan(text, empty, default_engine()))
        legacy = _scan(text, empty, LEGACY_ENGINE)
        assert _merge(legacy) == _merge(reference._scan(text, reference._Dyn(frozenset(), 6))), text
        legacy_glued = _scan(text, empty, LEGACY_GLUED_ENGINE)
        added = _scan(text, empty, WIDENED_ENGINE)
        assert full == _merge(legacy_glued + added), text


def test_glued_tokens_only_add_spans_that_start_right_after_a_letter_or_digit():
    """P15: the only difference the glued option makes is a token found where a letter or digit precedes it."""
    empty = _Dyn(frozenset(), 6)
    changed = 0
    for text in CASES:
        before = set(_scan(text, empty, LEGACY_ENGINE))
        after = set(_scan(text, empty, LEGACY_GLUED_ENGINE))
        assert before <= after, text
        added = after - before
        glued = {start for start, _ in added if start > 0 and text[start - 1].isalnum()}
        for start, _ in added:
            # a glued AWS key id also takes the secret that follows it (two spans, one match)
            assert start in glued or any(g < start for g in glued), (text, start)
        changed += len(glued)
    assert changed, "no generated case has a glued token: the class is stale"


@pytest.mark.parametrize("cls", sorted(WIDENED_CLASSES))
def test_each_widened_class_changes_some_generated_case(cls):
    """A listed class that never fires on the generated input is a stale entry."""
    engine = Engine([d for d in DETECTORS if WIDENED.get(d.name) == cls])
    empty = _Dyn(frozenset(), 6)
    assert any(_scan(text, empty, engine) for text in CASES), cls
