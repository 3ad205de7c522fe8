"""Credential scrubber for tool output and audit-logged tool arguments.

Public API::

    REDACTED = "[REDACTED]"
    scrubber = Scrubber(min_dynamic_length=6)
    scrubber.add_values([...])          # decrypted secrets injected at runtime
    text, n = scrubber.scrub(text)
    data, n = scrubber.scrub_data(obj)  # deep scrub of JSON-like data
    default_scrubber / scrub(text)

Design (see docs/scrubbing.md):

* Static detectors live in ONE compiled regular expression.  Every top-level
  alternative starts with a *rare* character of its anchor (``k`` of ``sk-``,
  ``J`` of ``eyJ``, ``w`` of ``password``, ...) and checks the rest of the
  anchor with a fixed-width look-behind.  CPython's ``re`` then scans with a
  small first-character set, so ordinary text is skipped quickly in C.
  Python code only runs for real candidates, where validators reject
  placeholders, code expressions, words, paths, etc.
* Dynamic values are found with a pyahocorasick automaton keyed on a short
  gram of each value that starts with its rarest character (keeps the root
  of the trie small, which is what makes pyahocorasick fast), then verified
  with ``str.startswith``.  The automaton is rebuilt copy-on-write.
"""
from __future__ import annotations

import base64
import re
import threading
import urllib.parse
from typing import Any, Iterable

try:  # pragma: no cover - exercised implicitly
    import ahocorasick  # type: ignore
except Exception:  # pragma: no cover
    ahocorasick = None

__all__ = ["REDACTED", "Scrubber", "default_scrubber", "scrub", "scrub_text", "scrub_data"]

REDACTED = "[REDACTED]"

_T = "A-Za-z0-9_-"  # token alphabet (base64url-ish)

# ---------------------------------------------------------------------------
# Static pattern.  Each named group ``<name>`` marks where the anchor char
# sits; ``_BACK[name]`` says how many characters of the anchor precede it.
# ---------------------------------------------------------------------------

# Generic "sensitive key = value" tail.  Value forms: "dq", 'sq', unquoted.
_KV_TAIL = (
    r"(?P<{n}suf>[A-Za-z0-9_.-]{{0,40}})(?P<{n}q>[\"']?)"
    r"(?:[ \t]*(?:=>|:=|[:=])[ \t]*|(?P<{n}ws>[ \t]+)(?=[^\s\"']*[0-9A-Z]))"
    # values shorter than 6 chars and unquoted values followed by "(" or "["
    # (function calls, subscripts) are rejected inside the regex engine
    r"(?P<{n}v>\"(?:[^\"\\\n]|\\.){{6,512}}\"|'[^'\n]{{6,512}}'|(?>[^\s\"'`,;&<>(){{}}\[\]]{{6,512}})(?![(\[]))"
)


def _kv(name: str) -> str:
    return _KV_TAIL.format(n=name)


_ALTS: list[tuple[str, str, int]] = [
    # (group name, regex starting with the anchor char, back offset)
    # ---- ':' -------------------------------------------------------------
    # credentials in URLs are found from the '@' (rarer than ':'), the
    # scheme://user:pass part is checked in Python.
    ("url", r"@(?=[A-Za-z0-9\[])", 0),
    # Telegram bot token: <8-10 digits>:AA<33 chars>
    ("tg", rf"A(?<=[0-9]{{8}}:A)A[{_T}]{{33}}(?![{_T}])", 0),
    # ---- 'c' / 'C' : secret -----------------------------------------------
    ("ksecret", r"[cC](?<=(?i:sec))(?i:ret)" + _kv("ksecret"), 2),
    # ---- 'k' / 'K' ---------------------------------------------------------
    ("sk", rf"k(?<=sk)-[{_T}]{{20,}}", 1),
    ("stripe", r"k(?<=[sprSPR]k)_(?:live|test)_[A-Za-z0-9]{10,}", 1),
    ("mailgun", r"key-[0-9a-zA-Z]{32}(?![0-9A-Za-z])", 0),
    ("slackhook", r"k(?<=hook)s\.slack\.com/(?:services|workflows|triggers)/(?P<slackhookv>[A-Za-z0-9_/-]{10,})", 3),
    ("ktoken", r"[kK](?<=(?i:to)[kK])(?i:en)" + _kv("ktoken"), 2),
    ("kcookie", r"[kK](?<=(?i:coo)[kK])(?i:ie)(?P<kcookiev>[ \t]*:[ \t]*[^\n]{1,4096})", 3),
    ("kkey", r"[kK](?i:ey)" + _kv("kkey"), 0),
    # ---- 'w' / 'W' : password / passwd / pwd ------------------------------
    ("kpass", r"[wW](?:(?<=(?i:passw))(?i:ord|d)|(?<=(?i:pw))(?i:d))" + _kv("kpass"), -1),
    # bare "pass" as the end of a key name (DB_PASS=, dbPass:, --pass)
    ("kpass2", r"[pP](?i:ass)(?![wW])" + _kv("kpass2"), 0),
    # ---- 'z' / 'Z' : authorization ----------------------------------------
    (
        "kauthz",
        r"[zZ](?<=(?i:authori)[zZ])(?i:ation)[\"']?[ \t]*[:=][ \t]*[\"']?"
        r"(?P<kauthzs>(?i:bearer|basic|token|bot|jwt|apikey|api-key|key|sso-key|negotiate|ntlm|digest|aws4-hmac-sha256|hmac|oauth)[ \t]+)?"
        r"(?P<kauthzv>[^\s\"'<>]{1,4096})",
        7,
    ),
    # ---- 'B' : Bearer, PEM -------------------------------------------------
    ("bearer", r"B(?:earer|EARER)[ \t]+(?P<bearerv>[A-Za-z0-9._~+/=-]{8,4096})", 0),
    ("pem", r"B(?<=-----B)EGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----", 5),
    # ---- 'g' -------------------------------------------------------------
    ("gh", r"_(?<=gh[pousr]_)[A-Za-z0-9]{36,255}(?![A-Za-z0-9])", 3),
    ("ghpat", r"_(?<=github_pat_)[A-Za-z0-9_]{50,255}", 10),
    ("gitlab", rf"gl(?:pat|dt|rt|ptt|ft|cbt|oas|imt|soat|ffct|agent|sa|wt)-[A-Za-z0-9_.-]{{20,}}", 0),
    ("sas", r"g(?<=[?&;]sig)=(?P<sasv>[A-Za-z0-9%+/=]{16,})", 2),
    # ---- 'G' -------------------------------------------------------------
    ("gcp", rf"GOCSPX-[{_T}]{{20,}}", 0),
    ("glrunner", rf"GR1348941[{_T}]{{20,}}", 0),
    # ---- 'A' -------------------------------------------------------------
    (
        "aws",
        r"A(?:KIA|SIA|BIA|CCA|3T[A-Z0-9])[A-Z0-9]{16}(?![A-Za-z0-9])"
        r"(?:[ \t]*[,;:|=\t][ \t]*[\"']?(?P<awssec>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=]))?",
        0,
    ),
    ("gapi", rf"AIza[{_T}]{{35}}(?![{_T}])", 0),
    ("azure", r"AccountKey=(?P<azurev>[A-Za-z0-9+/=]{20,})", 0),
    ("pypi", rf"AgE(?<=pypi-AgE)[{_T}]{{40,}}", 5),
    ("twac", r"AC[0-9a-f]{32}(?![0-9A-Za-z])", 0),
    # ---- 'S' -------------------------------------------------------------
    ("sendgrid", rf"SG\.[{_T}]{{22}}\.[{_T}]{{43}}", 0),
    ("azsas", r"SharedAccessKey=(?P<azsasv>[A-Za-z0-9+/=]{20,})", 0),
    ("twsk", r"SK[0-9a-fA-F]{32}(?![0-9A-Za-z])", 0),
    # ---- 'x' -------------------------------------------------------------
    ("slack", r"x(?:ox[abposre]|app)-[A-Za-z0-9-]{10,}", 0),
    # ---- '_' -------------------------------------------------------------
    ("npm", r"_(?<=npm_)[A-Za-z0-9]{36}(?![A-Za-z0-9])", 3),
    ("hf", r"_(?<=hf_)[A-Za-z0-9]{30,40}(?![A-Za-z0-9])", 2),
    ("hforg", r"_(?<=api_org_)[A-Za-z0-9]{30,40}(?![A-Za-z0-9])", 7),
    ("shopify", r"_(?<=shp[a-z][a-z]_)[a-fA-F0-9]{32}(?![A-Za-z0-9])", 5),
    ("dop", r"_(?<=do[por]_)v1_[a-f0-9]{64}", 3),
    ("whsec", r"_(?<=whsec_)[A-Za-z0-9+/=]{20,}", 5),
    # ---- 'p' -------------------------------------------------------------
    ("databricks", r"p(?<=dap)i[a-f0-9]{32}(?:-[0-9]+)?(?![A-Za-z0-9])", 2),
    # ---- 'J' -------------------------------------------------------------
    ("jwt", rf"J(?<=eyJ)[{_T}]{{6,}}\.eyJ[{_T}]{{6,}}\.[{_T}]*", 2),
    # ---- 'y' -------------------------------------------------------------
    ("ya29", rf"ya29\.[{_T}]{{20,}}", 0),
    # ---- '/' -------------------------------------------------------------
    ("grefresh", rf"/(?<=1/)/0[{_T}]{{30,}}", 1),
    # ---- 'M' 'N' 'O' : Discord bot tokens ---------------------------------
    ("discord", rf"[MNO][{_T}]{{23,25}}\.[{_T}]{{6}}\.[{_T}]{{27,38}}(?![{_T}])", 0),
]

_BACK = {name: back for name, _, back in _ALTS}


def _static_parts() -> dict[str, list[str]]:
    # CPython's re only computes a first-character prefilter for an
    # alternation when EVERY branch starts with a plain literal, so split a
    # leading "[cC]" into one branch per character and mark each branch with
    # an empty group at its END (it is then ``m.lastgroup``).  Branches are
    # then factored by first character: sre tests top-level branches one by
    # one, so a ~25-way first-char dispatch beats a 60-way list.
    groups: dict[str, list[str]] = {}
    for name, rx, _ in _ALTS:
        m = re.match(r"\[([^\]\\^-]+)\]", rx)
        heads = list(m.group(1)) if m else [None]
        for i, h in enumerate(heads):
            body = rx if h is None else h + rx[m.end():]
            body = re.sub(r"\(\?P<(\w+)>", lambda mm: f"(?P<{mm.group(1)}__{i}>", body)
            groups.setdefault(body[0], []).append(f"{body[1:]}(?P<{name}__{i}>)")
    return groups


_STATIC_GROUPS = _static_parts()
# most frequent anchor characters first (cheaper dispatch)
_ANCHOR_ORDER = "c@pk_gwyxBAzSJGMONCKWZ/"


def _head_order(h: str) -> int:
    if h in _ANCHOR_ORDER:
        return _ANCHOR_ORDER.find(h)
    # dynamic-only heads: common characters first, rare ones last
    r = _RARITY.find(h) if "_RARITY" in globals() else -1
    return 1000 - r if r >= 0 else 5000


def _compile(dyn: dict[str, str] | None = None) -> re.Pattern:
    heads = set(_STATIC_GROUPS) | set(dyn or ())
    order = sorted(heads, key=_head_order)
    alts = []
    for k, h in enumerate(order):
        rests = list(_STATIC_GROUPS.get(h, ()))
        if dyn and h in dyn:
            rests.append(f"{dyn[h]}(?P<dyn__{k}>)")
        alts.append(re.escape(h) + (rests[0] if len(rests) == 1 else "(?:" + "|".join(rests) + ")"))
    return re.compile("|".join(alts))


_STATIC_RE = _compile()


def _trie_regex(words: Iterable[str]) -> str:
    trie: dict = {}
    for w in words:
        d = trie
        for ch in w:
            d = d.setdefault(ch, {})
        d[""] = None

    def emit(d: dict) -> str:
        alts = []
        opt = False
        for k in sorted(d):
            if k == "":
                opt = True
                continue
            alts.append(re.escape(k) + emit(d[k]))
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return f"(?:{body})?" if opt else body

    return emit(trie)


# Keyword back offsets depend on which keyword matched (password vs pwd).
_AUTH_SCHEMES = frozenset(
    "bearer basic token bot jwt apikey api-key key sso-key negotiate ntlm digest aws4-hmac-sha256 hmac oauth".split()
)
_URL_AUTH_RE = re.compile(r"[^\s/@?#\"'<>\[\]]*\Z")
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
            return n >= 8 and v.islower()
        return True
    if n < 8:
        return False
    if _WORDY_RE.match(v):
        # letters only: only long random-looking mixed case counts
        return n >= 20 and classes >= 2
    return classes >= 2 or n >= 20


# ---------------------------------------------------------------------------
# Dynamic values
# ---------------------------------------------------------------------------
# Characters ordered from rarest to most common in typical tool output.
_RARITY = (
    "~^|\\`!$;#<>?&%+*{}()'"
    "QJXVYHMCPUFLDIERT"
    "KZWSBGONA"
    "zjqxvwkybgfhml"
    "@_/,=[]\".:-"
    "9876534210"
    "upcdnoristae "
)
_RANK = {c: i for i, c in enumerate(_RARITY)}
# anchor characters already scanned for by the static pattern: a dynamic
# gram starting with one of them adds no scanning cost
_HEADS = frozenset(_STATIC_GROUPS)
_GRAM = 8


def _anchor_gram(v: str, chosen: list[str] | tuple = ()) -> tuple[str, int]:
    """Pick a short gram of ``v`` that starts with a rare character,
    preferring characters already used as gram starts (``chosen``)."""
    n = len(v)
    best = None
    for i in range(0, max(1, n - 3)):
        ch = v[i]
        r = _RANK.get(ch, -1)  # non-ASCII / unlisted chars: treat as rarest
        if ch not in chosen:
            r += 1000
        if best is None or r < best[0]:
            best = (r, i)
    i = best[1] if best else 0
    return v[i:i + _GRAM], i


def _cover_chars(forms: Iterable[str]) -> frozenset:
    """Greedy set cover: few, rare characters such that every form contains
    one of them (at a position leaving >= 4 characters)."""
    elig = {}
    for f in forms:
        elig[f] = set(f[: max(1, len(f) - 3)])
    chosen: set[str] = set()
    remaining = set(elig)
    while remaining:
        cov: dict[str, int] = {}
        for f in remaining:
            for ch in elig[f]:
                cov[ch] = cov.get(ch, 0) + 1
        best = max(cov, key=lambda ch: cov[ch] * (1.0 - 0.6 * _RANK.get(ch, 0) / len(_RARITY)))
        chosen.add(best)
        remaining = {f for f in remaining if best not in elig[f]}
    return frozenset(chosen)


def _forms(value: str) -> set[str]:
    """The value plus its base64 (std/urlsafe, padding not required),
    URL-encoded (quote/quote_plus) and hex (lower/upper) encodings."""
    out = {value}
    raw = value.encode("utf-8")
    out.add(base64.b64encode(raw).decode().rstrip("="))
    out.add(base64.urlsafe_b64encode(raw).decode().rstrip("="))
    out.add(urllib.parse.quote(value, safe=""))
    out.add(urllib.parse.quote_plus(value))
    h = raw.hex()
    out.add(h)
    out.add(h.upper())
    return out


class _Dyn:
    """Immutable snapshot: dynamic values + the combined compiled pattern.

    Every encoded form is indexed by one short gram that starts at its
    rarest character (a small trie root keeps pyahocorasick fast); a second
    linear pass with the automaton finds grams, candidates are verified with
    ``str.startswith``.  Without pyahocorasick the grams are merged into the
    static regex as a trie alternation instead.
    """

    __slots__ = ("values", "forms", "table", "pattern", "dyn_re", "automaton")

    def __init__(self, values: frozenset, min_len: int):
        self.values = values
        self.table: dict[str, list[tuple[str, int]]] = {}
        self.pattern = _STATIC_RE
        self.dyn_re = None
        self.automaton = None
        forms: set[str] = set()
        for v in values:
            forms.update(f for f in _forms(v) if len(f) >= min_len)
        self.forms = frozenset(forms)
        if not forms:
            return
        table = self.table
        # pyahocorasick searches a node's children linearly, so the scan speed
        # depends on how many distinct first characters the grams have: pick
        # grams greedily from a small set of rare characters (set cover).
        chosen = _cover_chars(forms)
        for f in forms:
            gram, off = _anchor_gram(f, chosen)
            table.setdefault(gram, []).append((f, off))
        for lst in table.values():
            lst.sort(key=lambda t: -len(t[0]))
        if ahocorasick is not None:
            # measured: a second pyahocorasick pass is cheaper than merging
            # ~5,000 grams into the static regex (every extra first
            # character widens the regex prefilter's character set)
            a = ahocorasick.Automaton()
            for gram in table:
                a.add_word(gram, gram)
            a.make_automaton()
            self.automaton = a
            return
        by_head: dict[str, list[str]] = {}  # pragma: no cover - fallback
        for gram in table:
            by_head.setdefault(gram[0], []).append(gram[1:])
        dyn_src = {h: _trie_regex(rests) for h, rests in by_head.items()}
        self.pattern = _compile(dyn_src)
        self.dyn_re = re.compile("|".join(re.escape(h) + src for h, src in dyn_src.items()))

    def verify(self, text: str, gstart: int, gram: str, out: list) -> bool:
        """Check the forms registered under ``gram`` (and its prefixes)."""
        table = self.table
        found = False
        for k in range(len(gram), 0, -1):
            lst = table.get(gram[:k])
            if not lst:
                continue
            for form, off in lst:
                s = gstart - off
                if s >= 0 and text.startswith(form, s):
                    out.append((s, s + len(form)))
                    found = True
                    break
        return found

    def at(self, text: str, pos: int, out: list) -> None:
        """Dynamic check at one position (used after a static hit there)."""
        if self.dyn_re is not None:
            m = self.dyn_re.match(text, pos)
            if m is not None:
                self.verify(text, pos, m.group(), out)

    def ac_spans(self, text: str, out: list) -> None:
        if self.automaton is None:
            return
        for end, gram in self.automaton.iter(text):
            self.verify(text, end - len(gram) + 1, gram, out)


# ---------------------------------------------------------------------------
# Scrubber
# ---------------------------------------------------------------------------
_DATA_KEY_RE = re.compile(
    r"(?i)(pass(?:word|wd|phrase)?|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|"
    r"client[_-]?secret|authorization|auth|credentials?|cookie|session(?:[_-]?id|[_-]?key)?|"
    r"signature|dsn|conn(?:ection)?[_-]?str(?:ing)?|x[_-]api[_-]key)"
)
_DATA_KEY_NONSECRET = re.compile(
    r"(?i)(?:^|[_\-.])(?:count|type|name|length|len|size|limit|ttl|expiry|expires(?:_?in|_?at)?|"
    r"url|uri|endpoint|path|file|dir|version|format|usage|kind|mode|id|ids|enabled|required|"
    r"policy|method|provider|backend|hint|min|max|timeout|status)$|^(?:author|authors|authority|"
    r"tokenizer|tokens|max_tokens|session_timeout|passed|password_reset_url)$"
)


def _data_key_sensitive(key: str) -> bool:
    m = _DATA_KEY_RE.search(key)
    if not m:
        return False
    if _DATA_KEY_NONSECRET.search(key):
        return False
    kl = key.lower()
    # short words must be a whole segment (author, oauth_provider, passenger,
    # bypass... are fine)
    word = m.group(1).lower()
    if word in ("auth", "pass", "pwd"):
        s, e = m.span(1)
        before = key[s - 1:s]
        after = key[e:e + 1]
        if (before and before.isalnum() and not key[s].isupper()) or (after and after.isalpha() and not after.isupper()):
            return False
    if kl in ("tokens", "max_tokens", "token_count", "input_tokens", "output_tokens", "total_tokens"):
        return False
    return True


class Scrubber:
    def __init__(self, *, min_dynamic_length: int = 6):
        self.min_dynamic_length = int(min_dynamic_length)
        self._lock = threading.Lock()
        self._dyn = _Dyn(frozenset(), self.min_dynamic_length)

    # -- dynamic values ------------------------------------------------------
    def _rebuild(self, values: frozenset) -> None:
        # build outside of readers' view, then swap the reference (atomic)
        self._dyn = _Dyn(values, self.min_dynamic_length)

    def add_values(self, values: Iterable[str]) -> None:
        if isinstance(values, str):
            values = [values]
        new = {str(v) for v in values if v is not None and len(str(v)) >= self.min_dynamic_length}
        with self._lock:
            cur = self._dyn.values
            if new <= cur:
                return
            self._rebuild(cur | new)

    def remove_values(self, values: Iterable[str]) -> None:
        if isinstance(values, str):
            values = [values]
        rm = {str(v) for v in values if v is not None}
        with self._lock:
            cur = self._dyn.values
            if not (rm & cur):
                return
            self._rebuild(cur - rm)

    def clear_values(self) -> None:
        with self._lock:
            self._rebuild(frozenset())

    # -- text ----------------------------------------------------------------
    def scrub(self, text: str) -> tuple[str, int]:
        if not isinstance(text, str):
            text = str(text)
        if not text:
            return text, 0
        dyn = self._dyn  # snapshot (copy-on-write)
        spans = _scan(text, dyn)
        if not spans:
            return text, 0
        spans.sort()
        out = []
        pos = 0
        count = 0
        cur_s, cur_e = spans[0]
        for s, e in spans[1:]:
            if s < cur_e:  # overlapping -> merge
                if e > cur_e:
                    cur_e = e
                continue
            out.append(text[pos:cur_s])
            out.append(REDACTED)
            count += 1
            pos = cur_e
            cur_s, cur_e = s, e
        out.append(text[pos:cur_s])
        out.append(REDACTED)
        count += 1
        out.append(text[cur_e:])
        return "".join(out), count

    def scrub_text(self, text: str) -> str:
        return self.scrub(text)[0]

    # -- structured data -----------------------------------------------------
    def scrub_data(self, obj: Any) -> tuple[Any, int]:
        counter = [0]
        result = self._scrub_obj(obj, counter, 0)
        return result, counter[0]

    def _scrub_obj(self, obj: Any, counter: list, depth: int) -> Any:
        if depth > 100:
            return obj
        if isinstance(obj, str):
            s, n = self.scrub(obj)
            counter[0] += n
            return s
        if isinstance(obj, dict):
            out = {}
            for k, v in obj.items():
                if isinstance(k, str) and _data_key_sensitive(k) and _sensitive_scalar(v):
                    out[k] = REDACTED
                    counter[0] += 1
                else:
                    out[k] = self._scrub_obj(v, counter, depth + 1)
            return out
        if isinstance(obj, list):
            return [self._scrub_obj(v, counter, depth + 1) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self._scrub_obj(v, counter, depth + 1) for v in obj)
        return obj


def _sensitive_scalar(v: Any) -> bool:
    if isinstance(v, bool) or v is None:
        return False
    if isinstance(v, (int, float)):
        return True
    if isinstance(v, str):
        s = v.strip()
        if not s or s == REDACTED:
            return False
        return True
    return False


# ---------------------------------------------------------------------------
# Static matching
# ---------------------------------------------------------------------------
def _alnum_at(text: str, i: int) -> bool:
    return i >= 0 and i < len(text) and text[i].isalnum()


def _key_name_start(text: str, i: int) -> int:
    j = i
    lim = max(0, i - 64)
    while j > lim and (text[j - 1].isalnum() or text[j - 1] in "_-."):
        j -= 1
    return j


def _kv_spans(text: str, m: re.Match, g: str, cls: str, kstart: int, out: list) -> bool:
    """Validate a key/value candidate; append the value span if it is a secret."""
    vs, ve = m.span(g + "v")
    raw = text[vs:ve]
    suf = m.group(g + "suf") or ""
    kw_end = m.start(g + "suf")
    # --- key name checks ---------------------------------------------------
    if suf:
        c0 = suf[0]
        if c0 in "_-.":
            pass
        elif c0.isupper() and text[kw_end - 1].islower():
            pass  # camelCase: apiKeyValue, secretAccessKey
        else:
            return False  # tokenizer, keyboard, secretary, passwords
        last = re.split(r"[_\-.]|(?<=[a-z0-9])(?=[A-Z])", suf)[-1].lower()
        if last in _NON_SECRET_SUFFIX:
            return False
    nstart = _key_name_start(text, kstart)
    name = text[nstart:m.start(g + "suf") + len(suf)]
    lname = name.lower()
    if m.group(g + "ws") is not None:
        # whitespace separated: only for command line flags (--password xyz)
        if not name.startswith("-"):
            return False
    if cls == "key":
        prefix = lname[: kstart - nstart].strip("_-.")
        if prefix.startswith("--"):
            prefix = prefix[2:]
        if kstart > nstart:
            prev = text[kstart - 1]
            if prev.isalnum() and not (prev.islower() or prev.isdigit()) and text[kstart].isupper():
                return False  # MONKEY
            if prev.isalnum() and text[kstart].islower() and not lname[: kstart - nstart].endswith(
                ("api", "secret", "access", "private", "master", "signing", "encryption", "license", "app", "client", "account")
            ):
                return False  # monkey, turkey, hotkey
        if any(q in prefix for q in _KEY_NONSECRET_QUALIFIERS):
            return False
        strong = not any(q in lname for q in _KEY_SECRET_QUALIFIERS)
    else:
        strong = False
    if cls == "token":
        if re.search(r"(?:^|[_\-.])(?:next|prev|previous|page|continuation|cursor|sync|csrf_?param|max|num|input|output|total)[_\-.]?$", lname[: kstart - nstart]) or lname.startswith(("max", "num")):
            return False
    # --- value checks -------------------------------------------------------
    quoted = raw[:1] in ("'", '"')
    v = raw[1:-1] if quoted else raw
    if quoted and "\\" in v:
        pass
    following = text[ve:ve + 1]
    if not quoted and _looks_code(v, following):
        return False
    if not _value_ok(v, cls, quoted):
        return False
    if strong:
        # bare "key": demand a random-looking value
        if len(v) < 16 or _char_classes(v) < 2 or " " in v:
            return False
    if quoted:
        vs += 1
        ve -= 1
    out.append((vs, ve))
    return True


_KV_GROUPS = {"ksecret": "secret", "ktoken": "token", "kkey": "key", "kpass": "pass", "kpass2": "pass"}


def _scan(text: str, dyn: "_Dyn") -> list[tuple[int, int]]:
    """One pass of the combined pattern; returns spans to redact."""
    out: list[tuple[int, int]] = []
    search = dyn.pattern.search
    has_dyn = dyn.dyn_re is not None
    pos = 0
    n = len(text)
    while pos < n:
        m = search(text, pos)
        if m is None:
            break
        g, _, idx = m.lastgroup.rpartition("__")
        s = m.start()
        if g == "dyn":
            dyn.verify(text, s, m.group(), out)
        else:
            _handle(text, _M(m, "__" + idx), g, s, m.end(), out)
            if has_dyn:
                dyn.at(text, s, out)
        # continue right after the anchor: overlapping candidates (a dynamic
        # value straddling a static match, nested tokens) are still seen;
        # overlapping spans are merged afterwards.
        pos = s + 1
    if dyn.automaton is not None:
        dyn.ac_spans(text, out)
    return out


class _M:
    """Match adapter: maps inner group names to their per-branch copies."""

    __slots__ = ("m", "sfx")

    def __init__(self, m, sfx):
        self.m = m
        self.sfx = sfx

    def _n(self, name):
        return name + self.sfx if isinstance(name, str) else name

    def group(self, name=0):
        return self.m.group(self._n(name))

    def span(self, name=0):
        return self.m.span(self._n(name))

    def start(self, name=0):
        return self.m.start(self._n(name))

    def end(self, name=0):
        return self.m.end(self._n(name))


def _left_ok(text: str, start: int) -> bool:
    return start <= 0 or not (text[start - 1].isalnum())


def _handle(text: str, m: re.Match, g: str, s: int, e: int, out: list):
    if g in _KV_GROUPS:
        cls = _KV_GROUPS[g]
        if g == "kpass":
            # password / passwd => back to 'p' of 'pass'; pwd => back 1
            kstart = s - 4 if text[s - 4:s].lower() == "pass" else s - 1
        else:
            kstart = s - _BACK[g]
        if g == "kpass2" and kstart > 0:
            prev = text[kstart - 1]
            # allowed: DB_PASS, PGPASS, dbPass; rejected: bypass, compass
            if prev.isalpha() and not text[kstart].isupper():
                return False
        if _kv_spans(text, m, g, cls, kstart, out):
            return True
        return False
    st = s - _BACK.get(g, 0)
    if g == "url":
        # scheme://user:pass@host  -- find the scheme separator before '@'
        i = text.rfind("://", max(0, s - 400), s)
        if i < 0:
            return False
        auth = text[i + 3:s]
        c = auth.find(":")
        if c < 0 or not _URL_AUTH_RE.match(auth):
            return False
        ps = i + 3 + c + 1
        pw = text[ps:s]
        if not pw or _is_placeholder(pw) or pw.lower() in ("password", "pass", "passwd", "secret", "pwd", "token"):
            return False
        out.append((ps, s))
        return True
    if g == "pem":
        em = _PEM_END_RE.search(text, e)
        if em is not None:
            out.append((st, em.end()))
            return em.end()
        tm = _PEM_TRUNC_RE.match(text, e)
        end = tm.end() if tm else e
        out.append((st, end))
        return max(end, e)
    if g == "kauthz":
        v = m.group("kauthzv")
        if _is_placeholder(v) and not (m.group("kauthzs") and len(v) >= 8 and v[0] not in "$<{"):
            return False
        vs, ve = m.span("kauthzv")
        scheme = (m.group("kauthzs") or "").strip().lower()
        if not scheme and (v.lower() in _STOPWORDS or v.lower() in _AUTH_SCHEMES):
            return False
        if scheme in ("digest", "aws4-hmac-sha256", "hmac", "oauth"):
            nl = text.find("\n", vs)
            ve = len(text) if nl < 0 else nl
            while ve > vs and text[ve - 1] in " \t\r\"',":
                ve -= 1
        out.append((vs, ve))
        return ve
    if g == "bearer":
        v = m.group("bearerv")
        if _is_placeholder(v) or _WORDY_RE.match(v) or (_char_classes(v) < 2 and len(v) < 20):
            return False
        out.append(m.span("bearerv"))
        return True
    if g == "kcookie":
        if not _left_ok(text, s - 3):
            return False
        vs, ve = m.span("kcookiev")
        val = text[vs:ve]
        body = val.split(":", 1)[1]
        secretish = False
        for part in body.split(";"):
            if "=" in part:
                pv = part.split("=", 1)[1].strip()
                if len(pv) >= 16 and not _WORDY_RE.match(pv):
                    secretish = True
                    break
        if not secretish:
            return False
        off = vs + val.index(":") + 1
        while off < ve and text[off] in " \t":
            off += 1
        while ve > off and text[ve - 1] in " \t\r\"'":
            ve -= 1
        out.append((off, ve))
        return ve
    if g in ("slackhook", "sas", "azure", "azsas"):
        out.append(m.span(g + "v"))
        return True
    if g == "aws":
        if not _left_ok(text, st):
            return False
        out.append((st, m.end(g) if m.group("awssec") is None else m.start("awssec")))
        if m.group("awssec") is not None:
            out[-1] = (st, st + 20)
            out.append(m.span("awssec"))
        return True
    if g == "tg":
        c = s - 1  # the ':'
        j = c
        while j > 0 and text[j - 1].isdigit():
            j -= 1
        if not (8 <= c - j <= 10) or (j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_-:.")):
            return False
        out.append((j, e))
        return True
    if g == "twac":
        ctx = text[max(0, s - 200):s].lower()
        if not ("twilio" in ctx or "sid" in ctx or "account" in ctx):
            return False
        if not _left_ok(text, st):
            return False
        out.append((st, e))
        return True
    # plain token detectors
    if not _left_ok(text, st) and g not in ("jwt",):
        return False
    if g == "jwt" and st > 0 and (text[st - 1].isalnum() or text[st - 1] in "_-"):
        return False
    if g == "sk":
        body = text[s + 1:e]
        if not any(c.isdigit() for c in body) or _SEGMENTED_WORDS_RE.match(body):
            return False
    if g == "discord" and not any(c.isdigit() for c in text[s:e]):
        return False
    out.append((st, e))
    return True


default_scrubber = Scrubber()


def scrub(text: str) -> tuple[str, int]:
    return default_scrubber.scrub(text)


def scrub_text(text: str) -> str:
    return default_scrubber.scrub(text)[0]


def scrub_data(obj: Any) -> tuple[Any, int]:
    return default_scrubber.scrub_data(obj)
