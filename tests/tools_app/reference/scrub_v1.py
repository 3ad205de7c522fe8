"""FROZEN REFERENCE -- the pre-restructure (P7) implementation of
tools_app/security/scrub.py, kept verbatim (only this paragraph was added).
It exists only for the differential test
(tests/tools_app/test_scrub_differential.py), which checks that the
restructured package redacts exactly what this did, apart from the classes
P7 widened on purpose.  Tests only; delete it together with the differential
test once it is no longer useful.

Original module docstring:

Credential scrubber for tool output and audit-logged tool arguments.

Public API::

    REDACTED = "[REDACTED]"
    scrubber = Scrubber(min_dynamic_length=6)
    scrubber.add_values([...])          # decrypted secrets injected at runtime
    text, n = scrubber.scrub(text)
    data, n = scrubber.scrub_data(obj)  # deep scrub of JSON-like data
    default_scrubber / scrub(text)

Design (see docs/scrubbing.md):

* Hyperscan prefilter.  One Hyperscan pass over the text finds every place
  where a static detector *could* match: for each detector a necessary
  condition (its literal anchor, usually with a short fixed tail) is compiled
  into one database.  Hyperscan scans at GB/s in C, so text with no
  candidates costs only that pass.
* Exact verification.  The detectors themselves are one Python regular
  expression (an alternation tried in ``_ALTS`` order).  It is matched only at
  the candidate positions, against the whole text, so look-behinds, the PEM
  END marker search and the other handlers see exactly what they saw when the
  regex scanned every position.  The prefilter only has to be a superset.
* Two tiers.  ``_ALTS_EXT`` (formats added later) is a second regex, tried
  only at positions its own prefilter expressions propose and only when
  ``_ALTS`` does not match there: the same result as the combined
  ``_STATIC_RE``, without making every failing keyword candidate pay for it.
* Dynamic values (and their encodings) are literals in a second Hyperscan
  database, rebuilt copy-on-write; hits are confirmed with ``str.startswith``.
* Hyperscan scans bytes.  The text is projected to one byte per character
  (non-ASCII -> ``?``, except characters that case-fold to an ASCII letter),
  so offsets are character offsets.
"""
from __future__ import annotations

import base64
import re
import threading
import urllib.parse
from typing import Any, Iterable

import hyperscan

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
        r"(?P<kauthzs>(?i:bearer|basic|token|bot|jwt|apikey|api-key|key|sso-key|negotiate|ntlm|digest|aws4-hmac-sha256|hmac|oauth|ssws|flyv1|splunk|pat|private-token|zoho-oauthtoken)[ \t]+)?"
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
    # ---- '-' : command-line basic auth (curl/wget/httpie -u user:pass, --user user:pass); numeric uid:gid is not a secret ----
    ("curlu", r"-(?:u|-user)(?:[ \t]+|=)[\"']?[^\s:\"'@/]{1,128}:(?P<curluv>(?![0-9]+(?![^\s\"']))[^\s\"']{6,256})", 0),
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

# Second tier: formats added later (docs/scrubbing.md, "Second tier").  They
# come after every _ALTS alternative in _STATIC_RE, but _scan tries them only
# at positions proposed by their own prefilter expressions (_PREFILTER_*_EXT),
# so the keyword candidates that fail _ALTS (``token = get_token()``) do not
# pay for them.  Each starts at its first character (back offset 0).
_ALTS_EXT: list[tuple[str, str, int]] = [
    ("square", rf"sq0(?:atp|csp)-[{_T}]{{22,}}", 0),
    # Square EAAA (64) and Facebook EAA… (100+) access tokens; see _B64_GUARD
    ("eaa", rf"EAA[A-Za-z0-9_-]{{61,}}(?![A-Za-z0-9_+/=-])", 0),
    ("braintree", r"access_token\$(?:production|sandbox)\$[0-9a-z]{16}\$[0-9a-f]{32}", 0),
    ("atlassian", rf"(?:AT(?:ATT|CTT)3x[A-Za-z0-9_=-]{{40,}}|ATBB[A-Za-z0-9]{{32}}(?![A-Za-z0-9]))", 0),
    ("linear", r"lin_(?:api|oauth)_[A-Za-z0-9]{40,64}(?![A-Za-z0-9])", 0),
    ("notion", r"(?:secret_[A-Za-z0-9]{43}|ntn_[A-Za-z0-9]{40,50})(?![A-Za-z0-9_])", 0),
    ("vercel", r"vc[pikar]_[A-Za-z0-9]{24,}(?![A-Za-z0-9_])", 0),
    ("supabase", rf"(?:sbp_(?:v0_)?[a-f0-9]{{40}}|sb_secret_[{_T}]{{20,}})(?![A-Za-z0-9])", 0),
    ("doppler", r"dp\.(?:pt|st|ct|sa|scim|audit)\.(?:[a-z0-9_-]{2,35}\.)?[A-Za-z0-9]{40,44}(?![A-Za-z0-9])", 0),
    ("age", r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}", 0),
    ("vault", rf"hv[sbr]\.[{_T}]{{24,}}", 0),
    ("tfc", rf"[A-Za-z0-9]{{14}}\.atlasv1\.[A-Za-z0-9_=-]{{60,}}", 0),
    ("grafana", r"(?:glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|glc_[A-Za-z0-9+/]{32,}={0,2}|eyJrIjoi[A-Za-z0-9+/]{40,}={0,2})", 0),
    ("postman", r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}", 0),
    ("dockerhub", rf"dckr_(?:pat|oat)_[{_T}]{{27,}}", 0),
    ("fly", r"(?:fo1_[A-Za-z0-9_-]{43}|fm[12][ar]?_[A-Za-z0-9+/]{40,}={0,2}(?:,fm[12][ar]?_[A-Za-z0-9+/]+={0,2})*)", 0),
    ("fcm", rf"AAAA[{_T}]{{7}}:APA91b[{_T}]{{100,}}", 0),
    ("alibaba", r"LTAI[A-Za-z0-9]{12,20}(?![A-Za-z0-9])", 0),
    ("tencent", r"AKID[A-Za-z0-9]{32}(?![A-Za-z0-9])", 0),
    ("heroku", rf"HRKU-AA[{_T}]{{58}}", 0),
    ("sentrytok", r"(?:sntrys_eyJ[A-Za-z0-9+/=_]{40,}|sntryu_[a-f0-9]{64})", 0),
    ("mailchimp", r"[0-9a-f]{32}-us[0-9]{1,2}(?![A-Za-z0-9])", 0),
    ("onepassword", r"(?:ops_eyJ[A-Za-z0-9+/]{100,}={0,3}|A3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5})", 0),
    ("airtable", r"pat[A-Za-z0-9]{14}\.[a-f0-9]{64}", 0),
    ("newrelic", r"NR(?:AK-[A-Z0-9]{27}|II-[A-Za-z0-9_-]{32})", 0),
    ("figma", r"figd_[A-Za-z0-9_-]{40}", 0),
    ("pulumi", r"pul-[a-f0-9]{40}(?![A-Za-z0-9])", 0),
    ("planetscale", r"pscale_(?:tkn|pw|oauth)_[A-Za-z0-9_.=-]{32,64}", 0),
    ("replicate", r"r8_[A-Za-z0-9]{37}(?![A-Za-z0-9])", 0),
    ("groq", r"gsk_[A-Za-z0-9]{52}(?![A-Za-z0-9])", 0),
    ("pplx", r"pplx-[A-Za-z0-9]{48}(?![A-Za-z0-9])", 0),
    ("xai", r"xai-[A-Za-z0-9]{80}(?![A-Za-z0-9])", 0),
    ("langsmith", r"lsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}", 0),
    ("buildkite", r"bkua_[a-f0-9]{40}", 0),
    ("tailscale", r"tskey-(?:auth|api|client|scim|webhook)-[A-Za-z0-9]{6,}-[A-Za-z0-9]{16,}", 0),
    ("render", r"rnd_[A-Za-z0-9]{32}(?![A-Za-z0-9])", 0),
    ("netlify", r"nfp_[A-Za-z0-9]{36}(?![A-Za-z0-9])", 0),
    ("dynatrace", r"dt0c01\.[A-Z0-9]{24}\.[A-Z0-9]{64}", 0),
    ("rubygems", r"rubygems_[a-f0-9]{48}", 0),
    ("mapbox", rf"sk\.eyJ[{_T}]{{20,}}\.[{_T}]{{20,}}", 0),
    ("nuget", r"oy2[a-z0-9]{43}(?![A-Za-z0-9])", 0),
    ("artifactory", r"(?:AKCp[A-Za-z0-9]{69}|cmVmdGtuOjAxOj[A-Za-z0-9]{40,})(?![A-Za-z0-9])", 0),
    ("dropbox", rf"sl\.(?:u\.)?[{_T}]{{130,}}", 0),
    ("plaid", r"access-(?:sandbox|development|production)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", 0),
    # ---- webhook URLs: only the secret path is redacted --------------------
    ("discordhook", r"discord(?:app)?\.com/api/webhooks/[0-9]{17,20}/(?P<discordhookv>[A-Za-z0-9_-]{60,})", 0),
    ("teamshook", r"webhook\.office\.com/webhookb2/(?P<teamshookv>[A-Za-z0-9@/_-]{40,})", 0),
    # ---- password hashes (crypt(3) formats, Django pbkdf2): whole hash ----
    (
        "pwhash",
        r"(?:\$(?:2[abxy]\$[0-9]{2}\$[./A-Za-z0-9]{53}"
        r"|argon2(?:id|i|d)\$v=[0-9]+\$m=[0-9]+,t=[0-9]+,p=[0-9]+\$[A-Za-z0-9+/]{8,}\$[A-Za-z0-9+/]{16,}"
        r"|[156]\$(?:rounds=[0-9]+\$)?[./A-Za-z0-9]{1,16}\$[./A-Za-z0-9]{22,86}"
        r"|apr1\$[./A-Za-z0-9]{1,8}\$[./A-Za-z0-9]{22}"
        r"|y\$[./A-Za-z0-9]+\$[./A-Za-z0-9]+\$[./A-Za-z0-9]{43})"
        r"|pbkdf2_sha(?:256|1)\$[0-9]+\$[A-Za-z0-9]+\$[A-Za-z0-9+/]{27,}={0,2})(?![./A-Za-z0-9])",
        0,
    ),
    # ---- credential files and command lines: only the value ---------------
    # ~/.docker/config.json "auth": base64(user:password), checked in _handle
    ("dockerauth", r"\"auth\"[ \t]*:[ \t]*\"(?P<dockerauthv>[A-Za-z0-9+/]{8,}={0,2})\"", 0),
    # base64 of a whole docker config ({"auths":...), e.g. .dockerconfigjson
    ("dockercfg", r"eyJhdXRocyI6[A-Za-z0-9+/]{20,}={0,2}", 0),
    # PuTTY .ppk: the base64 lines after "Private-Lines: N"
    (
        "putty",
        r"Private-Lines:[ \t]*[0-9]{1,4}[ \t]*(?:\r?\n|\\r\\n|\\n)"
        r"(?P<puttyv>[A-Za-z0-9+/=]{4,}(?![A-Za-z0-9+/=:-])(?:(?:\r?\n|\\r\\n|\\n)[A-Za-z0-9+/=]{4,}(?![A-Za-z0-9+/=:-]))*)",
        0,
    ),
    # Okta "SSWS <token>" (also outside an Authorization header)
    ("ssws", rf"SSWS[ \t]+(?P<sswsv>[{_T}]{{20,}})", 0),
    # mysql/mariadb -pPASSWORD (attached value; "-p" alone prompts)
    (
        "mysqlp",
        r"(?:mysql|mariadb)[a-z]*[ \t](?:[^\n|;&]{0,200}?[ \t])?-p"
        r"(?P<mysqlpv>'[^'\n]{1,256}'|\"[^\"\n]{1,256}\"|[^\s'\"]{1,256})",
        0,
    ),
    ("sshpass", r"sshpass(?:[ \t]+-[vh])*[ \t]+-p[ \t]*(?P<sshpassv>'[^'\n]{1,256}'|\"[^\"\n]{1,256}\"|[^\s'\"]{1,256})", 0),
]


_BACK = {name: back for name, _, back in _ALTS + _ALTS_EXT}

# One alternation, tried in _ALTS order; the wrapping group names the
# detector (``m.lastgroup``: the outer group closes last).
_STATIC_RE = re.compile("|".join(f"(?P<{name}>{rx})" for name, rx, _ in _ALTS + _ALTS_EXT))
# At one position, match(A|B) is match(A) or else match(B): _scan uses the
# two tiers separately (same group names, same result as _STATIC_RE).
_TIER1_RE = re.compile("|".join(f"(?P<{name}>{rx})" for name, rx, _ in _ALTS))
_TIER2_RE = re.compile("|".join(f"(?P<{name}>{rx})" for name, rx, _ in _ALTS_EXT))

# ---------------------------------------------------------------------------
# Prefilter.  For every detector, a Hyperscan expression that is a NECESSARY
# condition for it to match (for "url": for its handler to redact anything),
# plus where the detector's match then starts; _STATIC_RE.match is tried
# there.  It only has to be a superset: tests/tools_app/test_scrub.py checks
# it against trying every position.  The expressions run on the projected
# text (see _project), so negated classes must not exclude "?", which stands
# for any non-ASCII character.
# ---------------------------------------------------------------------------
_HT = "[A-Za-z0-9_-]"
# key/value tail: suffix, quote, then separator + a 6-char value, or
# whitespace + a word containing a digit or capital (see _KV_TAIL)
_KV_HS = (
    r"[A-Za-z0-9_.-]*[\"']?(?:[ \t]*(?:=>|:=|[:=])[ \t]*(?:[\"'][^\n]{6}|[^\s\"'`,;&<>(){}\[\]]{6})"
    r"|[ \t]+[^\s\"'0-9A-Z]*[0-9A-Z])"
)
# Fixed-length expressions: the detector starts ``d`` characters before the
# end of a hit, for each listed ``d``.
_PREFILTER_FIXED: list[tuple[str, tuple[int, ...]]] = [
    # url: scheme://user:pass@ -- the handler needs all of it; "@" is 2 back
    (r"://[^\s/@#\"'<>\[\]]*:[^\s/@#\"'<>\[\]]*@[A-Za-z0-9\[]", (2,)),
    (rf"[0-9]{{8}}:AA{_HT}{{33}}", (35,)),  # tg
    (rf"sk-{_HT}{{20}}", (22,)),  # sk
    (r"[sprSPR]k_(?:live|test)_[A-Za-z0-9]{10}", (17,)),  # stripe
    (r"key-[0-9a-zA-Z]{32}", (36,)),  # mailgun
    (r"hooks\.slack\.com/", (13,)),  # slackhook
    (r"(?i:authorization)", (6,)),  # kauthz
    (r"B(?:earer|EARER)[ \t]", (7,)),  # bearer
    (r"-----BEGIN", (5,)),  # pem
    (r"gh[pousr]_[A-Za-z0-9]{36}", (37,)),  # gh
    (r"github_pat_[A-Za-z0-9_]{50}", (51,)),  # ghpat
    # gitlab: prefixes of 2..5 letters after "gl"
    (r"gl(?:pat|dt|rt|ptt|ft|cbt|oas|imt|soat|ffct|agent|sa|wt)-[A-Za-z0-9_.-]{20}", (25, 26, 27, 28)),
    (r"[?&;]sig=[A-Za-z0-9%+/=]{16}", (18,)),  # sas
    (rf"GOCSPX-{_HT}{{20}}", (27,)),  # gcp
    (rf"GR1348941{_HT}{{20}}", (29,)),  # glrunner
    (r"A(?:KIA|SIA|BIA|CCA|3T[A-Z0-9])[A-Z0-9]{16}", (20,)),  # aws
    (rf"AIza{_HT}{{35}}", (39,)),  # gapi
    (r"AccountKey=[A-Za-z0-9+/=]{20}", (31,)),  # azure
    (rf"pypi-AgE{_HT}{{40}}", (43,)),  # pypi
    (r"AC[0-9a-f]{32}", (34,)),  # twac
    (rf"SG\.{_HT}{{22}}\.{_HT}{{43}}", (69,)),  # sendgrid
    (r"SharedAccessKey=[A-Za-z0-9+/=]{20}", (36,)),  # azsas
    (r"SK[0-9a-fA-F]{32}", (34,)),  # twsk
    (r"x(?:ox[abposre]|app)-[A-Za-z0-9-]{10}", (15,)),  # slack
    (r"npm_[A-Za-z0-9]{36}", (37,)),  # npm
    (r"hf_[A-Za-z0-9]{30}", (31,)),  # hf
    (r"api_org_[A-Za-z0-9]{30}", (31,)),  # hforg
    (r"shp[a-z][a-z]_[a-fA-F0-9]{32}", (33,)),  # shopify
    (r"do[por]_v1_[a-f0-9]{64}", (68,)),  # dop
    (r"whsec_[A-Za-z0-9+/=]{20}", (21,)),  # whsec
    (r"dapi[a-f0-9]{32}", (34,)),  # databricks
    (rf"eyJ{_HT}{{6}}", (7,)),  # jwt
    (rf"ya29\.{_HT}{{20}}", (25,)),  # ya29
    (rf"1//0{_HT}{{30}}", (33,)),  # grefresh
    # discord: [MNO] + 23..25 + "." + 6 + "." + 27
    (rf"[MNO]{_HT}{{23,25}}\.{_HT}{{6}}\.{_HT}{{27}}", (59, 60, 61)),
    (r"://[0-9a-f]{32}@[A-Za-z0-9]", (2,)),  # url: Sentry DSN key (no ":")
]
# Second tier (_ALTS_EXT): the detector starts at the start of the hit.
_PREFILTER_FIXED_EXT: list[tuple[str, tuple[int, ...]]] = [
    (rf"sq0(?:atp|csp)-{_HT}{{22}}", (29,)),  # square
    (r"EAA[A-Za-z0-9_-]{61}", (64,)),  # eaa
    (r"access_token\$production\$", (24,)),  # braintree
    (r"access_token\$sandbox\$", (21,)),  # braintree
    (r"AT(?:ATT|CTT)3x", (7,)),  # atlassian
    (r"ATBB[A-Za-z0-9]{32}", (36,)),  # atlassian (Bitbucket)
    (r"lin_api_[A-Za-z0-9]{40}", (48,)),  # linear
    (r"lin_oauth_[A-Za-z0-9]{40}", (50,)),  # linear
    (r"secret_[A-Za-z0-9]{43}", (50,)),  # notion
    (r"ntn_[A-Za-z0-9]{40}", (44,)),  # notion
    (r"vc[pikar]_[A-Za-z0-9]{24}", (28,)),  # vercel
    (r"sbp_[a-f0-9]{40}", (44,)),  # supabase
    (r"sbp_v0_[a-f0-9]{40}", (47,)),  # supabase
    (rf"sb_secret_{_HT}{{20}}", (30,)),  # supabase
    (r"dp\.(?:pt|st|ct|sa)\.", (6,)),  # doppler
    (r"dp\.scim\.", (8,)),  # doppler
    (r"dp\.audit\.", (9,)),  # doppler
    (r"AGE-SECRET-KEY-1", (16,)),  # age
    (rf"hv[sbr]\.{_HT}{{24}}", (28,)),  # vault
    (r"[A-Za-z0-9]{14}\.atlasv1\.", (23,)),  # tfc
    (r"glsa_", (5,)),  # grafana
    (r"glc_[A-Za-z0-9+/]{32}", (36,)),  # grafana
    (r"eyJrIjoi[A-Za-z0-9+/]{40}", (48,)),  # grafana (legacy API key)
    (r"PMAK-", (5,)),  # postman
    (r"dckr_(?:pat|oat)_", (9,)),  # dockerhub
    (rf"fo1_{_HT}{{43}}", (47,)),  # fly
    (r"fm[12]_[A-Za-z0-9+/]{40}", (44,)),  # fly
    (r"fm[12][ar]_[A-Za-z0-9+/]{40}", (45,)),  # fly
    (rf"AAAA{_HT}{{7}}:APA91b", (18,)),  # fcm
    (r"LTAI[A-Za-z0-9]{12}", (16,)),  # alibaba
    (r"AKID[A-Za-z0-9]{32}", (36,)),  # tencent
    (r"HRKU-AA", (7,)),  # heroku
    (r"sntrys_eyJ", (10,)),  # sentrytok
    (r"sntryu_[a-f0-9]{64}", (71,)),  # sentrytok
    (r"[0-9a-f]{32}-us[0-9]", (36,)),  # mailchimp
    (r"ops_eyJ", (7,)),  # onepassword
    (r"A3-[A-Z0-9]{6}-", (10,)),  # onepassword
    (r"pat[A-Za-z0-9]{14}\.", (18,)),  # airtable
    (r"NR(?:AK|II)-", (5,)),  # newrelic
    (r"figd_", (5,)),  # figma
    (r"pul-[a-f0-9]{40}", (44,)),  # pulumi
    (r"pscale_", (7,)),  # planetscale
    (r"r8_[A-Za-z0-9]{37}", (40,)),  # replicate
    (r"gsk_[A-Za-z0-9]{52}", (56,)),  # groq
    (r"pplx-[A-Za-z0-9]{48}", (53,)),  # pplx
    (r"xai-[A-Za-z0-9]{80}", (84,)),  # xai
    (r"lsv2_(?:pt|sk)_", (8,)),  # langsmith
    (r"bkua_[a-f0-9]{40}", (45,)),  # buildkite
    (r"tskey-", (6,)),  # tailscale
    (r"rnd_[A-Za-z0-9]{32}", (36,)),  # render
    (r"nfp_[A-Za-z0-9]{36}", (40,)),  # netlify
    (r"dt0c01\.", (7,)),  # dynatrace
    (r"rubygems_", (9,)),  # rubygems
    (r"sk\.eyJ", (6,)),  # mapbox
    (r"oy2[a-z0-9]{43}", (46,)),  # nuget
    (r"AKCp[A-Za-z0-9]{69}", (73,)),  # artifactory
    (r"cmVmdGtuOjAxOj", (14,)),  # artifactory
    (rf"sl\.{_HT}{{130}}", (133,)),  # dropbox
    (r"sl\.u\.", (5,)),  # dropbox
    (r"access-sandbox-", (15,)),  # plaid
    (r"access-development-", (19,)),  # plaid
    (r"access-production-", (18,)),  # plaid
    (r"discord\.com/api/webhooks/", (25,)),  # discordhook
    (r"discordapp\.com/api/webhooks/", (28,)),  # discordhook
    (r"webhook\.office\.com/webhookb2/", (29,)),  # teamshook
    (r"\$2[abxy]\$[0-9]{2}\$", (7,)),  # pwhash
    (r"\$argon2id\$v=", (12,)),  # pwhash
    (r"\$argon2[id]\$v=", (11,)),  # pwhash
    (r"\$[156y]\$", (3,)),  # pwhash
    (r"\$apr1\$", (6,)),  # pwhash
    (r"pbkdf2_sha256\$", (14,)),  # pwhash
    (r"pbkdf2_sha1\$", (12,)),  # pwhash
    (r"eyJhdXRocyI6[A-Za-z0-9+/]{20}", (32,)),  # dockercfg
    (r"Private-Lines:", (14,)),  # putty
    (r"SSWS[ \t]", (5,)),  # ssws
    (r"sshpass[ \t]", (8,)),  # sshpass
]
# Keyword detectors, which need an unbounded tail: (keyword, back, tail).
# Hyperscan reports the leftmost start of a hit, and every keyword occurrence
# in [start, end) is a candidate at +back (several may share one end).
_PREFILTER_KW: list[tuple[str, int, str]] = [
    ("(?i:secret)", 2, _KV_HS),  # ksecret
    ("(?i:token)", 2, _KV_HS),  # ktoken
    ("(?i:cookie)", 3, r"[ \t]*:[^\n]"),  # kcookie
    ("(?i:key)", 0, _KV_HS),  # kkey
    ("(?i:passw(?:or)?d)", 4, _KV_HS),  # kpass
    ("(?i:pwd)", 1, _KV_HS),  # kpass
    ("(?i:pass)", 0, _KV_HS),  # kpass2
    ("-(?:u|-user)", 0, r"(?:[ \t]+|=)[\"']?[^\s:\"'@/]+:[^\s\"']{6}"),  # curlu
]
_PREFILTER_KW_EXT: list[tuple[str, int, str]] = [
    ('"auth"', 0, r'[ \t]*:[ \t]*"[A-Za-z0-9+/]{8}'),  # dockerauth
    ("(?:mysql|mariadb)", 0, r"[a-z]*[ \t](?:[^\n|;&]*[ \t])?-p[^\s]"),  # mysqlp
]


class _Hs:
    """A compiled Hyperscan database plus a pool of scratch spaces.

    ``hs_scan`` releases the GIL, so concurrent scans need one scratch each;
    ``list.pop``/``append`` are atomic, so the pool needs no lock.
    """

    __slots__ = ("db", "_pool")

    def __init__(self, exprs: list[bytes], flags: list[int] | int = 0, literal: bool = False):
        self.db = hyperscan.Database()
        self.db.compile(expressions=exprs, ids=list(range(len(exprs))), elements=len(exprs),
                        flags=flags, literal=literal)
        self._pool: list = []

    def scan(self, data: bytes) -> list[tuple[int, int, int]]:
        """All (expression id, start, end) hits."""
        hits: list = []
        try:
            scratch = self._pool.pop()
        except IndexError:
            scratch = hyperscan.Scratch(self.db)
        try:
            # positional arguments: keyword parsing costs ~0.7 us per call
            self.db.scan(data, _collect, 0, hits, scratch)
        finally:
            self._pool.append(scratch)
        return hits


def _collect(eid: int, start: int, end: int, flags: int, hits: list) -> None:
    hits.append((eid, start, end))




def _prefilter_table() -> tuple[list[bytes], list[int], list[tuple]]:
    """Both tiers in one database; per expression id: (tier, fixed offsets,
    keyword regex or None, keyword back offset)."""
    exprs: list[bytes] = []
    flags: list[int] = []
    table: list[tuple] = []
    for tier, fixed, kws in ((1, _PREFILTER_FIXED, _PREFILTER_KW), (2, _PREFILTER_FIXED_EXT, _PREFILTER_KW_EXT)):
        for expr, offsets in fixed:
            exprs.append(expr.encode())
            flags.append(0)
            table.append((tier, offsets, None, 0))
        for kw, back, tail in kws:
            exprs.append((kw + tail).encode())
            flags.append(hyperscan.HS_FLAG_SOM_LEFTMOST)
            table.append((tier, (), re.compile(kw), back))
    return exprs, flags, table


_PF_EXPRS, _PF_FLAGS, _PF_TABLE = _prefilter_table()
_STATIC_HS = _Hs(_PF_EXPRS, _PF_FLAGS)

# Non-ASCII characters that re's IGNORECASE matches to an ASCII letter (the
# keyword detectors are partly case-insensitive): projected to that letter.
_FOLDS = (("\u0130", ord("i")), ("\u0131", ord("i")), ("\u017f", ord("s")), ("\u212a", ord("k")))


def _project(text: str) -> bytes:
    """One byte per character, so Hyperscan offsets are ``str`` offsets."""
    if text.isascii():
        return text.encode("ascii")
    data = bytearray(text.encode("ascii", "replace"))
    for ch, b in _FOLDS:
        i = text.find(ch)
        while i >= 0:
            data[i] = b
            i = text.find(ch, i + 1)
    return bytes(data)


def _candidate_tiers(text: str, data: bytes) -> tuple[set[int], set[int]]:
    """Positions where an _ALTS / an _ALTS_EXT detector may match (supersets;
    may contain negative positions)."""
    tiers: tuple[set[int], set[int]] = (set(), set())
    for eid, start, end in _STATIC_HS.scan(data):
        tier, offsets, kw_re, back = _PF_TABLE[eid]
        cands = tiers[tier - 1]
        if kw_re is None:
            for d in offsets:
                cands.add(end - d)
        else:
            for m in kw_re.finditer(text, start, end):
                cands.add(m.start() + back)
    return tiers


def _candidates(text: str, data: bytes) -> list[int]:
    """Sorted positions where _STATIC_RE may match (a superset)."""
    c1, c2 = _candidate_tiers(text, data)
    return sorted(c for c in c1 | c2 if c >= 0)


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



# ---------------------------------------------------------------------------
# Dynamic values
# ---------------------------------------------------------------------------
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
    """Immutable snapshot: dynamic values and a Hyperscan literal database of
    all their forms (projected like the text; a hit is confirmed against the
    real text with ``str.startswith``)."""

    __slots__ = ("values", "forms", "hs", "by_id")

    def __init__(self, values: frozenset, min_len: int):
        self.values = values
        forms: set[str] = set()
        for v in values:
            forms.update(f for f in _forms(v) if f and len(f) >= min_len)
        self.forms = frozenset(forms)
        by_literal: dict[bytes, list[str]] = {}
        for f in sorted(forms):
            by_literal.setdefault(_project(f), []).append(f)
        self.by_id = list(by_literal.values())
        self.hs = _Hs(list(by_literal), literal=True) if by_literal else None

    def spans(self, text: str, data: bytes, out: list) -> None:
        if self.hs is None:
            return
        by_id = self.by_id
        for eid, _, end in self.hs.scan(data):
            for form in by_id[eid]:
                s = end - len(form)
                if text.startswith(form, s):
                    out.append((s, end))


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


_KV_GROUPS = {"ksecret": "secret", "ktoken": "token", "kkey": "key", "kpass": "pass", "kpass2": "pass"}



def _scan(text: str, dyn: "_Dyn") -> list[tuple[int, int]]:
    """Spans to redact: the static detectors at the prefilter's candidate
    positions, then the dynamic values."""
    out: list[tuple[int, int]] = []
    data = _project(text)
    c1, c2 = _candidate_tiers(text, data)
    match1 = _TIER1_RE.match
    match2 = _TIER2_RE.match
    for s in sorted(c1 | c2) if c2 else sorted(c1):
        if s < 0:
            continue
        # == _STATIC_RE.match(text, s): tier 1 first, then tier 2 (which can
        # only redact where its own prefilter expressions hit)
        m = match1(text, s)
        if m is None and s in c2:
            m = match2(text, s)
        if m is not None:
            _handle(text, m, m.lastgroup, s, m.end(), out)
    dyn.spans(text, data, out)
    return out


def _left_ok(text: str, start: int) -> bool:
    return start <= 0 or not (text[start - 1].isalnum())


# prefixed-token detectors whose (random) body must contain a digit, so that
# identifiers such as ``secret_`` + a long word are not matched
_NEEDS_DIGIT = frozenset(
    "notion vercel render replicate groq pplx xai netlify alibaba tencent linear nuget eaa".split()
)
# bare formats without a separator (EAA…, LTAI…, AKID…) could also be a line
# of a wrapped base64 block (certificate, PGP public key): not when the
# neighbouring line is base64 too
_B64_GUARD = frozenset(("eaa", "alibaba", "tencent"))
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
        if c < 0 and _SENTRY_KEY_RE.match(auth) and _SENTRY_HOST_RE.match(text, s + 1):
            out.append((i + 3, s))  # Sentry DSN https://<key>@o1.ingest.sentry.io/2
            return True
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
        if v[-1] == "=" and text[ve:ve + 1] == '"' and v[:-1].isalpha():
            return False  # an auth-param (realm="api"), not a credential
        scheme = (m.group("kauthzs") or "").strip().lower()
        if not scheme:
            # an unknown scheme word followed by a credential: keep the word
            um = _UNKNOWN_SCHEME_RE.match(text, vs)
            if um is not None and _token_like(um.group(1)):
                out.append(um.span(1))
                return um.end(1)
            if v.lower() in _STOPWORDS or v.lower() in _AUTH_SCHEMES:
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
    if g in ("slackhook", "sas", "azure", "azsas", "curlu", "discordhook", "teamshook", "putty"):
        out.append(m.span(g + "v"))
        return True
    if g in ("ssws", "mysqlp", "sshpass"):
        vs, ve = m.span(g + "v")
        if text[vs] in "'\"":
            vs, ve = vs + 1, ve - 1
        v = text[vs:ve]
        if g == "mysqlp" and not _left_ok(text, st):
            return False
        if len(v) < 3 or _is_placeholder(v) or _looks_code(v, ""):
            return False
        out.append((vs, ve))
        return True
    if g == "dockerauth":
        vs, ve = m.span("dockerauthv")
        try:
            raw = base64.b64decode(text[vs:ve] + "=" * (-(ve - vs) % 4), validate=True)
        except ValueError:
            return False
        if b":" not in raw:
            return False
        out.append((vs, ve))
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
    if g in _NEEDS_DIGIT and not any(c.isdigit() for c in text[s:e]):
        return False  # random bodies of this length virtually always have one
    if g in _B64_GUARD and (_char_classes(text[s:e]) < 3 or _in_base64_block(text, s, e)):
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
