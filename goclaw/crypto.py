"""Values kept encrypted at rest: AES-256-GCM with the key from settings.GOCLAW_ENCRYPTION_KEY.

A sealed value is text, `v1:<urlsafe base64 of 12-byte nonce + ciphertext + 16-byte tag>`: a fresh random nonce per
value, and associated data that names what the value is and which row it belongs to (e.g.
`tools_app.pendingchange.arguments:<uuid>`), so a sealed value copied into another row or column fails to open.
The `v1` prefix names the format and key; a later key rotation adds `v2` and keeps reading `v1`.
"""
from __future__ import annotations

import base64
import binascii
import json
import os
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

__all__ = ["DecryptionError", "encrypt_bytes", "decrypt_bytes", "encrypt_json", "decrypt_json", "is_sealed"]

VERSION = "v1"
_NONCE_BYTES = 12


class DecryptionError(Exception):
    """A sealed value could not be opened: wrong key, wrong associated data, tampered with, or not a sealed value."""


def _key() -> bytes:
    raw = settings.GOCLAW_ENCRYPTION_KEY
    try:
        key = base64.b64decode(raw + "=" * (-len(raw) % 4), altchars=b"-_" if ("-" in raw or "_" in raw) else None,
                               validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise ImproperlyConfigured("GOCLAW_ENCRYPTION_KEY must be the base64 encoding of 32 random bytes") from None
    if len(key) != 32:
        raise ImproperlyConfigured("GOCLAW_ENCRYPTION_KEY must be the base64 encoding of 32 random bytes (AES-256)")
    return key


def _aad(associated_data: str) -> bytes:
    if not associated_data:
        raise ValueError("associated data is required: name the purpose and the row the value belongs to")
    return associated_data.encode()


def is_sealed(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(VERSION + ":")


def encrypt_bytes(data: bytes, *, associated_data: str) -> str:
    """Seal bytes for storage; `associated_data` binds the value to its purpose and row (it is not stored)."""
    nonce = os.urandom(_NONCE_BYTES)
    sealed = AESGCM(_key()).encrypt(nonce, data, _aad(associated_data))
    return f"{VERSION}:" + base64.urlsafe_b64encode(nonce + sealed).decode()


def decrypt_bytes(token: str, *, associated_data: str) -> bytes:
    """Open a value sealed by encrypt_bytes with the same associated data, or raise DecryptionError."""
    if not is_sealed(token):
        raise DecryptionError("not a sealed value (unknown format or version)")
    try:
        blob = base64.urlsafe_b64decode(token[len(VERSION) + 1:].encode())
    except (binascii.Error, ValueError):
        raise DecryptionError("sealed value is not valid base64") from None
    if len(blob) < _NONCE_BYTES + 16:
        raise DecryptionError("sealed value is truncated")
    try:
        return AESGCM(_key()).decrypt(blob[:_NONCE_BYTES], blob[_NONCE_BYTES:], _aad(associated_data))
    except InvalidTag:
        raise DecryptionError("sealed value does not open with this key and associated data") from None


def encrypt_json(value: Any, *, associated_data: str) -> str:
    """Seal a JSON-serialisable value (canonical JSON: sorted keys, no extra spaces)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return encrypt_bytes(text.encode(), associated_data=associated_data)


def decrypt_json(token: str, *, associated_data: str) -> Any:
    try:
        return json.loads(decrypt_bytes(token, associated_data=associated_data).decode())
    except ValueError:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise DecryptionError("sealed value is not JSON") from None
