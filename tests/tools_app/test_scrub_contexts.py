"""P7 scrubber detectors: exact output (only the credential goes) for the
contexts and shapes added in P7, and the ordinary text they must leave alone.
The one-line cases live in corpus/secrets.txt and corpus/clean_output.txt;
these are the ones that need several lines or an exact result."""
from __future__ import annotations

import os

import pytest

from tools_app.security.scrub import REDACTED, Scrubber
from tools_app.security.scrub.detectors import DETECTORS
from tools_app.security.scrub.strategies import credential_name

R = REDACTED


@pytest.mark.parametrize("text,expected", [
    ("DB_PASSWORD=letmein", f"DB_PASSWORD={R}"),
    ("export CREDENTIAL=swordfish", f"export CREDENTIAL={R}"),
    ("VIRTUAL_OPENAI_KEY=vk-team-alpha", f"VIRTUAL_OPENAI_KEY={R}"),
    ("API_TOKEN ?= abcdefgh", f"API_TOKEN ?= {R}"),
    ("$db_pass = 'qwerty';", f"$db_pass = '{R}';"),
    ('var apiToken string = "gotok-4ff1"', f'var apiToken string = "{R}"'),
    ('val clientSecret: String = "kotlin-secret-value"', f'val clientSecret: String = "{R}"'),
    ("<password>bluebird</password>", f"<password>{R}</password>"),
    ('<add key="DbPassword" value="s3cr3t!"/>', f'<add key="DbPassword" value="{R}"/>'),
    ('System.setProperty("X_TOKEN", "prop-tok-1")', f'System.setProperty("X_TOKEN", "{R}")'),
    ('os.environ["API_KEY"] = "envkey-77"', f'os.environ["API_KEY"] = "{R}"'),
    ("PsExec.exe \\\\fs -u CORP\\admin -p Winter2024! cmd", f"PsExec.exe \\\\fs -u CORP\\admin -p {R} cmd"),
    ("net use Z: \\\\srv\\share /user:CORP\\bob Tr0ub4dor", f"net use Z: \\\\srv\\share /user:CORP\\bob {R}"),
    ("smbclient //srv/share -U alice%smbpass1", f"smbclient //srv/share -U alice%{R}"),
    ("Server=db;Database=app;User Id=sa;Password=my secret pw;Encrypt=true",
     f"Server=db;Database=app;User Id=sa;Password={R};Encrypt=true"),
    ("Driver={ODBC};Server=db;Uid=app;Pwd={pa;ss word};", f"Driver={{ODBC}};Server=db;Uid=app;Pwd={{{R}}};"),
    ("Administrator:500:aad3b435b51404eeaad3b435b51404ee:31d6cfe0d16ae931b73c59d7e0c089c0:::",
     f"Administrator:500:{R}:::"),
])
def test_credential_contexts_lose_only_the_value(text, expected):
    assert Scrubber().scrub_text(text) == expected


def test_every_value_of_a_kubernetes_secret_manifest_goes():
    manifest = (
        "apiVersion: v1\n"
        "data:\n"
        "  username: YWRtaW4=\n"
        "  config.yaml: |\n"
        "    endpoint: https://db\n"
        "    mode: primary\n"
        "kind: Secret\n"
        "metadata:\n"
        "  name: app-credentials\n"
        "type: Opaque\n"
        "---\n"
        "apiVersion: v1\n"
        "data:\n"
        "  username: YWRtaW4=\n"
        "kind: ConfigMap\n"
    )
    out = Scrubber().scrub_text(manifest)
    assert out.splitlines() == [
        "apiVersion: v1", "data:", f"  username: {R}", "  config.yaml: |", f"    {R}", f"    {R}", "kind: Secret",
        "metadata:", "  name: app-credentials", "type: Opaque", "---", "apiVersion: v1", "data:",
        "  username: YWRtaW4=", "kind: ConfigMap",
    ]


def test_secret_in_a_list_of_manifests_keeps_its_siblings():
    items = (
        "items:\n- apiVersion: v1\n  kind: Secret\n  stringData:\n    token: plain-text-token\n"
        "  metadata:\n    name: s1\n"
    )
    assert Scrubber().scrub_text(items) == items.replace("plain-text-token", R)


@pytest.mark.parametrize("text", [
    "VIRTUAL_ENV=/home/dev/project/.venv",
    "PWD=/srv/app",
    "password: string",
    "token = get_token()",
    "password = os.environ['DB_PASSWORD']",
    "secretName: db-credentials-v2",
    "max_tokens: 1024",
    "next_page_token=CiAKGjBpNDd2",
    'fetch(url, {credentials: "include"})',
    "mysql -u root -p appdb",
    "docker login -u ci --password-stdin",
    "psql --no-password -h db appdb",
    "Password: Enter it below",
    'choices = [("password", "Password")]',
    "kind: SecretProviderClass",
    '{"tags": ["secret", "pool", "token"]}',
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "commit 82d63c6e7b6d5691b4ffa441542a5012461dca6c",
    "550e8400-e29b-41d4-a716-446655440000",
])
def test_ordinary_text_near_the_new_detectors_is_untouched(text):
    assert Scrubber().scrub(text) == (text, 0)


@pytest.mark.parametrize("name,expected", [
    ("DB_PASSWORD", "pass"), ("dbPassword", "pass"), ("SECRET_KEY", "secret"), ("apiKey", "secret"),
    ("VIRTUAL_OPENAI", "secret"), ("CREDENTIALS", "secret"), ("SENTRY_DSN", "dsn"),
    ("VIRTUAL_ENV", None), ("sort_key", None), ("KeyError", None), ("secretName", None), ("next_token", None),
    ("pass", None), ("token_count", None), ("monkey", None),
])
def test_credential_names_are_judged_by_their_last_segment(name, expected):
    assert credential_name(name) == expected


def test_every_detector_is_documented():
    doc_path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "scrubbing.md")
    with open(doc_path, encoding="utf-8") as fh:
        doc = fh.read()
    missing = [d.name for d in DETECTORS if f"`{d.name}`" not in doc]
    assert not missing, missing
    assert all(d.description for d in DETECTORS)
