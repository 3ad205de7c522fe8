"""Redaction strategies: given a detector's match, validate it and append
the span(s) to redact.  A detector names one of these in its record; most
formats use ``token`` (the whole match) or ``value_group`` (only the
``<name>v`` group, e.g. the secret path of a webhook URL)."""
from __future__ import annotations

import base64
import functools
import re

from .checks import (
    _AUTH_SCHEMES,
    _CAMEL_TYPE_RE,
    _IDENT_RE,
    _KEY_NONSECRET_QUALIFIERS,
    _KEY_SECRET_QUALIFIERS,
    _NETRC_RE,
    _NON_SECRET_SUFFIX,
    _PATH_RE,
    _PEM_END_RE,
    _PEM_TRUNC_RE,
    _SEGMENTED_WORDS_RE,
    _SENTRY_HOST_RE,
    _SENTRY_KEY_RE,
    _STOPWORDS,
    _UNKNOWN_SCHEME_RE,
    _URL_AUTH_RE,
    _WORDY_RE,
    _char_classes,
    _in_base64_block,
    _is_placeholder,
    _left_ok,
    _looks_code,
    _token_like,
    _value_ok,
    glued_ok,
)


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
        parts = re.split(r"[_\-.]|(?<=[a-z0-9])(?=[A-Z])", suf)
        while len(parts) > 1 and parts[-1].isdigit():
            parts.pop()  # Key-File-3 -> file
        last = parts[-1].lower()
        if last in _NON_SECRET_SUFFIX:
            return False
    nstart = _key_name_start(text, kstart)
    name = text[nstart:m.start(g + "suf") + len(suf)]
    lname = name.lower()
    if m.group(g + "ws") is not None:
        # whitespace separated: only for command line flags (--password xyz)
        # and .netrc entries (machine h login u password xyz)
        if not name.startswith("-") and not (
            cls == "pass" and _NETRC_RE.search(text, max(0, nstart - 300), nstart)
        ):
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



# ---------------------------------------------------------------------------
# Strategies (signature: text, match, detector, candidate position, out)
# ---------------------------------------------------------------------------
def key_value(text, m, d, s, out):
    """``<name> = value`` where the name contains the keyword; the detector's
    ``options['cls']`` (secret / token / key / pass) picks the value rules."""
    g = d.name
    if g == "kpass":
        # password / passwd => back to 'p' of 'pass'; pwd => back 1
        kstart = s - 4 if text[s - 4:s].lower() == "pass" else s - 1
    else:
        kstart = s - d.back
    if g == "kpass2" and kstart > 0:
        prev = text[kstart - 1]
        # allowed: DB_PASS, PGPASS, dbPass; rejected: bypass, compass
        if prev.isalpha() and not text[kstart].isupper():
            return
    _kv_spans(text, m, g, d.options["cls"], kstart, out)


def url_password(text, m, d, s, out):
    """scheme://user:pass@host: the password (found from the '@', rarer than
    ':'); a Sentry DSN's 32-hex key."""
    i = text.rfind("://", max(0, s - 400), s)
    if i < 0:
        return
    auth = text[i + 3:s]
    c = auth.find(":")
    if c < 0 and _SENTRY_KEY_RE.match(auth) and _SENTRY_HOST_RE.match(text, s + 1):
        out.append((i + 3, s))  # Sentry DSN https://<key>@o1.ingest.sentry.io/2
        return
    if c < 0 or not _URL_AUTH_RE.match(auth):
        return
    ps = i + 3 + c + 1
    pw = text[ps:s]
    if not pw or _is_placeholder(pw) or pw.lower() in ("password", "pass", "passwd", "secret", "pwd", "token"):
        return
    out.append((ps, s))


def pem_block(text, m, d, s, out):
    """The whole block up to its END line, or to the end of a truncated body."""
    st = s - d.back
    e = m.end()
    em = _PEM_END_RE.search(text, e)
    if em is not None:
        out.append((st, em.end()))
        return
    tm = _PEM_TRUNC_RE.match(text, e)
    out.append((st, tm.end() if tm else e))


def authorization(text, m, d, s, out):
    """Authorization header value; a known scheme word is kept."""
    v = m.group("kauthzv")
    if _is_placeholder(v) and not (m.group("kauthzs") and len(v) >= 8 and v[0] not in "$<{"):
        return
    vs, ve = m.span("kauthzv")
    if v[-1] == "=" and text[ve:ve + 1] == '"' and v[:-1].isalpha():
        return  # an auth-param (realm="api"), not a credential
    scheme = (m.group("kauthzs") or "").strip().lower()
    if not scheme:
        # an unknown scheme word followed by a credential: keep the word
        um = _UNKNOWN_SCHEME_RE.match(text, vs)
        if um is not None and _token_like(um.group(1)):
            out.append(um.span(1))
            return
        if v.lower() in _STOPWORDS or v.lower() in _AUTH_SCHEMES:
            return
    if scheme in ("digest", "aws4-hmac-sha256", "hmac", "oauth"):
        nl = text.find("\n", vs)
        ve = len(text) if nl < 0 else nl
        while ve > vs and text[ve - 1] in " \t\r\"',":
            ve -= 1
    out.append((vs, ve))


def bearer(text, m, d, s, out):
    v = m.group("bearerv")
    if _is_placeholder(v) or _WORDY_RE.match(v) or (_char_classes(v) < 2 and len(v) < 20):
        return
    out.append(m.span("bearerv"))


def cookie(text, m, d, s, out):
    """A Cookie header whose pairs include a long non-word value."""
    if not _left_ok(text, s - 3):
        return
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
        return
    off = vs + val.index(":") + 1
    while off < ve and text[off] in " \t":
        off += 1
    while ve > off and text[ve - 1] in " \t\r\"'":
        ve -= 1
    out.append((off, ve))


def value_group(text, m, d, s, out):
    """Only the ``<name>v`` group (the secret part of a longer match)."""
    out.append(m.span(d.name + "v"))


def quoted_value(text, m, d, s, out):
    """The ``<name>v`` group without its quotes, unless it is a placeholder
    or code."""
    vs, ve = m.span(d.name + "v")
    if text[vs] in "'\"":
        vs, ve = vs + 1, ve - 1
    v = text[vs:ve]
    if d.options.get("left") == "alnum" and not _left_ok(text, s - d.back):
        return
    if len(v) < 3 or _is_placeholder(v) or _looks_code(v, ""):
        return
    out.append((vs, ve))


def docker_auth(text, m, d, s, out):
    """base64(user:password) in a docker config."""
    vs, ve = m.span(d.name + "v")
    try:
        raw = base64.b64decode(text[vs:ve] + "=" * (-(ve - vs) % 4), validate=True)
    except ValueError:
        return
    if b":" not in raw:
        return
    out.append((vs, ve))


def aws_key(text, m, d, s, out):
    """An access key id, and the secret when it directly follows (also glued
    to a preceding letter or digit: see ``glued_ok``)."""
    st = s - d.back
    if not glued_ok(text, st, m.end(d.name), d.options.get("glued")):
        return
    if m.group("awssec") is None:
        out.append((st, m.end(d.name)))
    else:
        out.append((st, st + 20))
        out.append(m.span("awssec"))


def telegram(text, m, d, s, out):
    """<8-10 digits>:AA…: the digits are found backwards from the ':'. The shape is distinctive, so the token is
    found glued to what precedes it too (the Bot API's own URLs read ``api.telegram.org/bot<token>/…``): a letter
    before the digits stays, a longer run of digits goes whole (where the bot id starts can't be told)."""
    c = s - 1  # the ':'
    j = c
    while j > 0 and text[j - 1].isdigit():
        j -= 1
    if c - j < 8 or not glued_ok(text, j, m.end(), d.options.get("glued")):
        return
    out.append((j, m.end()))


def twilio_sid(text, m, d, s, out):
    """AC + 32 hex is only a credential near twilio / sid / account."""
    st = s - d.back
    ctx = text[max(0, s - 200):s].lower()
    if not ("twilio" in ctx or "sid" in ctx or "account" in ctx):
        return
    if not _left_ok(text, st):
        return
    out.append((st, m.end()))


def token(text, m, d, s, out):
    """The whole match, when it passes the detector's ``check`` and does not
    continue a longer word, unless the detector's ``glued`` option lets its
    distinctive prefix start right after a letter or digit (``aghp_…``): then
    the token is redacted from its prefix on and the letters before it stay."""
    st = s - d.back
    e = m.end()
    glued = d.options.get("glued")
    if d.options.get("left") == "word" and st > 0 and text[st - 1] in "_-" and glued != "free":
        return
    if not glued_ok(text, st, e, glued):
        return
    if d.check is not None and not d.check(text, s, e):
        return
    out.append((st, e))


# ---------------------------------------------------------------------------
# Token checks (text, candidate position, end)
# ---------------------------------------------------------------------------
def has_digit(text: str, s: int, e: int) -> bool:
    """Random bodies of these lengths virtually always contain a digit, so
    identifiers (``secret_`` + a long word) are not matched."""
    return any(c.isdigit() for c in text[s:e])


def sk_body(text: str, s: int, e: int) -> bool:
    body = text[s + 1:e]
    return any(c.isdigit() for c in body) and not _SEGMENTED_WORDS_RE.match(body)


def digit_not_base64_line(text: str, s: int, e: int) -> bool:
    """Bare formats without a separator (EAA…, LTAI…, AKID…) could also be a
    line of a wrapped base64 block (certificate, PGP key): not when the
    neighbouring line is base64 too."""
    return has_digit(text, s, e) and not (_char_classes(text[s:e]) < 3 or _in_base64_block(text, s, e))


# ---------------------------------------------------------------------------
# P7: fields whose NAME says they hold a credential
# ---------------------------------------------------------------------------
# last name segment -> class; "key" needs a secret qualifier before it
_CRED_WORDS = {
    "password": "pass", "passwd": "pass", "pwd": "pass", "passphrase": "pass", "pass": "pass",
    "secret": "secret", "token": "token", "credential": "secret", "credentials": "secret",
    "dsn": "dsn", "apikey": "secret", "key": "key",
}
# a run of lowercase letters ending in one of these is one too (dbpassword,
# accesstoken, clientsecret); "pass" and "key" must be whole segments
_CRED_ENDINGS = ("password", "passwd", "secret", "token", "apikey")
_SEG_SPLIT_RE = re.compile(r"[_\-.:$]+|(?<=[a-z0-9])(?=[A-Z])")
_NON_CRED_PREFIX = frozenset("next prev previous page continuation cursor sync max num total csrf_param".split())
# values that name a mode, not a credential (fetch credentials: "include")
_MODE_WORDS = frozenset("include omit same-origin inherit auto manual prompt file env vault".split())
_TYPED_WORDS_RE = re.compile(r"(?:string|str|bytes|int|bool|secret|secretstr|optional|any)\Z", re.IGNORECASE)


@functools.lru_cache(maxsize=4096)
def credential_name(name: str) -> str | None:
    """The credential class of a field name (its last segment), or None.

    ``VIRTUAL_*`` names (GoClaw's virtual credentials) are credentials,
    except Python's ``VIRTUAL_ENV`` / ``VIRTUAL_ENV_PROMPT``."""
    bare = name.lstrip("-$@")
    if bare[:8].upper() == "VIRTUAL_" and len(bare) > 8:
        return None if bare.upper() in ("VIRTUAL_ENV", "VIRTUAL_ENV_PROMPT") else "secret"
    segs = [p for p in _SEG_SPLIT_RE.split(bare) if p]
    while len(segs) > 1 and segs[-1].isdigit():
        segs.pop()
    if not segs:
        return None
    low = [p.lower() for p in segs]
    last = low[-1]
    cls = _CRED_WORDS.get(last)
    if cls is None and segs[-1].islower() or cls is None and segs[-1].isupper():
        cls = next((_CRED_WORDS[w] for w in _CRED_ENDINGS if last.endswith(w)), None)
    if cls is None:
        return None
    before = low[:-1]
    if before and before[-1] in _NON_CRED_PREFIX:
        return None
    if cls == "key":
        if not before or any(q in p for p in before for q in _KEY_NONSECRET_QUALIFIERS):
            return None
        if not any(p.startswith(q) or p.endswith(q) for p in before for q in _KEY_SECRET_QUALIFIERS):
            return None
        return "secret"
    if last == "pass" and not before and not segs[-1].isupper():
        return None  # "pass: 3" (test counts); PASS= and DB_PASS= are kept
    return cls


def literal_ok(v: str, cls: str, quoted: bool, following: str = "", shell: bool = False) -> bool:
    """Is ``v`` a literal value (not a placeholder, reference or code)?  The
    field's name already says it is a credential, so its shape is not judged.
    ``shell``: an unquoted ``NAME=value`` of an upper-case name (shell, .env),
    where even an identifier-like value is a literal."""
    if len(v) < 3 or v != v.strip() or _is_placeholder(v):
        return False
    low = v.lower()
    if low in _MODE_WORDS or "{{" in v or "${" in v or "%(" in v:
        return False
    if v.isdigit() and len(v) < 4:
        return False
    if _PATH_RE.match(v):
        return False  # a file reference (and PWD=/srv/app is a directory)
    if not quoted:
        if v[0] in "-&*|>!" or _looks_code(v, following) or _TYPED_WORDS_RE.match(v):
            return False
        if shell:
            return True  # NAME=value in a shell or .env file: a literal
        if _CAMEL_TYPE_RE.match(v) or (
            _IDENT_RE.match(v) and not any(c.isdigit() for c in v)
            and ("_" in v or re.search(r"[a-z][A-Z]", v))
        ):
            return False  # a type or a variable, not a literal
    elif cls != "pass" and " " in v.strip() and len(v.split()) > 3:
        return False  # prose, not a token
    return True


_NUMBER_SUFFIX_RE = re.compile(r"[_.-]?[0-9]{1,3}\Z")


def _rest_of_line_empty(text: str, e: int) -> bool:
    nl = text.find("\n", e)
    rest = text[e:len(text) if nl < 0 else nl]
    return not rest.strip(" \t\r,") or rest.lstrip(" \t").startswith("#")


def named_value(text, m, d, s, out):
    """``<credential name> <op> <literal>``: the literal, whatever its shape.

    Groups: ``<name>suf`` (rest of the name), ``<name>op`` (operator),
    ``<name>v`` (value, maybe quoted).  Unquoted values after ``:`` or after
    an operator followed by a space must end the line (YAML, .properties),
    so prose such as ``Password: enter it below`` is not a field."""
    g = d.name
    suf = m.group(g + "suf")
    if suf and not _NUMBER_SUFFIX_RE.match(suf) and text[s:s + 8].lower() != "virtual_":
        return  # the keyword must end the name: SECRET_KEY is found at KEY
    vs, ve = m.span(g + "v")
    raw = text[vs:ve]
    quoted = raw[:1] in "\"'`" and len(raw) >= 2 and raw[-1] == raw[0]
    if g == "typed_decl" and not quoted:
        return  # a typed declaration assigns a string literal
    if not quoted:
        if text[ve:ve + 1] in ("(", "[", ".") or ve - vs > 63:
            return  # code (get_token(), os.environ["X"]); long bare values are left to the shape detectors
        spaced = text[m.end(g + "op"):vs] != ""
        if (spaced or m.group(g + "op") == ":") and not _rest_of_line_empty(text, ve):
            return
    nstart = _key_name_start(text, s)
    if nstart > 0 and text[nstart - 1] == "$":
        nstart -= 1
    if text.endswith("://", 0, nstart):
        return  # scheme://name:value@host is a URL's user info ("url" detector)
    name = text[nstart:m.end(g + "suf")]
    cls = credential_name(name)
    if cls is None:
        return
    v = raw[1:-1] if quoted else raw
    shell = not quoted and name.isupper() and m.group(g + "op") == "=" and m.end(g + "op") == vs
    if not literal_ok(v, cls, quoted, text[ve:ve + 1], shell):
        return
    if quoted:
        vs, ve = vs + 1, ve - 1
    out.append((vs, ve))


def named_pair(text, m, d, s, out):
    """A credential name and its value in two places: XML ``key="…"
    value="…"``, ``<password>…</password>``, call arguments
    ``setProperty("X_TOKEN", "…")`` and ``env["API_KEY"] = "…"``."""
    g = d.name
    if m.group(g + "n") is None:
        g += "2"  # the second form of the pattern (call_arg: subscript)
    name = m.group(g + "n")
    cls = credential_name(name.rsplit(":", 1)[-1])
    if cls is None:
        return
    vs, ve = m.span(g + "v")
    v = text[vs:ve]
    if v.lower().replace(" ", "").replace("_", "") == name.lower().replace("_", "").replace("-", ""):
        return  # ("password", "Password"): a label, not a value
    if not literal_ok(v.strip(), cls, True):
        return
    if " " in v and cls != "pass":
        return
    out.append((vs, ve))


def flag_value(text, m, d, s, out):
    """The value of a password flag or positional credential on a command
    line, quotes stripped; ``$VAR`` references and prompts are not values."""
    vs, ve = m.span(d.name + "v")
    if ve - vs >= 2 and text[vs] in "'\"" and text[ve - 1] == text[vs]:
        vs, ve = vs + 1, ve - 1
    v = text[vs:ve]
    if d.options.get("left") == "alnum" and not _left_ok(text, s):
        return
    if len(v) < 3 or _is_placeholder(v) or v.startswith("-") or v.lower() in _MODE_WORDS:
        return
    not_after = d.options.get("not_after")
    if not_after is not None and not_after.search(text, text.rfind("\n", 0, s) + 1, s):
        return
    out.append((vs, ve))


_CONNSTR_KEY_RE = re.compile(
    r"(?i)(?:^|[;\"'\s])(?:server|data source|host|hostname|address|addr|uid|user id|user|username|database|"
    r"initial catalog|driver|dsn|provider|port|sslmode|trusted_connection|encrypt)[ \t]*="
)


def connection_string_password(text, m, d, s, out):
    """``Password=…`` / ``Pwd=…`` inside an ODBC / ADO.NET / JDBC-style
    ``key=value;`` string: the value, which may contain spaces or be
    ``{braced}``."""
    if s > 0 and (text[s - 1].isalnum() or text[s - 1] in "_"):
        return
    vs, ve = m.span(d.name + "v")
    if not text[max(0, s - 9):s].rstrip(" \t").endswith(";"):
        return  # not an item of a key=value; list
    ls = max(text.rfind("\n", 0, s) + 1, s - 400)
    le = text.find("\n", s)
    le = len(text) if le < 0 else min(le, s + 400)
    if not _CONNSTR_KEY_RE.search(text, ls, le):
        return
    if text[vs:vs + 1] in "{\"'" and ve - vs >= 2:
        vs, ve = vs + 1, ve - 1
    while ve > vs and text[ve - 1] in " \t\r\"'":
        ve -= 1
    v = text[vs:ve]
    if not v or _is_placeholder(v) or "{{" in v or _PATH_RE.match(v):
        return  # PWD=/srv/app in a sudo log line is a directory
    out.append((vs, ve))


_DOC_SEP_RE = re.compile(r"^---[ \t]*$", re.MULTILINE)
_YAML_KEY_RE = re.compile(r"([ \t]*)([^\s:#][^:\n]*?):(?:[ \t]+(.*?))?[ \t]*\r?$", re.MULTILINE)
_JSON_DATA_RE = re.compile(r"\"(?:data|stringData)\"[ \t\r\n]*:[ \t\r\n]*\{([^{}]*)\}")
_JSON_VALUE_RE = re.compile(r"\"[^\"\n]+\"[ \t\r\n]*:[ \t\r\n]*\"([^\"\n]+)\"")


def kubernetes_secret(text, m, d, s, out):
    """Every value under ``data:`` / ``stringData:`` of the Secret manifest
    whose ``kind: Secret`` line matched (YAML, or ``kubectl -o json``):
    in a Secret every value is a credential, whatever its key."""
    if text[m.start():m.end()].startswith('"'):
        lo, hi = max(0, s - 4000), min(len(text), s + 4000)
        for jm in _JSON_DATA_RE.finditer(text, lo, hi):
            for vm in _JSON_VALUE_RE.finditer(text, jm.start(1), jm.end(1)):
                if not _is_placeholder(vm.group(1)):
                    out.append(vm.span(1))
        return
    # the YAML document around the match
    ds = 0
    for sep in _DOC_SEP_RE.finditer(text, 0, s):
        ds = sep.end()
    nxt = _DOC_SEP_RE.search(text, s)
    de = nxt.start() if nxt else len(text)
    ls = text.rfind("\n", 0, s) + 1
    col = s - ls  # column of "kind"
    pos = ds
    block_indent = None  # inside data:/stringData: when set
    multiline_indent = None
    while pos < de:
        nl = text.find("\n", pos, de)
        le = de if nl < 0 else nl
        line = text[pos:le]
        stripped = line.lstrip(" \t-")
        indent = len(line) - len(stripped)
        if multiline_indent is not None:
            if stripped.strip() and indent > multiline_indent:
                out.append((pos + indent, le))
                pos = le + 1
                continue
            multiline_indent = None
        if stripped.strip():
            if block_indent is not None and indent <= block_indent:
                block_indent = None
            if block_indent is None:
                if indent == col and re.match(r"(?:data|stringData):[ \t]*\r?$", stripped):
                    block_indent = indent
            else:
                km = _YAML_KEY_RE.match(line)
                if km is not None and km.group(3):
                    v = km.group(3)
                    vs = pos + km.start(3)
                    if v[:1] in "|>":
                        multiline_indent = indent
                    elif not _is_placeholder(v.strip("\"'")):
                        if v[:1] in "\"'" and len(v) >= 2 and v[-1] == v[0]:
                            out.append((vs + 1, vs + len(v) - 1))
                        else:
                            out.append((vs, vs + len(v)))
        pos = le + 1


def net_use_password(text, m, d, s, out):
    """``net use`` takes the password positionally, before or after /user:."""
    g = "net_usev" if m.group("net_usev") is not None else "net_usev2"
    vs, ve = m.span(g)
    if text[vs] == '"':
        vs, ve = vs + 1, ve - 1
    v = text[vs:ve]
    if len(v) < 3 or _is_placeholder(v) or v == "*":
        return
    out.append((vs, ve))
