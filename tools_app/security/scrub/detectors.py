"""The detector table: one record per credential format.

Order matters inside a tier (at one position the first matching pattern
wins), so keep related formats together and add new ones at the end of
their tier.  How to add a detector: docs/scrubbing.md, "Adding a detector".
"""
from __future__ import annotations

import re
from dataclasses import replace

from .records import Detector, Keyword, Prefilter
from .strategies import (
    authorization,
    aws_key,
    bearer,
    connection_string_password,
    cookie,
    digit_not_base64_line,
    docker_auth,
    flag_value,
    has_digit,
    key_value,
    kubernetes_secret,
    named_pair,
    named_value,
    net_use_password,
    pem_block,
    quoted_value,
    sk_body,
    telegram,
    token,
    twilio_sid,
    url_password,
    value_group,
)

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

# key/value tail: suffix, quote, then separator + a 6-char value, or
# whitespace + a word containing a digit or capital (see _KV_TAIL)
_KV_HS = (
    r"[A-Za-z0-9_.-]*[\"']?(?:[ \t]*(?:=>|:=|[:=])[ \t]*(?:[\"'][^\n]{6}|[^\s\"'`,;&<>(){}\[\]]{6})"
    r"|[ \t]+[^\s\"'0-9A-Z]*[0-9A-Z])"
)


LEGACY_DETECTORS: list[Detector] = [
    Detector(
        'url', 'context', r"@(?=[A-Za-z0-9\[])",
        prefilter=(Prefilter('://[^\\s/@#\\"\'<>\\[\\]]*:[^\\s/@#\\"\'<>\\[\\]]*@[A-Za-z0-9\\[]', from_end=2), Prefilter(r"://[0-9a-f]{32}@[A-Za-z0-9]", start=35),),
        redact=url_password, tier=1,
        description='password in scheme://user:pass@host URLs; Sentry DSN keys',
    ),
    Detector(
        'tg', 'chat', r"A(?<=[0-9]{8}:A)A[A-Za-z0-9_-]{33}(?![A-Za-z0-9_-])",
        prefilter=(Prefilter(r"[0-9]{8}:AA[A-Za-z0-9_-]{33}", start=9),),
        redact=telegram, tier=1,
        description='Telegram bot token <digits>:AA…',
    ),
    Detector(
        'ksecret', 'context', r"[cC](?<=(?i:sec))(?i:ret)" + _kv('ksecret'),
        prefilter=(Keyword(r"(?i:secret)", _KV_HS, at=2),),
        redact=key_value, tier=1, back=2, options={'cls': 'secret'},
        description='value after a key named …secret…',
    ),
    Detector(
        'sk', 'ai', r"k(?<=sk)-[A-Za-z0-9_-]{20,}",
        prefilter=(Prefilter(r"sk-[A-Za-z0-9_-]{20}", start=1),),
        redact=token, check=sk_body, tier=1, back=1,
        description='sk-… keys (OpenAI, Anthropic, DeepSeek, OpenRouter…)',
    ),
    Detector(
        'stripe', 'payment', r"k(?<=[sprSPR]k)_(?:live|test)_[A-Za-z0-9]{10,}",
        prefilter=(Prefilter(r"[sprSPR]k_(?:live|test)_[A-Za-z0-9]{10}", start=1),),
        redact=token, tier=1, back=1,
        description='Stripe sk_/pk_/rk_ live/test keys',
    ),
    Detector(
        'mailgun', 'email-sms', r"key-[0-9a-zA-Z]{32}(?![0-9A-Za-z])",
        prefilter=(Prefilter(r"key-[0-9a-zA-Z]{32}"),),
        redact=token, tier=1,
        description='Mailgun key-<32>',
    ),
    Detector(
        'slackhook', 'chat', r"k(?<=hook)s\.slack\.com/(?:services|workflows|triggers)/(?P<slackhookv>[A-Za-z0-9_/-]{10,})",
        prefilter=(Prefilter(r"hooks\.slack\.com/", start=3),),
        redact=value_group, tier=1, back=3,
        description='Slack incoming-webhook URL path',
    ),
    Detector(
        'ktoken', 'context', r"[kK](?<=(?i:to)[kK])(?i:en)" + _kv('ktoken'),
        prefilter=(Keyword(r"(?i:token)", _KV_HS, at=2),),
        redact=key_value, tier=1, back=2, options={'cls': 'token'},
        description='value after a key named …token…',
    ),
    Detector(
        'kcookie', 'context', r"[kK](?<=(?i:coo)[kK])(?i:ie)(?P<kcookiev>[ \t]*:[ \t]*[^\n]{1,4096})",
        prefilter=(Keyword(r"(?i:cookie)", r"[ \t]*:[^\n]", at=3),),
        redact=cookie, tier=1, back=3,
        description='Cookie / Set-Cookie header value',
    ),
    Detector(
        'kkey', 'context', r"[kK](?i:ey)" + _kv('kkey'),
        prefilter=(Keyword(r"(?i:key)", _KV_HS),),
        redact=key_value, tier=1, options={'cls': 'key'},
        description='value after a key named …key…',
    ),
    Detector(
        'kpass', 'context', r"[wW](?:(?<=(?i:passw))(?i:ord|d)|(?<=(?i:pw))(?i:d))" + _kv('kpass'),
        prefilter=(Keyword(r"(?i:passw(?:or)?d)", _KV_HS, at=4), Keyword(r"(?i:pwd)", _KV_HS, at=1),),
        redact=key_value, tier=1, back=-1, options={'cls': 'pass'},
        description='value after password / passwd / pwd',
    ),
    Detector(
        'kpass2', 'context', r"[pP](?i:ass)(?![wW])" + _kv('kpass2'),
        prefilter=(Keyword(r"(?i:pass)", _KV_HS),),
        redact=key_value, tier=1, options={'cls': 'pass'},
        description='value after a key ending in pass (DB_PASS, --pass)',
    ),
    Detector(
        'kauthz', 'context', '[zZ](?<=(?i:authori)[zZ])(?i:ation)[\\"\']?[ \\t]*[:=][ \\t]*[\\"\']?(?P<kauthzs>(?i:bearer|basic|token|bot|jwt|apikey|api-key|key|sso-key|negotiate|ntlm|digest|aws4-hmac-sha256|hmac|oauth|ssws|flyv1|splunk|pat|private-token|zoho-oauthtoken)[ \\t]+)?(?P<kauthzv>[^\\s\\"\'<>]{1,4096})',
        prefilter=(Prefilter(r"(?i:authorization)", start=7),),
        redact=authorization, tier=1, back=7,
        description='Authorization header / field value',
    ),
    Detector(
        'bearer', 'context', r"B(?:earer|EARER)[ \t]+(?P<bearerv>[A-Za-z0-9._~+/=-]{8,4096})",
        prefilter=(Prefilter(r"B(?:earer|EARER)[ \t]"),),
        redact=bearer, tier=1,
        description='Bearer <token>',
    ),
    Detector(
        'pem', 'crypto', r"B(?<=-----B)EGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----",
        prefilter=(Prefilter(r"-----BEGIN", start=5),),
        redact=pem_block, tier=1, back=5,
        description='PEM private key blocks (whole block, truncated bodies too)',
    ),
    Detector(
        'gh', 'code-host', r"_(?<=gh[pousr]_)[A-Za-z0-9]{36,255}(?![A-Za-z0-9])",
        prefilter=(Prefilter(r"gh[pousr]_[A-Za-z0-9]{36}", start=3),),
        redact=token, tier=1, back=3,
        description='GitHub ghp_/gho_/ghu_/ghs_/ghr_ tokens',
    ),
    Detector(
        'ghpat', 'code-host', r"_(?<=github_pat_)[A-Za-z0-9_]{50,255}",
        prefilter=(Prefilter(r"github_pat_[A-Za-z0-9_]{50}", start=10),),
        redact=token, tier=1, back=10,
        description='GitHub fine-grained github_pat_',
    ),
    Detector(
        'gitlab', 'code-host', r"gl(?:pat|dt|rt|ptt|ft|cbt|oas|imt|soat|ffct|agent|sa|wt)-[A-Za-z0-9_.-]{20,}",
        prefilter=(Prefilter(r"gl(?:pat|dt|rt|ptt|ft|cbt|oas|imt|soat|ffct|agent|sa|wt)-[A-Za-z0-9_.-]{20}"),),
        redact=token, tier=1,
        description='GitLab glpat-/gldt-/glrt-… tokens',
    ),
    Detector(
        'sas', 'cloud', r"g(?<=[?&;]sig)=(?P<sasv>[A-Za-z0-9%+/=]{16,})",
        prefilter=(Prefilter(r"[?&;]sig=[A-Za-z0-9%+/=]{16}", start=3),),
        redact=value_group, tier=1, back=2,
        description='Azure SAS sig= query parameter',
    ),
    Detector(
        'gcp', 'cloud', r"GOCSPX-[A-Za-z0-9_-]{20,}",
        prefilter=(Prefilter(r"GOCSPX-[A-Za-z0-9_-]{20}"),),
        redact=token, tier=1,
        description='Google OAuth client secret GOCSPX-',
    ),
    Detector(
        'glrunner', 'ci', r"GR1348941[A-Za-z0-9_-]{20,}",
        prefilter=(Prefilter(r"GR1348941[A-Za-z0-9_-]{20}"),),
        redact=token, tier=1,
        description='GitLab runner registration token GR1348941…',
    ),
    Detector(
        'aws', 'cloud', 'A(?:KIA|SIA|BIA|CCA|3T[A-Z0-9])[A-Z0-9]{16}(?![A-Za-z0-9])(?:[ \\t]*[,;:|=\\t][ \\t]*[\\"\']?(?P<awssec>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=]))?',
        prefilter=(Prefilter(r"A(?:KIA|SIA|BIA|CCA|3T[A-Z0-9])[A-Z0-9]{16}"),),
        redact=aws_key, tier=1,
        description='AWS access key ids (AKIA/ASIA/…) and an adjacent secret',
    ),
    Detector(
        'gapi', 'cloud', r"AIza[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])",
        prefilter=(Prefilter(r"AIza[A-Za-z0-9_-]{35}"),),
        redact=token, tier=1,
        description='Google API key AIza…',
    ),
    Detector(
        'azure', 'cloud', r"AccountKey=(?P<azurev>[A-Za-z0-9+/=]{20,})",
        prefilter=(Prefilter(r"AccountKey=[A-Za-z0-9+/=]{20}"),),
        redact=value_group, tier=1,
        description='Azure storage AccountKey=',
    ),
    Detector(
        'pypi', 'registry', r"AgE(?<=pypi-AgE)[A-Za-z0-9_-]{40,}",
        prefilter=(Prefilter(r"pypi-AgE[A-Za-z0-9_-]{40}", start=5),),
        redact=token, tier=1, back=5,
        description='PyPI upload token pypi-AgE…',
    ),
    Detector(
        'twac', 'email-sms', r"AC[0-9a-f]{32}(?![0-9A-Za-z])",
        prefilter=(Prefilter(r"AC[0-9a-f]{32}"),),
        redact=twilio_sid, tier=1,
        description='Twilio account SID AC… (with a twilio/sid/account context)',
    ),
    Detector(
        'sendgrid', 'email-sms', r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}",
        prefilter=(Prefilter(r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}"),),
        redact=token, tier=1,
        description='SendGrid SG.….…',
    ),
    Detector(
        'azsas', 'cloud', r"SharedAccessKey=(?P<azsasv>[A-Za-z0-9+/=]{20,})",
        prefilter=(Prefilter(r"SharedAccessKey=[A-Za-z0-9+/=]{20}"),),
        redact=value_group, tier=1,
        description='Azure SharedAccessKey=',
    ),
    Detector(
        'twsk', 'email-sms', r"SK[0-9a-fA-F]{32}(?![0-9A-Za-z])",
        prefilter=(Prefilter(r"SK[0-9a-fA-F]{32}"),),
        redact=token, tier=1,
        description='Twilio API key SK…',
    ),
    Detector(
        'curlu', 'context', '-(?:u|-user)(?:[ \\t]+|=)[\\"\']?[^\\s:\\"\'@/]{1,128}:(?P<curluv>(?![0-9]+(?![^\\s\\"\']))[^\\s\\"\']{6,256})',
        prefilter=(Keyword(r"-(?:u|-user)", '(?:[ \\t]+|=)[\\"\']?[^\\s:\\"\'@/]+:[^\\s\\"\']{6}'),),
        redact=value_group, tier=1,
        description='curl/wget -u user:password, --user',
    ),
    Detector(
        'slack', 'chat', r"x(?:ox[abposre]|app)-[A-Za-z0-9-]{10,}",
        prefilter=(Prefilter(r"x(?:ox[abposre]|app)-[A-Za-z0-9-]{10}"),),
        redact=token, tier=1,
        description='Slack xox?-/xapp- tokens',
    ),
    Detector(
        'npm', 'registry', r"_(?<=npm_)[A-Za-z0-9]{36}(?![A-Za-z0-9])",
        prefilter=(Prefilter(r"npm_[A-Za-z0-9]{36}", start=3),),
        redact=token, tier=1, back=3,
        description='npm_ tokens',
    ),
    Detector(
        'hf', 'ai', r"_(?<=hf_)[A-Za-z0-9]{30,40}(?![A-Za-z0-9])",
        prefilter=(Prefilter(r"hf_[A-Za-z0-9]{30}", start=2),),
        redact=token, tier=1, back=2,
        description='Hugging Face hf_ tokens',
    ),
    Detector(
        'hforg', 'ai', r"_(?<=api_org_)[A-Za-z0-9]{30,40}(?![A-Za-z0-9])",
        prefilter=(Prefilter(r"api_org_[A-Za-z0-9]{30}", start=7),),
        redact=token, tier=1, back=7,
        description='Hugging Face api_org_ tokens',
    ),
    Detector(
        'shopify', 'saas', r"_(?<=shp[a-z][a-z]_)[a-fA-F0-9]{32}(?![A-Za-z0-9])",
        prefilter=(Prefilter(r"shp[a-z][a-z]_[a-fA-F0-9]{32}", start=5),),
        redact=token, tier=1, back=5,
        description='Shopify shpat_/shpss_/… tokens',
    ),
    Detector(
        'dop', 'cloud', r"_(?<=do[por]_)v1_[a-f0-9]{64}",
        prefilter=(Prefilter(r"do[por]_v1_[a-f0-9]{64}", start=3),),
        redact=token, tier=1, back=3,
        description='DigitalOcean dop_v1_/doo_v1_/dor_v1_',
    ),
    Detector(
        'whsec', 'payment', r"_(?<=whsec_)[A-Za-z0-9+/=]{20,}",
        prefilter=(Prefilter(r"whsec_[A-Za-z0-9+/=]{20}", start=5),),
        redact=token, tier=1, back=5,
        description='webhook signing secrets whsec_ (Stripe, Svix…)',
    ),
    Detector(
        'databricks', 'database', r"p(?<=dap)i[a-f0-9]{32}(?:-[0-9]+)?(?![A-Za-z0-9])",
        prefilter=(Prefilter(r"dapi[a-f0-9]{32}", start=2),),
        redact=token, tier=1, back=2,
        description='Databricks dapi…',
    ),
    Detector(
        'jwt', 'context', r"J(?<=eyJ)[A-Za-z0-9_-]{6,}\.eyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]*",
        prefilter=(Prefilter(r"eyJ[A-Za-z0-9_-]{6}", start=2),),
        redact=token, tier=1, back=2, options={'left': 'word'},
        description='JSON Web Tokens eyJ….eyJ….…',
    ),
    Detector(
        'ya29', 'cloud', r"ya29\.[A-Za-z0-9_-]{20,}",
        prefilter=(Prefilter(r"ya29\.[A-Za-z0-9_-]{20}"),),
        redact=token, tier=1,
        description='Google OAuth access token ya29.',
    ),
    Detector(
        'grefresh', 'cloud', r"/(?<=1/)/0[A-Za-z0-9_-]{30,}",
        prefilter=(Prefilter(r"1//0[A-Za-z0-9_-]{30}", start=1),),
        redact=token, tier=1, back=1,
        description='Google OAuth refresh token 1//0…',
    ),
    Detector(
        'discord', 'chat', r"[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27,38}(?![A-Za-z0-9_-])",
        prefilter=(Prefilter(r"[MNO][A-Za-z0-9_-]{23,25}\.[A-Za-z0-9_-]{6}\.[A-Za-z0-9_-]{27}"),),
        redact=token, check=has_digit, tier=1,
        description='Discord bot tokens',
    ),
    Detector(
        'square', 'payment', r"sq0(?:atp|csp)-[A-Za-z0-9_-]{22,}",
        prefilter=(Prefilter(r"sq0(?:atp|csp)-[A-Za-z0-9_-]{22}"),),
        redact=token, tier=2,
        description='Square sq0atp-/sq0csp-',
    ),
    Detector(
        'eaa', 'payment', r"EAA[A-Za-z0-9_-]{61,}(?![A-Za-z0-9_+/=-])",
        prefilter=(Prefilter(r"EAA[A-Za-z0-9_-]{61}"),),
        redact=token, check=digit_not_base64_line, tier=2,
        description='Square EAAA… and Facebook EAA… access tokens',
    ),
    Detector(
        'braintree', 'payment', r"access_token\$(?:production|sandbox)\$[0-9a-z]{16}\$[0-9a-f]{32}",
        prefilter=(Prefilter(r"access_token\$production\$"), Prefilter(r"access_token\$sandbox\$"),),
        redact=token, tier=2,
        description='Braintree access_token$production$…',
    ),
    Detector(
        'atlassian', 'code-host', r"(?:AT(?:ATT|CTT)3x[A-Za-z0-9_=-]{40,}|ATBB[A-Za-z0-9]{32}(?![A-Za-z0-9]))",
        prefilter=(Prefilter(r"AT(?:ATT|CTT)3x"), Prefilter(r"ATBB[A-Za-z0-9]{32}"),),
        redact=token, tier=2,
        description='Atlassian ATATT3x…/ATCTT3x…, Bitbucket ATBB…',
    ),
    Detector(
        'linear', 'saas', r"lin_(?:api|oauth)_[A-Za-z0-9]{40,64}(?![A-Za-z0-9])",
        prefilter=(Prefilter(r"lin_api_[A-Za-z0-9]{40}"), Prefilter(r"lin_oauth_[A-Za-z0-9]{40}"),),
        redact=token, check=has_digit, tier=2,
        description='Linear lin_api_/lin_oauth_',
    ),
    Detector(
        'notion', 'saas', r"(?:secret_[A-Za-z0-9]{43}|ntn_[A-Za-z0-9]{40,50})(?![A-Za-z0-9_])",
        prefilter=(Prefilter(r"secret_[A-Za-z0-9]{43}"), Prefilter(r"ntn_[A-Za-z0-9]{40}"),),
        redact=token, check=has_digit, tier=2,
        description='Notion secret_…/ntn_…',
    ),
    Detector(
        'vercel', 'cloud', r"vc[pikar]_[A-Za-z0-9]{24,}(?![A-Za-z0-9_])",
        prefilter=(Prefilter(r"vc[pikar]_[A-Za-z0-9]{24}"),),
        redact=token, check=has_digit, tier=2,
        description='Vercel vcp_/vci_/vck_/vca_/vcr_',
    ),
    Detector(
        'supabase', 'database', r"(?:sbp_(?:v0_)?[a-f0-9]{40}|sb_secret_[A-Za-z0-9_-]{20,})(?![A-Za-z0-9])",
        prefilter=(Prefilter(r"sbp_[a-f0-9]{40}"), Prefilter(r"sbp_v0_[a-f0-9]{40}"), Prefilter(r"sb_secret_[A-Za-z0-9_-]{20}"),),
        redact=token, tier=2,
        description='Supabase sbp_…/sb_secret_…',
    ),
    Detector(
        'doppler', 'saas', r"dp\.(?:pt|st|ct|sa|scim|audit)\.(?:[a-z0-9_-]{2,35}\.)?[A-Za-z0-9]{40,44}(?![A-Za-z0-9])",
        prefilter=(Prefilter(r"dp\.(?:pt|st|ct|sa)\."), Prefilter(r"dp\.scim\."), Prefilter(r"dp\.audit\."),),
        redact=token, tier=2,
        description='Doppler dp.pt./dp.st./…',
    ),
    Detector(
        'age', 'crypto', r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",
        prefilter=(Prefilter(r"AGE-SECRET-KEY-1"),),
        redact=token, tier=2,
        description='age secret keys AGE-SECRET-KEY-1…',
    ),
    Detector(
        'vault', 'saas', r"hv[sbr]\.[A-Za-z0-9_-]{24,}",
        prefilter=(Prefilter(r"hv[sbr]\.[A-Za-z0-9_-]{24}"),),
        redact=token, tier=2,
        description='HashiCorp Vault hvs./hvb./hvr. tokens',
    ),
    Detector(
        'tfc', 'ci', r"[A-Za-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=-]{60,}",
        prefilter=(Prefilter(r"[A-Za-z0-9]{14}\.atlasv1\."),),
        redact=token, tier=2,
        description='Terraform Cloud ….atlasv1.…',
    ),
    Detector(
        'grafana', 'observability', r"(?:glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|glc_[A-Za-z0-9+/]{32,}={0,2}|eyJrIjoi[A-Za-z0-9+/]{40,}={0,2})",
        prefilter=(Prefilter(r"glsa_"), Prefilter(r"glc_[A-Za-z0-9+/]{32}"), Prefilter(r"eyJrIjoi[A-Za-z0-9+/]{40}"),),
        redact=token, tier=2,
        description='Grafana glsa_/glc_/legacy eyJrIjoi… keys',
    ),
    Detector(
        'postman', 'saas', r"PMAK-[a-f0-9]{24}-[a-f0-9]{34}",
        prefilter=(Prefilter(r"PMAK-"),),
        redact=token, tier=2,
        description='Postman PMAK-',
    ),
    Detector(
        'dockerhub', 'registry', r"dckr_(?:pat|oat)_[A-Za-z0-9_-]{27,}",
        prefilter=(Prefilter(r"dckr_(?:pat|oat)_"),),
        redact=token, tier=2,
        description='Docker Hub dckr_pat_/dckr_oat_',
    ),
    Detector(
        'fly', 'cloud', r"(?:fo1_[A-Za-z0-9_-]{43}|fm[12][ar]?_[A-Za-z0-9+/]{40,}={0,2}(?:,fm[12][ar]?_[A-Za-z0-9+/]+={0,2})*)",
        prefilter=(Prefilter(r"fo1_[A-Za-z0-9_-]{43}"), Prefilter(r"fm[12]_[A-Za-z0-9+/]{40}"), Prefilter(r"fm[12][ar]_[A-Za-z0-9+/]{40}"),),
        redact=token, tier=2,
        description='Fly.io fo1_/fm1_/fm2_ tokens',
    ),
    Detector(
        'fcm', 'cloud', r"AAAA[A-Za-z0-9_-]{7}:APA91b[A-Za-z0-9_-]{100,}",
        prefilter=(Prefilter(r"AAAA[A-Za-z0-9_-]{7}:APA91b"),),
        redact=token, tier=2,
        description='Firebase Cloud Messaging server keys …:APA91b…',
    ),
    Detector(
        'alibaba', 'cloud', r"LTAI[A-Za-z0-9]{12,20}(?![A-Za-z0-9])",
        prefilter=(Prefilter(r"LTAI[A-Za-z0-9]{12}"),),
        redact=token, check=digit_not_base64_line, tier=2,
        description='Alibaba Cloud LTAI… access key ids',
    ),
    Detector(
        'tencent', 'cloud', r"AKID[A-Za-z0-9]{32}(?![A-Za-z0-9])",
        prefilter=(Prefilter(r"AKID[A-Za-z0-9]{32}"),),
        redact=token, check=digit_not_base64_line, tier=2,
        description='Tencent Cloud AKID… secret ids',
    ),
    Detector(
        'heroku', 'cloud', r"HRKU-AA[A-Za-z0-9_-]{58}",
        prefilter=(Prefilter(r"HRKU-AA"),),
        redact=token, tier=2,
        description='Heroku HRKU-AA…',
    ),
    Detector(
        'sentrytok', 'observability', r"(?:sntrys_eyJ[A-Za-z0-9+/=_]{40,}|sntryu_[a-f0-9]{64})",
        prefilter=(Prefilter(r"sntrys_eyJ"), Prefilter(r"sntryu_[a-f0-9]{64}"),),
        redact=token, tier=2,
        description='Sentry sntrys_/sntryu_ tokens',
    ),
    Detector(
        'mailchimp', 'email-sms', r"[0-9a-f]{32}-us[0-9]{1,2}(?![A-Za-z0-9])",
        prefilter=(Prefilter(r"[0-9a-f]{32}-us[0-9]"),),
        redact=token, tier=2,
        description='Mailchimp <32 hex>-usNN',
    ),
    Detector(
        'onepassword', 'saas', r"(?:ops_eyJ[A-Za-z0-9+/]{100,}={0,3}|A3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5})",
        prefilter=(Prefilter(r"ops_eyJ"), Prefilter(r"A3-[A-Z0-9]{6}-"),),
        redact=token, tier=2,
        description='1Password service-account ops_eyJ… and secret keys A3-…',
    ),
    Detector(
        'airtable', 'saas', r"pat[A-Za-z0-9]{14}\.[a-f0-9]{64}",
        prefilter=(Prefilter(r"pat[A-Za-z0-9]{14}\."),),
        redact=token, tier=2,
        description='Airtable pat….<64 hex>',
    ),
    Detector(
        'newrelic', 'observability', r"NR(?:AK-[A-Z0-9]{27}|II-[A-Za-z0-9_-]{32})",
        prefilter=(Prefilter(r"NR(?:AK|II)-"),),
        redact=token, tier=2,
        description='New Relic NRAK-/NRII-',
    ),
    Detector(
        'figma', 'saas', r"figd_[A-Za-z0-9_-]{40}",
        prefilter=(Prefilter(r"figd_"),),
        redact=token, tier=2,
        description='Figma figd_',
    ),
    Detector(
        'pulumi', 'ci', r"pul-[a-f0-9]{40}(?![A-Za-z0-9])",
        prefilter=(Prefilter(r"pul-[a-f0-9]{40}"),),
        redact=token, tier=2,
        description='Pulumi pul-',
    ),
    Detector(
        'planetscale', 'database', r"pscale_(?:tkn|pw|oauth)_[A-Za-z0-9_.=-]{32,64}",
        prefilter=(Prefilter(r"pscale_"),),
        redact=token, tier=2,
        description='PlanetScale pscale_tkn_/pw_/oauth_',
    ),
    Detector(
        'replicate', 'ai', r"r8_[A-Za-z0-9]{37}(?![A-Za-z0-9])",
        prefilter=(Prefilter(r"r8_[A-Za-z0-9]{37}"),),
        redact=token, check=has_digit, tier=2,
        description='Replicate r8_',
    ),
    Detector(
        'groq', 'ai', r"gsk_[A-Za-z0-9]{52}(?![A-Za-z0-9])",
        prefilter=(Prefilter(r"gsk_[A-Za-z0-9]{52}"),),
        redact=token, check=has_digit, tier=2,
        description='Groq gsk_',
    ),
    Detector(
        'pplx', 'ai', r"pplx-[A-Za-z0-9]{48}(?![A-Za-z0-9])",
        prefilter=(Prefilter(r"pplx-[A-Za-z0-9]{48}"),),
        redact=token, check=has_digit, tier=2,
        description='Perplexity pplx-',
    ),
    Detector(
        'xai', 'ai', r"xai-[A-Za-z0-9]{80}(?![A-Za-z0-9])",
        prefilter=(Prefilter(r"xai-[A-Za-z0-9]{80}"),),
        redact=token, check=has_digit, tier=2,
        description='xAI xai-',
    ),
    Detector(
        'langsmith', 'ai', r"lsv2_(?:pt|sk)_[a-f0-9]{32}_[a-f0-9]{10}",
        prefilter=(Prefilter(r"lsv2_(?:pt|sk)_"),),
        redact=token, tier=2,
        description='LangSmith lsv2_pt_/lsv2_sk_',
    ),
    Detector(
        'buildkite', 'ci', r"bkua_[a-f0-9]{40}",
        prefilter=(Prefilter(r"bkua_[a-f0-9]{40}"),),
        redact=token, tier=2,
        description='Buildkite bkua_',
    ),
    Detector(
        'tailscale', 'saas', r"tskey-(?:auth|api|client|scim|webhook)-[A-Za-z0-9]{6,}-[A-Za-z0-9]{16,}",
        prefilter=(Prefilter(r"tskey-"),),
        redact=token, tier=2,
        description='Tailscale tskey-…',
    ),
    Detector(
        'render', 'cloud', r"rnd_[A-Za-z0-9]{32}(?![A-Za-z0-9])",
        prefilter=(Prefilter(r"rnd_[A-Za-z0-9]{32}"),),
        redact=token, check=has_digit, tier=2,
        description='Render rnd_',
    ),
    Detector(
        'netlify', 'cloud', r"nfp_[A-Za-z0-9]{36}(?![A-Za-z0-9])",
        prefilter=(Prefilter(r"nfp_[A-Za-z0-9]{36}"),),
        redact=token, check=has_digit, tier=2,
        description='Netlify nfp_',
    ),
    Detector(
        'dynatrace', 'observability', r"dt0c01\.[A-Z0-9]{24}\.[A-Z0-9]{64}",
        prefilter=(Prefilter(r"dt0c01\."),),
        redact=token, tier=2,
        description='Dynatrace dt0c01.',
    ),
    Detector(
        'rubygems', 'registry', r"rubygems_[a-f0-9]{48}",
        prefilter=(Prefilter(r"rubygems_"),),
        redact=token, tier=2,
        description='RubyGems rubygems_',
    ),
    Detector(
        'mapbox', 'saas', r"sk\.eyJ[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,}",
        prefilter=(Prefilter(r"sk\.eyJ"),),
        redact=token, tier=2,
        description='Mapbox secret sk.eyJ…',
    ),
    Detector(
        'nuget', 'registry', r"oy2[a-z0-9]{43}(?![A-Za-z0-9])",
        prefilter=(Prefilter(r"oy2[a-z0-9]{43}"),),
        redact=token, check=has_digit, tier=2,
        description='NuGet oy2…',
    ),
    Detector(
        'artifactory', 'registry', r"(?:AKCp[A-Za-z0-9]{69}|cmVmdGtuOjAxOj[A-Za-z0-9]{40,})(?![A-Za-z0-9])",
        prefilter=(Prefilter(r"AKCp[A-Za-z0-9]{69}"), Prefilter(r"cmVmdGtuOjAxOj"),),
        redact=token, tier=2,
        description='JFrog Artifactory AKCp…/reference tokens',
    ),
    Detector(
        'dropbox', 'saas', r"sl\.(?:u\.)?[A-Za-z0-9_-]{130,}",
        prefilter=(Prefilter(r"sl\.[A-Za-z0-9_-]{130}"), Prefilter(r"sl\.u\."),),
        redact=token, tier=2,
        description='Dropbox sl.… access tokens',
    ),
    Detector(
        'plaid', 'payment', r"access-(?:sandbox|development|production)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        prefilter=(Prefilter(r"access-sandbox-"), Prefilter(r"access-development-"), Prefilter(r"access-production-"),),
        redact=token, tier=2,
        description='Plaid access-<env>-<uuid>',
    ),
    Detector(
        'discordhook', 'chat', r"discord(?:app)?\.com/api/webhooks/[0-9]{17,20}/(?P<discordhookv>[A-Za-z0-9_-]{60,})",
        prefilter=(Prefilter(r"discord\.com/api/webhooks/"), Prefilter(r"discordapp\.com/api/webhooks/"),),
        redact=value_group, tier=2,
        description='Discord webhook URL secret path',
    ),
    Detector(
        'teamshook', 'chat', r"webhook\.office\.com/webhookb2/(?P<teamshookv>[A-Za-z0-9@/_-]{40,})",
        prefilter=(Prefilter(r"webhook\.office\.com/webhookb2/"),),
        redact=value_group, tier=2,
        description='Microsoft Teams webhook URL path',
    ),
    Detector(
        'pwhash', 'hash', r"(?:\$(?:2[abxy]\$[0-9]{2}\$[./A-Za-z0-9]{53}|argon2(?:id|i|d)\$v=[0-9]+\$m=[0-9]+,t=[0-9]+,p=[0-9]+\$[A-Za-z0-9+/]{8,}\$[A-Za-z0-9+/]{16,}|[156]\$(?:rounds=[0-9]+\$)?[./A-Za-z0-9]{1,16}\$[./A-Za-z0-9]{22,86}|apr1\$[./A-Za-z0-9]{1,8}\$[./A-Za-z0-9]{22}|y\$[./A-Za-z0-9]+\$[./A-Za-z0-9]+\$[./A-Za-z0-9]{43})|pbkdf2_sha(?:256|1)\$[0-9]+\$[A-Za-z0-9]+\$[A-Za-z0-9+/]{27,}={0,2})(?![./A-Za-z0-9])",
        prefilter=(Prefilter(r"\$2[abxy]\$[0-9]{2}\$"), Prefilter(r"\$argon2id\$v="), Prefilter(r"\$argon2[id]\$v="), Prefilter(r"\$[156y]\$"), Prefilter(r"\$apr1\$"), Prefilter(r"pbkdf2_sha256\$"), Prefilter(r"pbkdf2_sha1\$"),),
        redact=token, tier=2,
        description='crypt(3) hashes (bcrypt, argon2, sha-crypt, apr1, yescrypt), Django pbkdf2',
    ),
    Detector(
        'dockerauth', 'context', r'\"auth\"[ \t]*:[ \t]*\"(?P<dockerauthv>[A-Za-z0-9+/]{8,}={0,2})\"',
        prefilter=(Keyword(r'"auth"', r'[ \t]*:[ \t]*"[A-Za-z0-9+/]{8}'),),
        redact=docker_auth, tier=2,
        description='docker config.json "auth": base64(user:password)',
    ),
    Detector(
        'dockercfg', 'context', r"eyJhdXRocyI6[A-Za-z0-9+/]{20,}={0,2}",
        prefilter=(Prefilter(r"eyJhdXRocyI6[A-Za-z0-9+/]{20}"),),
        redact=token, tier=2,
        description='base64 of a whole docker config ({"auths":…)',
    ),
    Detector(
        'putty', 'crypto', r"Private-Lines:[ \t]*[0-9]{1,4}[ \t]*(?:\r?\n|\\r\\n|\\n)(?P<puttyv>[A-Za-z0-9+/=]{4,}(?![A-Za-z0-9+/=:-])(?:(?:\r?\n|\\r\\n|\\n)[A-Za-z0-9+/=]{4,}(?![A-Za-z0-9+/=:-]))*)",
        prefilter=(Prefilter(r"Private-Lines:"),),
        redact=value_group, tier=2,
        description='PuTTY .ppk Private-Lines',
    ),
    Detector(
        'ssws', 'saas', r"SSWS[ \t]+(?P<sswsv>[A-Za-z0-9_-]{20,})",
        prefilter=(Prefilter(r"SSWS[ \t]"),),
        redact=quoted_value, tier=2,
        description='Okta SSWS <token>',
    ),
    Detector(
        'mysqlp', 'context', '(?:mysql|mariadb)[a-z]*[ \\t](?:[^\\n|;&]{0,200}?[ \\t])?-p(?P<mysqlpv>\'[^\'\\n]{1,256}\'|\\"[^\\"\\n]{1,256}\\"|[^\\s\'\\"]{1,256})',
        prefilter=(Keyword(r"(?:mysql|mariadb)", r"[a-z]*[ \t](?:[^\n|;&]*[ \t])?-p[^\s]"),),
        redact=quoted_value, tier=2, options={'left': 'alnum'},
        description='mysql/mariadb -pPASSWORD',
    ),
    Detector(
        'sshpass', 'context', 'sshpass(?:[ \\t]+-[vh])*[ \\t]+-p[ \\t]*(?P<sshpassv>\'[^\'\\n]{1,256}\'|\\"[^\\"\\n]{1,256}\\"|[^\\s\'\\"]{1,256})',
        prefilter=(Prefilter(r"sshpass[ \t]"),),
        redact=quoted_value, tier=2,
        description='sshpass -p PASSWORD',
    ),
]


# ---------------------------------------------------------------------------
# P7 additions, tier 3 (tried on their own: they can only add redactions).
# ---------------------------------------------------------------------------
_KW = r"(?i:passw(?:or)?d|passphrase|pass|pwd|secret|token|credentials?|dsn|key|virtual_)"
_KW_HS = r"(?i:passw|pwd|secret|token|credential|key|dsn|virtual_|pass)"
# a credential keyword ending a name (+ digits): names judged by their last segment
_KW_END = r"(?i:passw(?:or)?d|passphrase|pass|pwd|secret|token|credentials?|dsn|key)[0-9]*"
_KW_STARTS = ("pass", "pwd", "secret", "token", "credential", "dsn", "key", "virtual_")
_TOK = "A-Za-z0-9_-"


def _vendor(name: str, group: str, pattern: str, prefilter: str, description: str, *, digit: bool = False,
            start: int = 0) -> Detector:
    """A token recognised by its own shape: the whole match goes."""
    return Detector(name, group, pattern, prefilter=(Prefilter(prefilter, start=start),), redact=token,
                    check=has_digit if digit else None, tier=3, description=description)


VENDOR_DETECTORS: list[Detector] = [
    # ---- cloud ---------------------------------------------------------------
    _vendor("azure_ad", "cloud", r"(?<![A-Za-z0-9_~.])[A-Za-z0-9_~.]{3}[0-9]Q~[A-Za-z0-9_~.-]{31,34}(?![A-Za-z0-9_~.-])",
            r"[0-9]Q~[A-Za-z0-9_~.-]{8}", "Azure AD / Entra client secrets (…8Q~…)", start=-3),
    _vendor("cloudflare_ca", "cloud", r"v1\.0-[a-f0-9]{24}-[a-f0-9]{146}", r"v1\.0-",
            "Cloudflare Origin CA keys"),
    _vendor("yandex", "cloud", rf"AQVN[{_TOK}]{{35,38}}(?![{_TOK}])", r"AQVN", "Yandex Cloud API keys",
            digit=True),
    _vendor("openshift", "cloud", rf"sha256~[{_TOK}]{{43}}(?![{_TOK}])", r"sha256~",
            "OpenShift OAuth access tokens"),
    _vendor("scalingo", "cloud", rf"tk-us-[{_TOK}]{{48}}(?![{_TOK}])", r"tk-us-", "Scalingo API tokens"),
    _vendor("defined_net", "cloud", r"dnkey-[a-z0-9=_-]{26}-[a-z0-9=_-]{52}", r"dnkey-",
            "Defined Networking API keys"),
    # ---- code hosts, CI, developer tools ------------------------------------
    _vendor("sonarqube", "ci", r"sq[pua]_[0-9a-f]{40}(?![0-9A-Za-z])", r"sq[pua]_[0-9a-f]{8}", "SonarQube tokens"),
    _vendor("sourcegraph", "code-host", r"sgp_(?:local_|[0-9a-f]{16}_)?[0-9a-f]{40}(?![0-9A-Za-z])", r"sgp_",
            "Sourcegraph access tokens"),
    _vendor("circleci", "ci", r"CCIPAT_[A-Za-z0-9]{20,}_[0-9a-f]{40}(?![0-9A-Za-z])", r"CCIPAT_",
            "CircleCI personal API tokens"),
    _vendor("harness", "ci", r"pat\.[A-Za-z0-9_-]{22}\.[0-9a-f]{24}\.[A-Za-z0-9]{20}(?![A-Za-z0-9])",
            r"pat\.[A-Za-z0-9_-]{22}\.", "Harness personal access tokens"),
    _vendor("octopus", "ci", r"API-[A-Z0-9]{26}(?![A-Za-z0-9])", r"API-[A-Z0-9]{26}", "Octopus Deploy API keys",
            digit=True),
    _vendor("infracost", "ci", r"ico-[A-Za-z0-9]{32}(?![A-Za-z0-9])", r"ico-[A-Za-z0-9]{32}", "Infracost API keys",
            digit=True),
    _vendor("prefect", "ci", r"pnu_[A-Za-z0-9]{36}(?![A-Za-z0-9])", r"pnu_[A-Za-z0-9]{36}", "Prefect API keys",
            digit=True),
    _vendor("readme", "saas", r"rdme_[a-z0-9]{70}(?![a-z0-9])", r"rdme_", "ReadMe API keys"),
    _vendor("contentful", "saas", rf"CFPAT-[{_TOK}]{{43}}(?![{_TOK}])", r"CFPAT-",
            "Contentful personal access tokens"),
    _vendor("typeform", "saas", r"tfp_[A-Za-z0-9_.=-]{59}(?![A-Za-z0-9_.=-])", r"tfp_",
            "Typeform personal tokens"),
    _vendor("frameio", "saas", r"fio-u-[A-Za-z0-9_=-]{64}(?![A-Za-z0-9_=-])", r"fio-u-",
            "Frame.io developer tokens"),
    _vendor("posthog", "observability", r"phx_[A-Za-z0-9]{43}(?![A-Za-z0-9])", r"phx_[A-Za-z0-9]{43}",
            "PostHog personal API keys", digit=True),
    _vendor("intra42", "saas", r"s-s4t2(?:ud|af)-[a-f0-9]{64}(?![a-f0-9])", r"s-s4t2(?:ud|af)-",
            "42 Intra client secrets"),
    # ---- package registries -------------------------------------------------
    _vendor("crates", "registry", r"cio[A-Za-z0-9]{32}(?![A-Za-z0-9])", r"cio[A-Za-z0-9]{32}", "crates.io API tokens",
            digit=True),
    _vendor("clojars", "registry", r"CLOJARS_[a-z0-9]{60}(?![a-z0-9])", r"CLOJARS_", "Clojars deploy tokens"),
    # ---- payment ------------------------------------------------------------
    _vendor("flutterwave", "payment", r"FLWSECK", r"FLWSECK",
            "Flutterwave secret keys"),
    _vendor("shippo", "payment", r"shippo_(?:live|test)_[a-f0-9]{40}(?![A-Za-z0-9])", r"shippo_(?:live|test)_",
            "Shippo API tokens"),
    _vendor("easypost", "payment", r"EZ[AT]K[A-Za-z0-9]{54}(?![A-Za-z0-9])", r"EZ[AT]K[A-Za-z0-9]{8}",
            "EasyPost API keys", digit=True),
    _vendor("duffel", "payment", r"duffel_(?:test|live)_[A-Za-z0-9_=-]{43}(?![A-Za-z0-9_=-])",
            r"duffel_(?:test|live)_", "Duffel API tokens"),
    # ---- email / SMS --------------------------------------------------------
    _vendor("brevo", "email-sms", r"x(?:keysib|smtpsib)-[a-f0-9]{64}-[A-Za-z0-9]{16}(?![A-Za-z0-9])",
            r"x(?:keysib|smtpsib)-", "Brevo (Sendinblue) API and SMTP keys"),
    _vendor("mailersend", "email-sms", r"mlsn\.[a-f0-9]{64}(?![A-Za-z0-9])", r"mlsn\.",
            "MailerSend API tokens"),
    # ---- AI APIs ------------------------------------------------------------
    _vendor("elevenlabs", "ai", r"sk_[a-f0-9]{48}(?![A-Za-z0-9])", r"sk_[a-f0-9]{48}", "ElevenLabs API keys",
            digit=True),
    _vendor("pinecone", "ai", r"pcsk_[A-Za-z0-9_]{40,}(?![A-Za-z0-9_])", r"pcsk_", "Pinecone API keys",
            digit=True),
    # ---- chat / social ------------------------------------------------------
    Detector("twitter_bearer", "chat", r"A{20}[A-Za-z0-9%]{50,}(?![A-Za-z0-9%+/=])",
             prefilter=(Prefilter(r"A{20}[A-Za-z0-9%]{50}"),), redact=token, check=digit_not_base64_line, tier=3,
             description="X / Twitter app-only bearer tokens (AAAA…%…)"),
    Detector("adafruit", "saas", r"aio_[A-Za-z0-9]{28}(?![A-Za-z0-9])", prefilter=(Prefilter(r"aio_[A-Za-z0-9]{28}"),),
             redact=token, check=has_digit, tier=3, description="Adafruit IO keys"),
]

_HASH = r"[./A-Za-z0-9+=]"
PASSWORD_HASH_DETECTORS: list[Detector] = [
    _vendor("krb5", "hash", r"\$krb5(?:tgs|asrep|pa)\$(?:17|18|23)\$[^\s\"'<>]{20,4096}", r"\$krb5(?:tgs|asrep|pa)\$",
            "Kerberos TGS-REP / AS-REP / pre-auth hashes ($krb5tgs$23$…)"),
    Detector("pbkdf2", "hash",
             rf"(?:\$pbkdf2(?:-sha(?:1|256|512))?\$[0-9]{{1,7}}\${_HASH}{{1,128}}\${_HASH}{{16,512}}"
             r"|pbkdf2:sha(?:1|256|512)(?::[0-9]{1,7})?\$[A-Za-z0-9./+]{1,64}\$[a-f0-9]{32,256}"
             r"|scrypt:[0-9]{1,7}:[0-9]{1,3}:[0-9]{1,3}\$[A-Za-z0-9./+]{1,64}\$[a-f0-9]{32,256}"
             r"|scrypt\$[0-9]{1,7}\$[A-Za-z0-9]{1,64}\$[0-9]{1,3}\$[0-9]{1,3}\$[A-Za-z0-9+/=]{20,512})"
             r"(?![./A-Za-z0-9+=])",
             prefilter=(Prefilter(r"\$pbkdf2"), Prefilter(r"pbkdf2:sha"), Prefilter(r"scrypt[:$][0-9]")),
             redact=token, tier=3, description="PBKDF2 / scrypt strings (passlib, Werkzeug, Django)"),
    _vendor("ldap_hash", "hash",
            r"\{(?i:ssha(?:256|384|512)?|sha(?:256|384|512)?|smd5|md5|pbkdf2(?:-sha(?:1|256|512))?|argon2|crypt)\}"
            r"[A-Za-z0-9+/=.$]{8,512}", r"\{(?i:ssha|sha|smd5|md5|pbkdf2|argon2|crypt)",
            "LDAP userPassword hashes ({SSHA}…, {CRYPT}…)"),
    Detector("db_hash", "hash",
             r"(?:\*[0-9A-F]{40}|md5[0-9a-f]{32}|SCRAM-SHA-256\$[0-9]{1,7}:[A-Za-z0-9+/=]{8,}\$[A-Za-z0-9+/=]{20,}:"
             r"[A-Za-z0-9+/=]{20,})(?![A-Za-z0-9+/=])",
             prefilter=(Prefilter(r"\*[0-9A-F]{8}"), Prefilter(r"md5[0-9a-f]{8}"), Prefilter(r"SCRAM-SHA-256\$")),
             redact=token, tier=3, description="MySQL native (*…), PostgreSQL md5… and SCRAM-SHA-256 verifiers"),
    _vendor("phpass", "hash", r"\$[PH]\$[./A-Za-z0-9]{31}(?![./A-Za-z0-9])", r"\$[PH]\$",
            "phpass portable hashes (WordPress, phpBB)"),
    Detector("ntlm", "hash", r":(?P<ntlmv>[0-9a-fA-F]{32}:[0-9a-fA-F]{32}):::",
             prefilter=(Prefilter(r":[0-9a-fA-F]{32}:[0-9a-fA-F]{32}:::"),), redact=value_group, tier=3,
             description="pwdump / secretsdump LM:NT hash pairs (user:rid:LM:NT:::)"),
]

_VALUE = r"\"(?:[^\"\\\n]|\\.){1,512}\"|'[^'\n]{1,512}'|`[^`\n]{1,512}`"
_STRING_TYPE = (
    r"(?:&(?:'static[ \t]+)?str|\[\]byte|std::string|(?:const[ \t]+)?char[ \t]*\*|[Ss]tring|str|NSString[ \t]*\*"
    r"|CharSequence|SecretStr|SecretString|QString|Text|bytes)\??"
)
_CMD_VALUE = r"'[^'\n]{1,256}'|\"[^\"\n]{1,256}\"|[^\s'\"]{1,256}"
_SP = r"[ \t]{0,8}"  # bounded in patterns, so that windowed prefilters stay supersets
# prefilters use unbounded repeats (Hyperscan missed matches of {0,n} before a
# keyword); the window still covers every hit the bounded pattern can match
_PSP = r"[ \t]*"
# prefilter form of a named value: quoted, or unquoted and not followed by
# ( or [ (named_value rejects those, and unquoted values over 63 characters)
_PF_VALUE = r"(?:[\"'`]|[^\s\"'`,;&<>(){}\[\]]+(?:[\s\"'`,;&<>){}\]]|$))"
CONTEXT_DETECTORS: list[Detector] = [
    Detector(
        "named_field", "context",
        _KW + r"(?P<named_fieldsuf>[A-Za-z0-9_.-]{0,40})[\"']?" + _SP + r"(?P<named_fieldop>=>|::=|:=|\?=|\+=|[:=])"
        r"(?![=>~:])" + _SP + r"(?P<named_fieldv>" + _VALUE + r"|(?>[^\s\"'`,;&<>(){}\[\]]{1,512}))",
        # the name must END with the keyword (+ a number), except VIRTUAL_*;
        # an unquoted value followed by "(" or "[" is code (get_token())
        prefilter=(Keyword(_KW, r"(?:[_.-]?[0-9]+)?[\"']?" + _PSP + r"(?:=>|::=|:=|\?=|\+=|[:=])" + _PSP + _PF_VALUE,
                           window=110, starts=_KW_STARTS),
                   Keyword("(?i:virtual_)", r"[A-Za-z0-9_.-]+[\"']?" + _PSP + r"(?:=>|::=|:=|\?=|\+=|[:=])" + _PSP
                           + _PF_VALUE, window=170, starts=("virtual_",))),
        redact=named_value, tier=3,
        description="a field NAMED as a credential (…PASSWORD, …SECRET, …TOKEN, …CREDENTIAL(S), …DSN, "
                    "API/SECRET/ACCESS…_KEY, VIRTUAL_*): its literal value whatever its shape; "
                    "=, :, =>, :=, ::=, ?=, += (shell, YAML, JSON, PHP, Makefile)",
    ),
    Detector(
        "typed_decl", "context",
        _KW + r"(?P<typed_declsuf>[A-Za-z0-9_]{0,40})(?P<typed_decltype>(?:" + _SP + ":" + _SP + r"|[ \t]{1,8})"
        + _STRING_TYPE + ")" + _SP + r"(?P<typed_declop>:?=)(?![=>])" + _SP + r"(?P<typed_declv>" + _VALUE + ")",
        # Hyperscan looks for the (rarer) type annotation; the keyword is
        # then found in the window before it
        prefilter=(Keyword(_KW, r"(?:[ \t:])" + _STRING_TYPE + _PSP + ":?=" + _PSP + r"[\"'`]", window=110,
                           starts=_KW_STARTS, keyword_in_expr=False),),
        redact=named_value, tier=3,
        description="typed declarations: var x string = \"…\", val x: String = \"…\", let x: &str = \"…\"",
    ),
    Detector(
        "xml_element", "context",
        r"<(?P<xml_elementn>[A-Za-z_][A-Za-z0-9_.:-]{0,80})(?:[ \t][^<>\n]{0,200})?>(?P<xml_elementv>[^<>\n]{1,512})"
        r"</(?P=xml_elementn)>",
        prefilter=(Keyword("<", r"[A-Za-z0-9_.:-]*" + _KW_END + r"[ \t>]", window=100, starts=("<",)),),
        redact=named_pair, tier=3, description="XML elements named as a credential: <password>…</password>",
    ),
    Detector(
        "xml_attr", "context",
        r"(?<![A-Za-z0-9_-])(?i:key|name)" + _SP + "=" + _SP + r"[\"'](?P<xml_attrn>[^\"'<>\n]{1,80})[\"']"
        r"[^<>\n]{0,200}?[ \t](?i:value)" + _SP + "=" + _SP + r"[\"'](?P<xml_attrv>[^\"'<>\n]{1,512})[\"']",
        prefilter=(Keyword("(?i:key|name)", _PSP + "=" + _PSP + r"[\"'][^\"'\n]*" + _KW_END + r"[\"']", window=110,
                           starts=("key", "name")),),
        redact=named_pair, tier=3,
        description="XML attribute pairs: <add key=\"DbPassword\" value=\"…\"/>, <property name=\"…token\" value=\"…\"/>",
    ),
    Detector(
        "xml_keyed", "context",
        r"(?<![A-Za-z0-9_-])(?i:key|name)" + _SP + "=" + _SP + r"[\"'](?P<xml_keyedn>[^\"'<>\n]{1,80})[\"']"
        r"[^<>\n]{0,100}>(?P<xml_keyedv>[^<>\n]{1,512})</",
        prefilter=(Keyword("(?i:key|name)", _PSP + "=" + _PSP + r"[\"'][^\"'\n]*" + _KW_END + r"[\"']", window=110,
                           starts=("key", "name")),),
        redact=named_pair, tier=3, description="keyed XML elements: <entry key=\"api.token\">…</entry>",
    ),
    Detector(
        "call_arg", "context",
        r"\( ?[\"'](?P<call_argn>[A-Za-z0-9_.:-]{1,80})[\"']" + _SP + "," + _SP
        + r"[\"'](?P<call_argv>[^\"'\\\n]{1,512})[\"']"
        r"|\[[\"'](?P<call_arg2n>[A-Za-z0-9_.:-]{1,80})[\"']\]" + _SP + "=(?!=)" + _SP
        + r"[\"'](?P<call_arg2v>[^\"'\\\n]{1,512})[\"']",
        # the name ends with the keyword (credential_name judges the last segment)
        prefilter=(Keyword(r"\(", r" ?[\"'][A-Za-z0-9_.:-]*" + _KW_END + r"[\"']" + _PSP + ",",
                           window=110, starts=("(",)),
                   Keyword(r"\[", r"[\"'][A-Za-z0-9_.:-]*" + _KW_END + r"[\"']\]" + _PSP + "=",
                           window=110, starts=("[",))),
        redact=named_pair, tier=3,
        description="call arguments and subscripts: setProperty(\"X_TOKEN\", \"…\"), define('DB_PASSWORD', '…'), "
                    "os.environ[\"API_KEY\"] = \"…\"",
    ),
    Detector(
        "cli_flag", "cli",
        r"(?<![A-Za-z0-9_-])-{1,2}(?!no-)(?:[A-Za-z0-9]{1,20}-){0,4}(?i:password|passwd|pass|pwd|passphrase|token|secret|"
        r"api-?key|access-key|secret-key)(?:[ \t]{1,8}|=)(?P<cli_flagv>" + _CMD_VALUE + ")",
        prefilter=(Keyword("-", r"-?(?:[A-Za-z0-9]+-)*(?i:pass|pwd|token|secret|api-?key|access-key|secret-key)"
                                r"[A-Za-z]*(?:[ \t]+|=)[^\s-]", window=140, starts=("-",)),),
        redact=flag_value, tier=3,
        description="--password X, --client-secret=X, -Password X (whatever the value's shape; not --no-password)",
    ),
    Detector(
        "cli_user_pass", "cli",
        r"(?<![A-Za-z0-9_-])-[uU][ \t]{1,8}(?:'[^'\n]{0,128}'|\"[^\"\n]{0,128}\"|[^\s'\"]{1,128})[ \t]{1,8}-[pP][ \t]{1,8}"
        r"(?P<cli_user_passv>" + _CMD_VALUE + ")",
        prefilter=(Keyword("-[uU]", r"[ \t]+[^\s]+[ \t]+-[pP][ \t]+[^\s-]", window=170,
                           starts=("-u",)),),
        redact=flag_value, tier=3, options={"not_after": re.compile(r"\b(?:mysql|mariadb)[a-z]*[ \t]")},
        description="-u USER -p PASSWORD (PsExec, mongo, sqlcmd -U/-P, rdesktop, docker login); not for mysql, "
                    "where a separate -p prompts",
    ),
    Detector(
        "psexec", "cli",
        r"(?i:psexec)(?:64)?(?:\.exe|\.py)?[ \t][^\n|;&]{0,300}?[ \t]-p[ \t]{1,8}(?P<psexecv>" + _CMD_VALUE + ")",
        prefilter=(Prefilter(r"(?i:psexec)"),),
        redact=flag_value, tier=3, options={"left": "alnum"}, description="PsExec -p PASSWORD in any argument order",
    ),
    Detector(
        "redis_cli", "cli",
        r"redis-cli[ \t](?:[^\n|;&]{0,200}?[ \t])?-a[ \t]{1,8}(?P<redis_cliv>" + _CMD_VALUE + ")",
        prefilter=(Prefilter(r"redis-cli[ \t]"),),
        redact=flag_value, tier=3, description="redis-cli -a PASSWORD",
    ),
    Detector(
        "rdp_pass", "cli",
        r"(?i:xfreerdp3?|wlfreerdp|freerdp3?)[ \t][^\n|;&]{0,300}?[ \t]/p:(?P<rdp_passv>" + _CMD_VALUE + ")",
        prefilter=(Prefilter(r"(?i:xfreerdp|wlfreerdp|freerdp)"),),
        redact=flag_value, tier=3, description="xfreerdp /p:PASSWORD",
    ),
    Detector(
        "net_use", "cli",
        r"(?i:net use )[^\n|&]{0,300}?(?:/(?i:user):[^\s]+[ \t]+(?P<net_usev>[^\s/\"'][^\s\"']*|\"[^\"\n]+\")"
        r"|(?<=[ \t])\\\\[^\s]+[ \t]+(?P<net_usev2>[^\s/\"'*][^\s\"']*|\"[^\"\n]+\")[ \t]+/(?i:user):)",
        prefilter=(Prefilter(r"(?i:net use )"),),
        redact=net_use_password, tier=3, description="net use … /user:U PASSWORD (and \\\\srv\\share PASSWORD /user:U)",
    ),
    Detector(
        "smb_user", "cli",
        r"-(?:U|-user=?)" + _SP + r"[\"']?[^\s%\"']{1,128}%(?P<smb_userv>[^\s\"']{1,256})",
        prefilter=(Keyword("-(?:U|-user)", "=?" + _PSP + r"[\"']?[^\s%\"']+%[^\s\"']", window=150,
                           starts=("-u", "--user")),),
        redact=flag_value, tier=3, description="smbclient / rpcclient -U user%PASSWORD",
    ),
    Detector(
        "htpasswd", "cli",
        r"htpasswd[ \t]+(?:-[A-Za-z]+[ \t]+)*-[A-Za-z]*b[A-Za-z]*[ \t]+(?:-[A-Za-z]+[ \t]+)*[^\s-][^\s]*[ \t]+[^\s]+[ \t]+"
        r"(?P<htpasswdv>" + _CMD_VALUE + ")",
        prefilter=(Prefilter(r"htpasswd[ \t]"),),
        redact=flag_value, tier=3, description="htpasswd -b FILE USER PASSWORD (positional)",
    ),
    Detector(
        "securestring", "cli",
        r"(?:ConvertTo-SecureString|convertto-securestring)[ \t]+(?:-(?i:string)[ \t]+)?(?P<securestringv>\"[^\"\n]{1,256}\"|'[^'\n]{1,256}')",
        prefilter=(Prefilter(r"(?:ConvertTo-SecureString|convertto-securestring)"),),
        redact=flag_value, tier=3, description="PowerShell ConvertTo-SecureString \"…\" -AsPlainText",
    ),
    Detector(
        "connstr", "context",
        r"(?i:password|pwd)" + _SP + "=" + _SP + r"(?P<connstrv>\{[^}\n]{1,256}\}|\"[^\"\n]{1,256}\"|'[^'\n]{1,256}'|[^;\"'\n]{1,256})",
        # a ";" just before the key (Server=…;Password=…)
        prefilter=(Keyword("(?i:password|pwd)", _PSP + "=", window=30, lead=";" + _PSP, starts=("password", "pwd")),),
        redact=connection_string_password, tier=3,
        description="ODBC / ADO.NET / JDBC connection strings: Password=…; Pwd={…}; (spaces and braces kept whole)",
    ),
    Detector(
        "k8s_secret", "context",
        r"(?:kind:" + _SP + r"[\"']?Secret[\"']?(?=[ \t]*(?:#[^\n]*)?(?:\r?\n|\Z))|\"kind\"" + _SP + ":" + _SP + r"\"Secret\")",
        prefilter=(Prefilter(r"kind:" + _SP + r"[\"']?Secret"), Prefilter(r"\"kind\"" + _SP + ":" + _SP + r"\"Secret\"")),
        redact=kubernetes_secret, tier=3,
        description="Kubernetes Secret manifests: every value under data: / stringData: (YAML or JSON)",
    ),
]

# ---------------------------------------------------------------------------
# Tokens glued to a preceding letter or digit (``helloask-proj-…``,
# ``aghp_…``, ``9sk-proj-…``, ``aAKIA…``): a token is found wherever its
# shape is, not only after a word boundary.  The detectors below may start
# right after a letter or digit; the token is redacted from its prefix on and
# the glued characters before it stay.  ``free``: the prefix and the shape
# (case, length, alphabet, a trailing boundary) are distinctive on their own.
# ``random``: the prefix also ends common words (ask, task, risk, desk,
# monkey, mexico…), so a glued match must hold a key body, a run of 20 or
# more letters and digits (``checks.random_looking``):
# ``task-proj-2024-planning-notes`` and ``task-<uuid>`` stay.  Every
# other detector keeps the leading boundary (short or word-like prefixes:
# ``SK`` + hex, ``AC`` + hex, ``EAA``, ``LTAI``, ``pat``, ``secret_``, ``r8_``,
# Discord's ``M``/``N``/``O``…, and the key = value contexts).
GLUED: dict[str, str] = {
    # tier 1
    "sk": "random", "stripe": "random", "mailgun": "random", "gh": "random", "ghpat": "random", "gitlab": "free",
    "gcp": "free", "glrunner": "free", "aws": "free", "gapi": "free", "pypi": "free", "sendgrid": "free",
    "slack": "random", "npm": "random", "hf": "random", "hforg": "random", "shopify": "free", "dop": "free",
    "whsec": "free", "tg": "free",
    "databricks": "random", "jwt": "free", "ya29": "random",
    # tier 2
    "square": "free", "braintree": "free", "atlassian": "free", "linear": "random", "supabase": "free",
    "doppler": "free", "age": "free", "vault": "random", "grafana": "random", "postman": "free", "dockerhub": "free",
    "heroku": "free", "sentrytok": "free", "onepassword": "free", "newrelic": "free", "figma": "free",
    "pulumi": "random", "planetscale": "free", "groq": "free", "pplx": "free", "xai": "random", "langsmith": "free",
    "buildkite": "free", "tailscale": "free", "dynatrace": "free", "rubygems": "free", "mapbox": "free",
    "artifactory": "free", "dropbox": "random", "dockercfg": "free",
    # tier 3
    "cloudflare_ca": "free", "yandex": "free", "openshift": "free", "scalingo": "free", "defined_net": "free",
    "sonarqube": "free", "sourcegraph": "free", "circleci": "free", "harness": "free", "octopus": "random",
    "infracost": "random", "prefect": "free", "readme": "free", "contentful": "free", "typeform": "free",
    "frameio": "free", "posthog": "free", "intra42": "free", "crates": "random", "clojars": "free",
    "flutterwave": "free", "shippo": "free", "easypost": "free", "duffel": "free", "brevo": "free",
    "mailersend": "free", "pinecone": "free",
}


def _glued(detectors: list[Detector]) -> list[Detector]:
    return [replace(d, options={**d.options, "glued": GLUED[d.name]}) if d.name in GLUED else d for d in detectors]


LEGACY_DETECTORS = _glued(LEGACY_DETECTORS)
VENDOR_DETECTORS = _glued(VENDOR_DETECTORS)
DETECTORS: list[Detector] = LEGACY_DETECTORS + VENDOR_DETECTORS + PASSWORD_HASH_DETECTORS + CONTEXT_DETECTORS
_unknown = set(GLUED) - {d.name for d in DETECTORS}
if _unknown:
    raise ValueError(f"GLUED names unknown detectors: {sorted(_unknown)}")
