"""goclaw.crypto: AES-256-GCM values that name their key, open only for their own row and field, fail loudly when
tampered with, and keep opening after a key change while the old key is listed (docs/secrets.md)."""
import base64
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.core.exceptions import ImproperlyConfigured

from goclaw import crypto

ROOT = Path(__file__).resolve().parents[2]
KEY_A = bytes(range(32))
KEY_B = bytes(range(100, 132))
HEX_A, B64_A = KEY_A.hex(), base64.b64encode(KEY_A).decode()
HEX_B = KEY_B.hex()
SECRET = {"token": "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"}


@pytest.fixture
def key_a(settings):
    settings.GOCLAW_ENCRYPTION_KEY, settings.GOCLAW_ENCRYPTION_OLD_KEYS = HEX_A, []
    return settings


def _flip(token: str, index: int) -> str:
    """`token` with one bit flipped in byte `index` of its decoded blob (negative: from the end)."""
    head, _, encoded = token.rpartition(":")
    blob = bytearray(base64.urlsafe_b64decode(encoded))
    blob[index] ^= 0x01
    return f"{head}:" + base64.urlsafe_b64encode(bytes(blob)).decode()


def _v1(key: bytes, plaintext: bytes, associated_data: str) -> str:
    """A value in the format written before key ids existed (`v1:<b64 nonce+ct+tag>`, the associated data alone)."""
    nonce = os.urandom(12)
    return "v1:" + base64.urlsafe_b64encode(nonce + AESGCM(key).encrypt(nonce, plaintext, associated_data.encode())).decode()


@pytest.mark.parametrize("raw", [HEX_A, HEX_A.upper(), B64_A, B64_A.rstrip("="), base64.urlsafe_b64encode(KEY_A).decode()])
def test_hex_and_base64_keys_round_trip_and_name_the_same_key(settings, raw):
    settings.GOCLAW_ENCRYPTION_KEY, settings.GOCLAW_ENCRYPTION_OLD_KEYS = raw, []
    assert crypto.parse_key(raw) == KEY_A and crypto.current_key_id() == crypto.key_id(KEY_A)
    token = crypto.encrypt_json(SECRET, associated_data="t.field:1")
    assert token.startswith(f"v2:{crypto.key_id(KEY_A)}:") and SECRET["token"] not in token
    assert crypto.decrypt_json(token, associated_data="t.field:1") == SECRET
    settings.GOCLAW_ENCRYPTION_KEY = HEX_A if raw != HEX_A else B64_A  # the same key written the other way
    assert crypto.decrypt_json(token, associated_data="t.field:1") == SECRET


def test_every_value_gets_a_fresh_nonce_and_the_key_id_reveals_nothing_of_the_key(key_a):
    one, two = (crypto.encrypt_bytes(b"same", associated_data="t:1") for _ in range(2))
    assert one != two and crypto.key_id_of(one) == crypto.key_id_of(two) == crypto.current_key_id()
    assert len(crypto.current_key_id()) == 8 and crypto.current_key_id() not in (HEX_A + B64_A)
    assert crypto.key_id(KEY_A) != crypto.key_id(KEY_B)


@pytest.mark.parametrize("bad", ["", "short", HEX_A[:-1], HEX_A + "0", "zz" * 32, base64.b64encode(bytes(range(16))).decode(),
                                 base64.b64encode(bytes(range(33))).decode(), "not base64 at all!!"],
                         ids=["empty", "short", "hex-63", "hex-65", "not-hex", "b64-16-bytes", "b64-33-bytes", "garbage"])
def test_a_malformed_key_is_refused_naming_the_variable_never_the_value(bad):
    with pytest.raises(ImproperlyConfigured) as refused:
        crypto.parse_key(bad)
    message = str(refused.value)
    assert "GOCLAW_ENCRYPTION_KEY" in message and "64 hex characters or the base64 encoding of 32" in message
    assert not bad or bad not in message
    with pytest.raises(ImproperlyConfigured, match=r"GOCLAW_ENCRYPTION_OLD_KEYS \(entry 2\)"):
        crypto.keyring_check(HEX_A, [HEX_B, bad or "x"])


def _settings_process(env: dict, code: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("PYTEST_VERSION", "PYTEST_CURRENT_TEST")}
    base.update({"DATABASE_URL": "postgresql://nobody@/none?host=/nonexistent", "DJANGO_SETTINGS_MODULE": "goclaw.settings",
                 **env})
    return subprocess.run([sys.executable, "-c", f"import django; django.setup(); {code}"], cwd=ROOT, env=base,
                          capture_output=True, text=True, timeout=60, check=False)


def test_settings_refuse_to_start_with_a_malformed_key_and_accept_both_formats(tmp_path):
    bad = "k3y-" + "9" * 20
    for env in ({"GOCLAW_ENCRYPTION_KEY": bad}, {"GOCLAW_ENCRYPTION_KEY": HEX_A, "GOCLAW_ENCRYPTION_OLD_KEYS": f"{B64_A},{bad}"}):
        refused = _settings_process({"GOCLAW_DATA_DIR": str(tmp_path), **env}, "pass")
        assert refused.returncode != 0 and "ImproperlyConfigured" in refused.stderr
        assert ("GOCLAW_ENCRYPTION_OLD_KEYS (entry 2)" if "GOCLAW_ENCRYPTION_OLD_KEYS" in env else
                "GOCLAW_ENCRYPTION_KEY must be") in refused.stderr and bad not in refused.stderr
    started = _settings_process({"GOCLAW_DATA_DIR": str(tmp_path), "GOCLAW_ENCRYPTION_KEY": HEX_B,
                                 "GOCLAW_ENCRYPTION_OLD_KEYS": f" {B64_A} , "},
                                "from goclaw import crypto; print(crypto.current_key_id(), sorted(crypto.keyring()[1]))")
    assert started.returncode == 0, started.stderr
    assert started.stdout.split()[0] == crypto.key_id(KEY_B) and crypto.key_id(KEY_A) in started.stdout


@pytest.mark.parametrize("where", ["nonce", "ciphertext", "tag"])
def test_a_flipped_bit_anywhere_in_the_value_is_detected(key_a, where):
    token = crypto.encrypt_json(SECRET, associated_data="t:1")
    index = {"nonce": 3, "ciphertext": 14, "tag": -2}[where]
    with pytest.raises(crypto.DecryptionError, match="does not open"):
        crypto.decrypt_json(_flip(token, index), associated_data="t:1")


def test_a_changed_key_id_is_detected_and_named_never_the_key(key_a):
    key_a.GOCLAW_ENCRYPTION_OLD_KEYS = [HEX_B]
    token = crypto.encrypt_json(SECRET, associated_data="t:1")
    kid = crypto.key_id_of(token)
    unknown = "0" + kid[1:] if kid[0] != "0" else "1" + kid[1:]
    with pytest.raises(crypto.DecryptionError) as refused:
        crypto.decrypt_json(token.replace(kid, unknown, 1), associated_data="t:1")
    assert unknown in str(refused.value) and HEX_A not in str(refused.value) and HEX_B not in str(refused.value)
    # Relabelled with the id of another configured key: that key is tried, and the authenticated id fails it.
    with pytest.raises(crypto.DecryptionError, match="does not open"):
        crypto.decrypt_json(token.replace(kid, crypto.key_id(KEY_B), 1), associated_data="t:1")
    for malformed in (token.replace(kid, kid.upper(), 1), token.replace(f"{kid}:", "", 1), f"v2:{kid}:%%%"):
        with pytest.raises(crypto.DecryptionError):
            crypto.decrypt_json(malformed, associated_data="t:1")


def test_a_value_opens_only_for_the_row_and_field_it_was_sealed_for(key_a):
    token = crypto.encrypt_json(SECRET, associated_data="tools_app.pendingchange.arguments:1")
    for other in ("tools_app.pendingchange.arguments:2", "goclaw:call-identity:1"):
        with pytest.raises(crypto.DecryptionError):
            crypto.decrypt_json(token, associated_data=other)
    with pytest.raises(ValueError, match="associated data is required"):
        crypto.encrypt_json(SECRET, associated_data="")


def test_values_sealed_with_an_old_key_open_while_it_is_listed_and_fail_by_id_once_removed(key_a):
    token = crypto.encrypt_json(SECRET, associated_data="t:1")
    key_a.GOCLAW_ENCRYPTION_KEY, key_a.GOCLAW_ENCRYPTION_OLD_KEYS = HEX_B, [B64_A]
    assert crypto.decrypt_json(token, associated_data="t:1") == SECRET and not crypto.is_current(token)
    resealed = crypto.reseal(token, associated_data="t:1")
    assert crypto.key_id_of(resealed) == crypto.key_id(KEY_B) and crypto.is_current(resealed)
    key_a.GOCLAW_ENCRYPTION_OLD_KEYS = []
    assert crypto.decrypt_json(resealed, associated_data="t:1") == SECRET
    with pytest.raises(crypto.DecryptionError, match=crypto.key_id(KEY_A)):
        crypto.decrypt_json(token, associated_data="t:1")


def test_v1_values_keep_opening_with_the_current_or_an_old_key(key_a):
    legacy = _v1(KEY_A, b'{"k":"v"}', "t:1")
    assert crypto.is_sealed(legacy) and crypto.key_id_of(legacy) is None and not crypto.is_current(legacy)
    assert crypto.decrypt_json(legacy, associated_data="t:1") == {"k": "v"}
    key_a.GOCLAW_ENCRYPTION_KEY, key_a.GOCLAW_ENCRYPTION_OLD_KEYS = HEX_B, [HEX_A]
    assert crypto.decrypt_json(legacy, associated_data="t:1") == {"k": "v"}
    assert crypto.key_id_of(crypto.reseal(legacy, associated_data="t:1")) == crypto.key_id(KEY_B)
    for token, data in ((legacy, "t:2"), (_flip(legacy, 20), "t:1")):
        with pytest.raises(crypto.DecryptionError):
            crypto.decrypt_json(token, associated_data=data)
    key_a.GOCLAW_ENCRYPTION_OLD_KEYS = []
    with pytest.raises(crypto.DecryptionError, match="any configured key"):
        crypto.decrypt_json(legacy, associated_data="t:1")


@pytest.mark.parametrize("value", ['{"token": "x"}', "plain secret", "v3:abc", "", "v2:", "v1:", "v1:AAAA"])
def test_there_is_no_plaintext_fallback(key_a, value):
    with pytest.raises(crypto.DecryptionError):
        crypto.decrypt_bytes(value, associated_data="t:1")
