"""Values kept encrypted at rest: AES-256-GCM with the key from settings.GOCLAW_ENCRYPTION_KEY.

A sealed value is text, `v2:<key id>:<urlsafe base64 of 12-byte nonce + ciphertext + 16-byte tag>`: a fresh random
nonce per value, the id of the key that sealed it (so a rotation knows what is left to re-seal, and opening picks the
right key), and associated data that names what the value is and which row it belongs to (e.g.
`tools_app.pendingchange.arguments:<uuid>`), so a sealed value copied into another row or column fails to open. The
version and key id are authenticated too. `v1:<b64>` values (no key id, written before rotation existed) still open,
with the current key or any old key. See docs/secrets.md.
"""
from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import json
import os
import re
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

__all__ = [
    "DecryptionError", "current_key_id", "decrypt_bytes", "decrypt_json", "encrypt_bytes", "encrypt_json",
    "is_current", "is_sealed", "key_id", "key_id_of", "keyring", "keyring_check", "parse_key", "reseal",
]

VERSION = "v2"
LEGACY_VERSION = "v1"
_NONCE_BYTES = 12
_TAG_BYTES = 16
_KEY_ID_LABEL = b"goclaw encryption key id\x00"
_KEY_ID = re.compile(r"[0-9a-f]{8}")
_URLSAFE_B64 = re.compile(r"[A-Za-z0-9_-]*={0,2}")
_HEX_KEY = re.compile(r"[0-9a-fA-F]{64}")
_KEY_HELP = ("must be 64 hex characters or the base64 encoding of 32 random bytes (AES-256); "
             "generate one with: python -c 'import secrets; print(secrets.token_hex(32))'")


class DecryptionError(Exception):
    """A sealed value could not be opened: wrong or unknown key, wrong associated data, tampered with, or not a
    sealed value. Messages never hold the value or a key."""


def parse_key(raw: str, *, name: str = "GOCLAW_ENCRYPTION_KEY") -> bytes:
    """The 32 key bytes of `raw` (64 hex chars, or base64 / urlsafe base64 of 32 bytes, padding optional).

    ImproperlyConfigured names the variable (`name`) and never echoes the value."""
    text = (raw or "").strip() if isinstance(raw, str) else ""
    if _HEX_KEY.fullmatch(text):
        return bytes.fromhex(text)
    try:
        key = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_" if ("-" in text or "_" in text) else None,
                               validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) != 32:
        raise ImproperlyConfigured(f"{name} {_KEY_HELP}")
    return key


def key_id(key: bytes) -> str:
    """A short public name of a key: 8 hex chars of SHA-256 over a fixed label and the key (reveals nothing useful
    about a random 256-bit key, and is the same whichever text format the key was given in)."""
    return hashlib.sha256(_KEY_ID_LABEL + key).hexdigest()[:8]


def _as_list(raw) -> list[str]:
    if isinstance(raw, str):
        return [part.strip() for part in raw.split(",") if part.strip()]
    return [str(part).strip() for part in (raw or ()) if str(part).strip()]


@functools.lru_cache(maxsize=8)
def _keyring_for(current_raw: str, old_raw: tuple[str, ...]) -> tuple[str, dict[str, bytes]]:
    current = parse_key(current_raw)
    keys = {key_id(current): current}
    for position, raw in enumerate(old_raw, start=1):
        old = parse_key(raw, name=f"GOCLAW_ENCRYPTION_OLD_KEYS (entry {position})")
        kid = key_id(old)
        if keys.get(kid, old) != old:
            raise ImproperlyConfigured(f"GOCLAW_ENCRYPTION_OLD_KEYS (entry {position}) has the same key id {kid} as "
                                       "another configured key: generate a new key")
        keys[kid] = old  # the current key listed again among the old ones is harmless
    return key_id(current), keys


def keyring_check(current: str, old) -> None:
    """Raise ImproperlyConfigured (naming the variable, never the value) unless every configured key parses: called
    by settings so a bad key stops the start instead of the first seal."""
    _keyring_for(current, tuple(_as_list(old)))


def keyring() -> tuple[str, dict[str, bytes]]:
    """(id of the current key, every configured key by id): GOCLAW_ENCRYPTION_KEY first, then the old keys that
    may still open values (GOCLAW_ENCRYPTION_OLD_KEYS). Parsed once per distinct setting."""
    old = tuple(_as_list(getattr(settings, "GOCLAW_ENCRYPTION_OLD_KEYS", ())))
    return _keyring_for(settings.GOCLAW_ENCRYPTION_KEY, old)


def current_key_id() -> str:
    return keyring()[0]


def _aad(associated_data: str, kid: str | None) -> bytes:
    if not associated_data:
        raise ValueError("associated data is required: name the purpose and the row the value belongs to")
    if kid is None:  # v1: the associated data alone
        return associated_data.encode()
    return f"{VERSION}:{kid}:".encode() + associated_data.encode()


def is_sealed(value: Any) -> bool:
    """Does `value` look like a sealed value of a known version (it may still fail to open)?"""
    return isinstance(value, str) and value.startswith((VERSION + ":", LEGACY_VERSION + ":"))


def key_id_of(token: str) -> str | None:
    """The key id a sealed value names (None for v1 values, which name none, and for anything malformed)."""
    if not isinstance(token, str) or not token.startswith(VERSION + ":"):
        return None
    kid = token[len(VERSION) + 1:].partition(":")[0]
    return kid if _KEY_ID.fullmatch(kid) else None


def is_current(token: str) -> bool:
    """Is `token` sealed with the current key (nothing for a rotation to do)? Says nothing about whether it opens."""
    return key_id_of(token) == current_key_id()


def encrypt_bytes(data: bytes, *, associated_data: str) -> str:
    """Seal bytes for storage with the current key; `associated_data` binds the value to its purpose and row (it is
    not stored)."""
    kid, keys = keyring()
    nonce = os.urandom(_NONCE_BYTES)
    sealed = AESGCM(keys[kid]).encrypt(nonce, data, _aad(associated_data, kid))
    return f"{VERSION}:{kid}:" + base64.urlsafe_b64encode(nonce + sealed).decode()


def _blob(encoded: str) -> bytes:
    if not _URLSAFE_B64.fullmatch(encoded):  # urlsafe_b64decode alone would skip stray characters
        raise DecryptionError("sealed value is not valid base64")
    try:
        blob = base64.urlsafe_b64decode(encoded.encode())
    except (binascii.Error, ValueError):
        raise DecryptionError("sealed value is not valid base64") from None
    if len(blob) < _NONCE_BYTES + _TAG_BYTES:
        raise DecryptionError("sealed value is truncated")
    return blob


def _open(key: bytes, blob: bytes, aad: bytes) -> bytes:
    return AESGCM(key).decrypt(blob[:_NONCE_BYTES], blob[_NONCE_BYTES:], aad)


def decrypt_bytes(token: str, *, associated_data: str) -> bytes:
    """Open a value sealed by encrypt_bytes with the same associated data, or raise DecryptionError. A v2 value opens
    only with the key its id names; a v1 value with the current key, else any old key. Never a plaintext fallback."""
    if not is_sealed(token):
        raise DecryptionError("not a sealed value (unknown format or version)")
    current, keys = keyring()
    if token.startswith(VERSION + ":"):
        kid, sep, encoded = token[len(VERSION) + 1:].partition(":")
        if not sep or not _KEY_ID.fullmatch(kid):
            raise DecryptionError("sealed value has a malformed key id")
        if kid not in keys:
            raise DecryptionError(f"sealed with key id {kid}, which is neither GOCLAW_ENCRYPTION_KEY nor listed in "
                                  "GOCLAW_ENCRYPTION_OLD_KEYS")
        blob = _blob(encoded)
        try:
            return _open(keys[kid], blob, _aad(associated_data, kid))
        except InvalidTag:
            raise DecryptionError(f"sealed value does not open with key {kid} and this associated data "
                                  "(tampered with, or it belongs to another row or field)") from None
    blob = _blob(token[len(LEGACY_VERSION) + 1:])
    aad = _aad(associated_data, None)
    for kid in (current, *(k for k in keys if k != current)):
        try:
            return _open(keys[kid], blob, aad)
        except InvalidTag:
            continue
    raise DecryptionError("v1 sealed value does not open with any configured key and this associated data")


def reseal(token: str, *, associated_data: str) -> str:
    """`token` sealed again with the current key (same bytes, same associated data, fresh nonce): what a key
    rotation writes back. DecryptionError when it does not open."""
    return encrypt_bytes(decrypt_bytes(token, associated_data=associated_data), associated_data=associated_data)


def encrypt_json(value: Any, *, associated_data: str) -> str:
    """Seal a JSON-serialisable value (canonical JSON: sorted keys, no extra spaces)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return encrypt_bytes(text.encode(), associated_data=associated_data)


def decrypt_json(token: str, *, associated_data: str) -> Any:
    try:
        return json.loads(decrypt_bytes(token, associated_data=associated_data).decode())
    except ValueError:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise DecryptionError("sealed value is not JSON") from None
