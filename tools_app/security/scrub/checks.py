"""Value checks shared by the detectors.

Pure functions over strings: is a value a placeholder, code, a word, a path;
how random does it look.  Kept apart from the detector table so that a new
detector reuses them instead of growing its own variants.
"""
from __future__ import annotations

import re

_AUTH_SCHEMES = frozenset(
    "bearer basic token bot jwt apikey api-key key sso-key negotiate ntlm digest aws4-hmac-sha256 hmac oauth "
    "ssws flyv1 splunk pat private-token zoho-oauthtoken".split()
)
_URL_AUTH_RE = re.compile(r"[^\s/@?#\"'<>\[\]]*\Z")
# Sentry DSN: a 32-hex public key as the URL user, and a Sentry host or the
# DSN's /<project id> path
_SENTRY_KEY_RE = re.compile(r"[0-9a-f]{32}\Z")
_SENTRY_HOST_RE = re.compile(r"[A-Za-z0-9.-]*(?:sentry[A-Za-z0-9.-]*(?![A-Za-z0-9.-])|(?::[0-9]+)?/(?:[A-Za-z0-9._-]+/)*[0-9]+(?![A-Za-z0-9._/-]))")
_UNKNOWN_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_-]{1,30}[ \t]+([A-Za-z0-9._~+/=:-]{16,4096})")
_PEM_END_RE = re.compile(r"-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----")
_PEM_TRUNC_RE = re.compile(
    r"[ \t]*(?:(?:\r?\n|\\r\\n|\\n)[ \t]*(?:[A-Za-z0-9+/=]{1,128}|(?:Proc-Type|DEK-Info|Comment|Version):[^\n\\]*)?)*"
)

# ---------------------------------------------------------------------------
# Validators
# ---------------------------------------------------------------------------
_STOPWORDS = frozenset(
    """
    true false yes no on off none null nil undefined nan empty blank missing unset
    required optional string str bytes int integer number float bool boolean object
    array list dict map any text secret secrets password passwords passwd token tokens
    key keys value values hidden masked redacted removed omitted censored sensitive
    example sample test dummy placeholder default unknown invalid expired revoked
    env environ variable your_token your_password your_api_key xxx tbd todo na
    """.split()
)
_NON_SECRET_SUFFIX = frozenset(
    """
    count type types name names length len size limit limits ttl expiry expires expiresin
    expires_in expires_at expiration expire url uri urls endpoint path file filename files
    dir directory version format usage kind mode field fields prefix hint label ref refs
    index idx column param header headers env var vars min max policy rotation enabled
    required store manager provider backend class id ids arn location source status
    age lifetime timeout duration algorithm algo alg scheme strength hash_algorithm
    """.split()
)
# names in which the bare word "key" is not a credential
_KEY_NONSECRET_QUALIFIERS = (
    "public", "pub", "sort", "primary", "foreign", "partition", "cache", "idempotency",
    "lookup", "routing", "row", "shard", "index", "unique", "object", "dict", "map",
    "group", "hash", "range", "composite", "natural", "surrogate", "join", "order",
    "hot", "short", "translation", "i18n", "react", "item", "list", "s3", "bucket",
    "foreign", "dedupe", "dedup", "sharding", "grouping", "fingerprint", "kms", "host",
)
_KEY_SECRET_QUALIFIERS = (
    "api", "secret", "access", "private", "priv", "signing", "sign", "encryption", "encrypt",
    "crypt", "master", "auth", "client", "license", "licence", "webhook", "hmac", "jwt",
    "session", "storage", "account", "subscription", "service", "app", "admin", "root",
    "ssh", "gpg", "pgp", "bot", "consumer", "shared", "deploy", "cipher", "aes", "x-api",
    "openai", "anthropic", "stripe", "aws", "azure", "gcp", "google", "github", "gitlab",
    "slack", "twilio", "sendgrid", "mailgun", "datadog", "dd", "sentry", "algolia",
)

_NETRC_RE = re.compile(r"(?:^|\s)(?:machine|login|account)[ \t]+\S+\s+\Z")
# letters-only passwords: a single lowercase letter between capitals, or
# many case changes (camelCase identifiers have few)
_RANDOM_CASE_RE = re.compile(r"[A-Z][a-z][A-Z]|(?:[a-z]+[A-Z]+){3}[a-z]")
_CODE_CHAIN_RE = re.compile(r"[A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)+\Z")
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_WORDY_RE = re.compile(r"[A-Za-z]+(?:[_\-. ][A-Za-z]+)*\Z")
_SEGMENTED_WORDS_RE = re.compile(r"[A-Za-z]+[0-9]{0,2}(?:[_\-.][A-Za-z]+[0-9]{0,2})+\Z")
_EMAIL_RE = re.compile(r"[^@\s]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+\Z")
_NUMBERISH_RE = re.compile(r"[0-9][0-9.,:_+-]*\Z")
_CAMEL_TYPE_RE = re.compile(r"[A-Z][a-z]+(?:[A-Z][a-z]+)+[0-9]?\Z")
_MASK_RE = re.compile(r"([*xX•#.\-_?])\1{2,}\Z|\*+.*|.*\*{3,}.*")
_PATH_RE = re.compile(r"(?:/|~/|\./|\.\./|[A-Za-z]:\\|\\\\)")


def _char_classes(v: str) -> int:
    lo = up = di = sy = 0
    for ch in v:
        if "a" <= ch <= "z":
            lo = 1
        elif "A" <= ch <= "Z":
            up = 1
        elif "0" <= ch <= "9":
            di = 1
        else:
            sy = 1
    return lo + up + di + sy


def _is_placeholder(v: str) -> bool:
    if not v:
        return True
    c = v[0]
    if c in "$%<{[(*":
        # $VAR ${VAR} %(x)s %VAR% <your-token> {{ x }} [REDACTED] (hidden) ***
        return True
    if c in "!@#" and (len(v) < 8 or v[1:2].isalpha()):
        return True  # !vault, @Value, #comment (but "!2fA9x..." may be a password)
    low = v.lower()
    if low in _STOPWORDS or "redacted" in low:
        return True
    if "your" in low and ("-" in v or "_" in v or " " in v):
        return True  # your-api-key-here, YOUR_TOKEN
    if _MASK_RE.match(v):
        return True
    if low.startswith(("changeit-", "replace", "insert", "enter-", "example", "<")):
        return True
    return False


def _looks_code(v: str, following: str) -> bool:
    if following[:1] in ("(", "[", "."):
        return True
    if _CODE_CHAIN_RE.match(v):
        return True
    if v.endswith(("()", ")")):
        return True
    return False


def _value_ok(v: str, cls: str, quoted: bool) -> bool:
    """Does ``v`` look like a real credential literal for key class ``cls``?"""
    if _is_placeholder(v):
        return False
    if "://" in v or _EMAIL_RE.match(v):
        return False
    if _PATH_RE.match(v):
        return False
    n = len(v)
    if _NUMBERISH_RE.match(v):
        return v.isdigit() and n >= 16
    if any(ch.isspace() for ch in v):
        if cls != "pass" or v.count(" ") > 3 or v.rstrip().endswith((".", "!", "?", ":")):
            return False
        return n >= 8
    if not quoted and _IDENT_RE.match(v) and (v.isupper() or v.islower()) and "_" in v:
        return False  # CONSTANT_NAME / snake_case variable
    if _CAMEL_TYPE_RE.match(v) and n < 24:
        return False  # SecretStr, HttpUrl ...
    if _SEGMENTED_WORDS_RE.match(v):
        return False  # my-secret-v2, db_creds_prod
    classes = _char_classes(v)
    if cls == "pass":
        if n < 6:
            return False
        if _WORDY_RE.match(v):
            return (n >= 8 and v.islower()) or (n >= 10 and v.isalpha() and bool(_RANDOM_CASE_RE.search(v)))
        return True
    if n < 8:
        return False
    if _WORDY_RE.match(v):
        # letters only: only long random-looking mixed case counts
        return n >= 20 and classes >= 2
    return classes >= 2 or n >= 20



def _left_ok(text: str, start: int) -> bool:
    return start <= 0 or not (text[start - 1].isalnum())


def _class_of(ch: str) -> int:
    if "a" <= ch <= "z":
        return 1
    if "A" <= ch <= "Z":
        return 2
    if "0" <= ch <= "9":
        return 3
    return 0


def random_looking(token: str) -> bool:
    """Does ``token`` hold a key body: an unbroken run of 20 or more letters
    and digits with both kinds in it?  Words, kebab-case names
    (``task-proj-2024-planning-notes``) and UUIDs (``task-3f9a2c1e-7b4d-…``,
    runs of at most 12) do not; random key bodies of that length do."""
    run = 0
    letter = digit = False
    for ch in token:
        cls = _class_of(ch)
        if not cls:
            run = 0
            letter = digit = False
            continue
        run += 1
        if cls == 3:
            digit = True
        else:
            letter = True
        if run >= 20 and letter and digit:
            return True
    return False


def glued_ok(text: str, start: int, end: int, mode: str | None) -> bool:
    """May the token ``text[start:end]`` be redacted although a letter or
    digit comes right before it (``helloask-proj-…``, ``aAKIA…``)?  ``mode``
    is the detector's ``glued`` option: ``free`` (its prefix and shape are
    distinctive enough on their own), ``random`` (only when the token holds
    a key body, so ``task-proj-2024-planning-notes`` and ``task-<uuid>``
    stay), else never."""
    if start <= 0 or not text[start - 1].isalnum():
        return True
    if mode == "free":
        return True
    if mode == "random":
        return random_looking(text[start:end])
    return False



_B64_LINE_RE = re.compile(r"[A-Za-z0-9+/=]{40,}\Z")


def _in_base64_block(text: str, s: int, e: int) -> bool:
    """Is text[s:e] alone on its line, next to a base64 or PEM armor line?"""
    ls = text.rfind("\n", 0, s) + 1  # start of the token's line
    le = text.find("\n", e)
    le = len(text) if le < 0 else le  # end of the token's line
    if text[ls:s].strip() or text[e:le].strip():
        return False
    prev_line = text[text.rfind("\n", 0, ls - 1) + 1:ls - 1] if ls else ""
    nl = text.find("\n", le + 1)
    next_line = text[le + 1:len(text) if nl < 0 else nl] if le < len(text) else ""
    return any(
        _B64_LINE_RE.match(x) or x.startswith("-----") for x in (prev_line.strip(), next_line.strip())
    )


def _token_like(v: str) -> bool:
    """A random-looking credential (not a word, path or URL)."""
    return (
        len(v) >= 16 and _char_classes(v) >= 2 and any(c.isdigit() for c in v)
        and not _WORDY_RE.match(v) and not _SEGMENTED_WORDS_RE.match(v) and "://" not in v
        and not _is_placeholder(v)
    )

