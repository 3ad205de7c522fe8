"""Tests for tools_app.security.scrub (pure Python, no Django DB needed)."""
from __future__ import annotations

import base64
import binascii
import os
import threading
import urllib.parse

import pytest

from tools_app.security.scrub import REDACTED, Scrubber, default_scrubber, scrub

CORPUS = os.path.join(os.path.dirname(__file__), "corpus")


def _lines(name):
    with open(os.path.join(CORPUS, name), encoding="utf-8") as fh:
        for raw in fh.read().split("\n"):
            if raw and not raw.startswith("# "):
                yield raw


SECRET_CASES = [tuple(line.split("\t", 1)) for line in _lines("secrets.txt")]
CLEAN_CASES = list(_lines("clean_output.txt"))
# context fragments of the P7 detectors, mixed into the prefilter check
EXTRA_FRAGMENTS = [
    "DB_PASSWORD=", "api_key: ", "VIRTUAL_X=", " ?= ", " += ", " ::= ", " => ", "var apiToken string = ", ": String = ",
    "<password>", "</password>", '<add key="DbPassword" value="', '"/>', '<entry key="api.token">', "</entry>",
    'setProperty("X_TOKEN", "', '["API_KEY"] = "', "--password ", "--client-secret=", " -u admin -p ",
    "PsExec \\\\h -p ", "redis-cli -a ", "xfreerdp /p:", "net use \\\\srv\\s ", " /user:u ", "-U alice%",
    "htpasswd -b f u ", 'ConvertTo-SecureString "', ";Password=", ";Pwd={", "Server=x;", "kind: Secret\n",
    "data:\n  k: ", '"kind": "Secret", "data": {"k": "', "$krb5tgs$23$", "$pbkdf2-sha256$", "{SSHA}", "md5", "*",
    "8Q~", "sgp_", "CCIPAT_", "API-", "pcsk_", "sk_", "AAAAAAAAAAAAAAAAAAAA", ":::",
]


def test_corpus_sizes():
    assert len(SECRET_CASES) >= 80
    assert len(CLEAN_CASES) >= 80
    for line, secret in SECRET_CASES:
        assert secret and secret in line


@pytest.mark.parametrize("line,secret", SECRET_CASES, ids=[c[0][:40] for c in SECRET_CASES])
def test_secret_lines_are_redacted(line, secret):
    out, n = Scrubber().scrub(line)
    assert secret not in out, out
    assert REDACTED in out
    assert n >= 1


@pytest.mark.parametrize("line", CLEAN_CASES, ids=[c[:40] for c in CLEAN_CASES])
def test_clean_lines_untouched(line):
    out, n = Scrubber().scrub(line)
    assert out == line
    assert n == 0


def test_key_names_are_kept():
    s = Scrubber()
    assert s.scrub_text("postgres://app:hunter2xyz@db/x") == "postgres://app:[REDACTED]@db/x"
    assert s.scrub_text("OPENAI_API_KEY=abcDEF123456ghiJKL") == "OPENAI_API_KEY=[REDACTED]"
    assert s.scrub_text('{"password": "hunter2xyz"}') == '{"password": "[REDACTED]"}'
    assert s.scrub_text("Authorization: Bearer abcDEF123456ghiJKL789") == "Authorization: Bearer [REDACTED]"


def test_multiline_pem_block_fully_removed():
    body = ["MIIEowIBAAKCAQEAx9Zq3bJ0aQ4r7yqk1sT2mC", "Zt8x0pQ1w2e3r4t5y6u7i8o9p0aSdFgHjKlZxC", "Vb3nM4qW5eR6tY7uI8oP9aS0dF1gH2jK3lZ4xC"]
    pem = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(body) + "\n-----END RSA PRIVATE KEY-----"
    text = "before\n" + pem + "\nafter"
    out, n = Scrubber().scrub(text)
    assert out == "before\n" + REDACTED + "\nafter"
    assert n == 1
    for b in body:
        assert b not in out


def test_truncated_pem_body_removed():
    body = "MIIEowIBAAKCAQEAx9Zq3bJ0aQ4r7yqk1sT2mCZt8x0pQ1w2e3r4"
    out, _ = Scrubber().scrub("-----BEGIN OPENSSH PRIVATE KEY-----\n" + body + "\n" + body[::-1])
    assert body not in out and body[::-1] not in out


def test_redaction_count():
    s = Scrubber()
    text = (
        "a ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8 b\n"
        "c AKIAIOSFODNN7EXAMPLE d\n"
        "e nothing here\n"
        "f xoxb-1234567890-1234567890-abcdefghijklmnopqrstuvwx"
    )
    out, n = s.scrub(text)
    assert n == 3
    assert out.count(REDACTED) == 3


def test_dynamic_values_and_encodings():
    s = Scrubber()
    secret = "Zq9!vault-Value_42"
    s.add_values([secret])
    forms = [
        secret,
        base64.b64encode(secret.encode()).decode(),
        urllib.parse.quote(secret, safe=""),
        binascii.hexlify(secret.encode()).decode(),
    ]
    for form in forms:
        out, n = s.scrub(f"value is <{form}> here")
        assert form not in out, form
        assert out == f"value is <{REDACTED}> here"
        assert n == 1


def test_dynamic_overlapping_values():
    s = Scrubber()
    s.add_values(["abcdef12345", "12345ghijkl"])
    out, n = s.scrub("x abcdef12345ghijkl y")
    assert out == f"x {REDACTED} y"
    assert n == 1
    s.add_values(["abcdef12345ghijklmn"])
    out, _ = s.scrub("abcdef12345ghijklmn")
    assert out == REDACTED


def test_short_values_ignored():
    s = Scrubber(min_dynamic_length=6)
    s.add_values(["abc12", "", None, "okvalue1"])
    assert s.scrub_text("abc12 okvalue1") == f"abc12 {REDACTED}"


def test_remove_and_clear():
    s = Scrubber()
    s.add_values(["firstSecret1", "secondSecret2"])
    s.remove_values(["firstSecret1"])
    assert s.scrub_text("firstSecret1 secondSecret2") == f"firstSecret1 {REDACTED}"
    s.clear_values()
    assert s.scrub_text("firstSecret1 secondSecret2") == "firstSecret1 secondSecret2"


def test_thread_safety_smoke():
    s = Scrubber()
    base = "Qk7!fixed-secret-0"
    s.add_values([base])
    text = ("log line without secrets, sha 82d63c6e7b6d5691b4ffa441542a5012461dca6c\n" * 50) + base
    errors = []
    stop = threading.Event()

    def reader():
        try:
            while not stop.is_set():
                out, n = s.scrub(text)
                assert base not in out and n >= 1
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def writer():
        try:
            for i in range(200):
                s.add_values([f"dyn-{i}-Zx9{i:05d}"])
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    readers = [threading.Thread(target=reader) for _ in range(4)]
    for t in readers:
        t.start()
    w = threading.Thread(target=writer)
    w.start()
    w.join()
    stop.set()
    for t in readers:
        t.join()
    assert not errors
    assert s.scrub_text("dyn-199-Zx900199") == REDACTED


def test_scrub_data_nested():
    s = Scrubber()
    data = {
        "user": "alice",
        "password": "hunter2",
        "config": {
            "api_key": "abc",
            "Authorization": "Bearer xyz",
            "timeout": 30,
            "token_count": 12,
            "nested": [{"client_secret": 123456}, {"note": "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"}],
        },
        "session": "",
        "cookie": None,
        "enabled": True,
        "author": "Jane",
    }
    out, n = s.scrub_data(data)
    assert out["user"] == "alice"
    assert out["password"] == REDACTED
    assert out["config"]["api_key"] == REDACTED
    assert out["config"]["Authorization"] == REDACTED
    assert out["config"]["timeout"] == 30
    assert out["config"]["token_count"] == 12
    assert out["config"]["nested"][0]["client_secret"] == REDACTED
    assert out["config"]["nested"][1]["note"] == REDACTED
    assert out["session"] == ""
    assert out["cookie"] is None
    assert out["author"] == "Jane"
    assert n == 5
    assert data["password"] == "hunter2"  # input not mutated


def test_module_level_helpers():
    out, n = scrub("token ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8")
    assert REDACTED in out and n == 1
    assert isinstance(default_scrubber, Scrubber)
    assert default_scrubber.scrub_text("") == ""


def test_long_hex_alone_not_secret_but_is_in_key_context():
    h = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    s = Scrubber()
    assert s.scrub_text(h) == h
    assert s.scrub_text(f"api_secret={h}") == f"api_secret={REDACTED}"


# ---------------------------------------------------------------------------
# Prefilter edge cases: the Hyperscan pass only proposes candidate positions,
# the detectors must still see the whole text around them.
# ---------------------------------------------------------------------------
GHP = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def test_secret_at_very_start_and_end():
    s = Scrubber()
    assert s.scrub(GHP) == (REDACTED, 1)
    assert s.scrub(GHP + " tail") == (REDACTED + " tail", 1)
    assert s.scrub("head " + GHP) == ("head " + REDACTED, 1)
    assert s.scrub_text("password=hunter2xyz") == "password=" + REDACTED
    assert s.scrub_text("x token=abcDEF123456ghiJKL") == "x token=" + REDACTED
    s.add_values(["Qk7!edge-secret"])
    assert s.scrub("Qk7!edge-secret") == (REDACTED, 1)
    assert s.scrub("a Qk7!edge-secret") == ("a " + REDACTED, 1)


def test_long_pem_block_fully_removed():
    body = [f"MIIEowIBAAKCAQEAx9Zq3bJ0aQ4r7yqk1sT2mC{i:04d}" for i in range(2000)]
    pem = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(body) + "\n-----END RSA PRIVATE KEY-----"
    out, n = Scrubber().scrub("before\n" + pem + "\nafter")
    assert out == "before\n" + REDACTED + "\nafter"
    assert n == 1


def test_one_secret_in_the_middle_of_a_1mb_line():
    half = "x" * (512 * 1024)
    out, n = Scrubber().scrub(half + " " + GHP + " " + half)
    assert out == half + " " + REDACTED + " " + half
    assert n == 1


def test_many_anchors_without_secrets():
    text = (
        "token expired; secret rotation; key session cookie password reset "
        "monkey@home sk- ghp_ AKIA eyJ Bearer; Authorization required -----BEGIN CERTIFICATE-----\n"
    ) * 5000
    assert Scrubber().scrub(text) == (text, 0)


def test_keywords_sharing_one_value():
    s = Scrubber()
    assert s.scrub_text("token_token=abcDEF123456ghiJKL") == "token_token=" + REDACTED
    assert s.scrub_text("secret_token: abcDEF123456ghiJKL") == "secret_token: " + REDACTED
    assert s.scrub_text("--db-password abcDEF123456") == "--db-password " + REDACTED


def test_non_ascii_text_keeps_offsets():
    s = Scrubber()
    text = "\U0001F600 caf\u00e9 \u4e2d\u6587 " + GHP + " \u00e9\n\u017fecret=Abcdef123456xyz"
    out, n = s.scrub(text)
    assert out == "\U0001F600 caf\u00e9 \u4e2d\u6587 " + REDACTED + " \u00e9\n\u017fecret=" + REDACTED
    assert n == 2
    s.add_values(["p\u00e4ssw\u00f6rt-\u4e2d\u6587-42"])
    assert s.scrub_text("\u00e9 p\u00e4ssw\u00f6rt-\u4e2d\u6587-42 \u00e9") == "\u00e9 " + REDACTED + " \u00e9"
    # same projection ("?" for every non-ASCII char), different value: kept
    assert s.scrub_text("p\u00e5ssw\u00f6rt-\u4e2d\u6587-42") == "p\u00e5ssw\u00f6rt-\u4e2d\u6587-42"


def test_dynamic_values_sharing_a_prefix_are_all_found():
    s = Scrubber()
    s.add_values(["aF!!hf3qm_8mrrR9z5xk", "7aF!!hf3qm_8mr"])
    assert s.scrub_text("p7aF!!hf3qm_8mrrR9z5xkqH") == "p" + REDACTED + "qH"


def _reference_positions(text):
    """Positions where a detector pattern matches AND its strategy redacts,
    found the slow way (trying every position): {position: {detectors}}."""
    from tools_app.security.scrub.scrubber import default_engine

    engine = default_engine()
    found = {}
    for s in range(len(text)):
        for m in engine.match_at(text, s):
            out = []
            engine.handle(text, m, s, out)
            if out:
                found.setdefault(s, set()).add(m.lastgroup)
    return found


def test_prefilter_is_a_superset():
    """Every detector's prefilter proposes every position where the detector
    would redact something (tier 1 may use either legacy tier's candidates,
    as before the restructure; other tiers only their own)."""
    import random

    from tools_app.security.scrub.engine import project
    from tools_app.security.scrub.scrubber import default_engine

    engine = default_engine()

    rng = random.Random(7)
    frags = [c[0] for c in SECRET_CASES] + CLEAN_CASES + [
        "token", "Secret", "PASSWORD", "pwd", "key", "cookie", "Authorization", "Bearer ", "://u:", "@", "=", ": ",
        " ", "\t", "\n", '"', "'", "-", "--", "_", "\u017f", "\u212a", "\u00e9", "\U0001F600", "\u00a0",
        "-----BEGIN RSA PRIVATE KEY-----\n", "-----END RSA PRIVATE KEY-----",
        "mysql ", " -p", "sshpass ", '"auth": "', "Private-Lines: 2\n", "SSWS ", "machine h login u password ",
        "https://", "@o1.ingest.sentry.io/2", "$2y$10$", "EAAA", "\\n", "\r\n",
    ] + EXTRA_FRAGMENTS
    alphabet = "abcXYZ0123456789_-+/="
    for _ in range(300):
        parts = []
        for _ in range(rng.randint(1, 25)):
            if rng.random() < 0.5:
                parts.append(rng.choice(frags))
            else:
                parts.append("".join(rng.choice(alphabet) for _ in range(rng.choice([3, 8, 20, 40]))))
        text = "".join(parts)
        tiers = engine.candidates(text, project(text))
        for s, groups in _reference_positions(text).items():
            for g in groups:
                tier = engine.by_name[g].tier
                own = tiers[1] | tiers[2] if tier == 1 else tiers[tier] if tier == 2 else tiers.get(g, set())
                assert s in own, (text, s, g)


def test_scan_equals_reference_at_every_position():
    """The engine (candidates only) redacts exactly what trying every
    detector at every position redacts."""
    import random

    from tools_app.security.scrub.dynamic import _Dyn
    from tools_app.security.scrub.scrubber import _scan, default_engine

    engine = default_engine()

    rng = random.Random(11)
    frags = [c[0] for c in SECRET_CASES] + CLEAN_CASES
    for _ in range(60):
        text = " ".join(rng.choice(frags) for _ in range(rng.randint(1, 6)))
        ref = []
        for s in range(len(text)):
            for m in engine.match_at(text, s):
                engine.handle(text, m, s, ref)
        assert sorted(_scan(text, _Dyn(frozenset(), 6), engine)) == sorted(ref), text


# ---------------------------------------------------------------------------
# Second batch of detectors: exact output (only the credential goes)
# ---------------------------------------------------------------------------
def test_sentry_dsn_key_only():
    s = Scrubber()
    key = "3f1c9a0b7d2e4f6a8b0c1d2e3f4a5b6c"
    assert s.scrub_text(f"dsn=https://{key}@o4711.ingest.sentry.io/42") == f"dsn=https://{REDACTED}@o4711.ingest.sentry.io/42"
    # a hex user on another host without a project id path is left alone
    assert s.scrub_text(f"https://{key}@example.com/a/b") == f"https://{key}@example.com/a/b"


def test_authorization_unknown_scheme_keeps_the_scheme_word():
    s = Scrubber()
    tok = "00Xk3vR9pQ2mW7tZ1bN5cJ8dF4gH6jL0sA2eY4uI"
    assert s.scrub_text(f"Authorization: SSWS {tok}") == f"Authorization: SSWS {REDACTED}"
    assert s.scrub_text(f"Authorization: Custom-Scheme {tok}") == f"Authorization: Custom-Scheme {REDACTED}"
    assert s.scrub_text("Authorization: missing credentials") == "Authorization: missing credentials"


def test_multiline_netrc_and_ppk():
    s = Scrubber()
    netrc = "machine api.example.com\n  login alice\n  password Zq8pL2mN4vB7x\n"
    assert s.scrub_text(netrc) == netrc.replace("Zq8pL2mN4vB7x", REDACTED)
    priv = ["AAAAIF4q9mZr0tWcY8sB2nK7xP1vJ3hL6dQ5uE9aR0gT4yMoAAAAIF4q9mZr0tWc", "Y8sB2nK7xP1vJ3hL6dQ5uE9a"]
    ppk = (
        "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: eddsa-key\nPublic-Lines: 1\n"
        "AAAAC3NzaC1lZDI1NTE5AAAAIHp3Jx7cWq0a3bV5nR2TQ8fLmZyK1sD9vE4uG6hN0pXa\n"
        "Private-Lines: 2\n" + "\n".join(priv) + "\nPrivate-MAC: 5b1f0a3c9e8d7b6a5f4e3d2c1b0a9988\n"
    )
    out, n = s.scrub(ppk)
    assert n == 1 and out == ppk.replace("\n".join(priv), REDACTED)


def test_base64_block_line_is_not_a_bare_token():
    # "EAAA" + 60 characters is a Square token, but also a plausible line of a
    # wrapped certificate; inside a base64 block it is kept
    line = "EAAAbGlzdGluZ19jbGFzc19pZF8xMjM0NTY3ODkwYWJjZGVmZ2hpamtsbW5vcHFy"
    cert = (
        "-----BEGIN CERTIFICATE-----\nMIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJ\n"
        + line + "\n-----END CERTIFICATE-----"
    )
    assert Scrubber().scrub(cert) == (cert, 0)
    assert Scrubber().scrub("token:\n" + line + "\n") == ("token:\n" + REDACTED + "\n", 1)


def test_docker_auth_needs_user_colon_password():
    s = Scrubber()
    cred = base64.b64encode(b"ci-bot:Zq8pL2mN4vB7x9").decode()
    assert s.scrub_text(f'{{"auth": "{cred}"}}') == f'{{"auth": "{REDACTED}"}}'
    plain = base64.b64encode(b"helloworld").decode()
    assert s.scrub_text(f'{{"auth": "{plain}"}}') == f'{{"auth": "{plain}"}}'


def test_command_line_passwords():
    s = Scrubber()
    assert s.scrub_text("mysql -u root -pS3cretPw9 db") == f"mysql -u root -p{REDACTED} db"
    assert s.scrub_text("mysql -u root -p db") == "mysql -u root -p db"
    assert s.scrub_text("mysql -u root -p$MYSQL_PWD db") == "mysql -u root -p$MYSQL_PWD db"
    assert s.scrub_text("sshpass -p 'Zq8 pL2' ssh h") == f"sshpass -p '{REDACTED}' ssh h"
    assert s.scrub_text("openssl pkcs12 -passin pass:nywQYoiFJNqV") == f"openssl pkcs12 -passin pass:{REDACTED}"


# ---------------------------------------------------------------------------
# P15: tokens glued to a preceding letter or digit are found wherever their
# shape is; the token goes from its prefix on, the glued characters stay.
# ---------------------------------------------------------------------------
SK_PROJ = "sk-proj-Z1U9ueHK7CN1w4zPbW1GBU4ysxqN6EPgF7Co8U0ujFMiUc1F"
GHO = "gho_dA7Eh1kjNOBxav9W8RSP4C7ZfoNhC07Zevgn"
AKIA = "AKIA75PNR5UHQXCFPE4I"
GLUED = [
    ("helloa", SK_PROJ, ""), ("9", SK_PROJ, ""), ("a", GHP, ""), ("a", AKIA, ""),  # the four spellings
    ("x_y7", GHO, " tail"), ("\u00e9", GHP, ""), ("\u4e2d\u6587", AKIA, "\n"), ("\u0430", SK_PROJ, ""),
    ("ASIA0", "ASIARB2D72DFMYM4DCXJ", ""), ("v1", "AIzaCOSVFNVsDOa2LQ8TSbzvPUVGOxsPIrzRDdF", '"}'),
    ("https://h.example/x?t=q", "hf_Z3TaXu9etnCHOl7x4fflF5uBi0llUQgc3u", "&y=1"),
    ('{"k": "v', "xoxb-569791719649-7148867231410-jcmifNVqSXU17q1cD7CCgpGL", '"}'),
    ("id42", "glpat-u0UnvbcesgNHF7OO5PHW", ""), ("z", "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", ""),
    ("pay", "sk_live_35H8yr7kuE7uyKU0riUzAJH2", ""), ("pay2", "rk_live_V2DM5om3jtZYHf7euAAMXuX6", ""),
    ("npmrc", "npm_GL0WL67B7xrKnKcHBndmuSw24NwMc3s3k1Tx", ""), ("A", "pypi-AgEIcHlwaS5vcmcIzEx6ra4sFD6zKMhsV38Xfe4uZfHsEYDC5R2BpLbUKaCAnEMfH", ""),
    ("x", "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", ""),
    ("auth", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1LTQyIn0.w2ezrZCzUXXXZvfATr6xzm9hnPrQaWBBKU9aLFk61rL", ""),
    ("tok_", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1LTQyIn0.w2ezrZCzUXXXZvfATr6xzm9hnPrQaWBBKU9aLFk61rL", ""),
    ("key", "sk-0123456789abcdef0123456789abcdef", ""),  # DeepSeek-style: 32 lowercase hex
    # the Bot API's own URL glues a Telegram bot token to "bot"
    ("https://api.telegram.org/bot", "7289026180:AATJcH3uM7LHYygk5k6sB2r1gnOec2JWofN", "/getMe"),
    ("a_", "728902618:AATJcH3uM7LHYygk5k6sB2r1gnOec2JWofN", ""), ("v1.", "72890261:AATJcH3uM7LHYygk5k6sB2r1gnOec2JWofN", ""),
]


@pytest.mark.parametrize("before,token,after", GLUED, ids=[f"{b!r}+{t[:8]}" for b, t, _ in GLUED])
def test_a_token_glued_to_what_precedes_it_is_redacted_and_the_glued_characters_stay(before, token, after):
    assert Scrubber().scrub(before + token + after) == (before + REDACTED + after, 1)


def test_a_token_glued_on_both_sides_goes_whole_where_its_format_has_no_fixed_length():
    assert Scrubber().scrub("a" + GHP + "xyz2") == ("a" + REDACTED, 1)
    assert Scrubber().scrub("key" + SK_PROJ + "Zz9 end") == ("key" + REDACTED + " end", 1)


@pytest.mark.parametrize("text", [
    "task-proj-2024-planning-notes-final", "task-3f9a2c1e-7b4d-4e8a-9c2f-1d5e6a7b8c9d",
    "risk_test_coverage2024", "flask-sqlalchemy-2024-upgrade-guide-v3", "desk-proj-alpha-beta-gamma-delta-epsilon-2",
    "makiavelli akiaiosfodnn7exampleab", "whisk-ai-7b-instruct-v0.2-gguf-q4-k-m2", "sendxoxo-hugs-and-kisses",
    "TOBACCOAKIAXXXXXXXXXXXXXXXXXXXXXXXX", "mask_live_streaming_view", "laughs_" + "a" * 40,
])
def test_words_ending_with_a_token_prefix_stay(text):
    assert Scrubber().scrub(text) == (text, 0)
