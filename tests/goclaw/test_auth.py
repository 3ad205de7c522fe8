from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from tests.factories import make_agent
from tools_app.models import AgentToken
from tools_app.services.agents import agent_update, token_issue, token_revoke

pytestmark = pytest.mark.django_db


def _client(token: str | None = None, header: str | None = None) -> APIClient:
    client = APIClient()
    if header is not None:
        client.credentials(HTTP_AUTHORIZATION=header)
    elif token is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def test_valid_token_is_accepted_and_names_its_agent(agent, agent_token):
    response = _client(agent_token).get("/api/v1/agents/me")
    assert response.status_code == 200
    assert response.json()["key"] == agent.key


def test_plain_token_is_never_stored(agent):
    token, plain = token_issue(agent=agent, name="x")
    row = AgentToken.objects.get(pk=token.pk)
    stored_values = [str(v) for v in row.__dict__.values()]
    assert all(plain not in v for v in stored_values)
    assert plain.split("_", 2)[2] not in "".join(stored_values)
    assert row.prefix in plain and len(row.token_hash) == 64


@pytest.mark.parametrize("header", ["", "Bearer", "Bearer ", "Token abc", "Basic dXNlcjpwYXNz", "Bearer gclw_", "Bearer not-a-token",
                                    "Bearer gclw_nope_secret", "Bearer " + "x" * 5000])
def test_malformed_or_unknown_tokens_get_401(db, header):
    response = _client(header=header).get("/api/v1/agents/me")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"


def test_revoked_token_is_rejected(agent):
    token, plain = token_issue(agent=agent)
    assert _client(plain).get("/api/v1/agents/me").status_code == 200
    token_revoke(token=token)
    assert _client(plain).get("/api/v1/agents/me").status_code == 401


def test_expired_token_is_rejected(agent):
    token, plain = token_issue(agent=agent, expires_days=1)
    AgentToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert _client(plain).get("/api/v1/agents/me").status_code == 401


def test_token_of_disabled_agent_is_rejected(agent, agent_token):
    agent_update(agent=agent, enabled=False)
    assert _client(agent_token).get("/api/v1/agents/me").status_code == 401


def test_secret_of_one_token_does_not_work_with_another_tokens_prefix():
    a, b = make_agent(), make_agent()
    _, plain_a = token_issue(agent=a)
    _, plain_b = token_issue(agent=b)
    forged = "_".join(plain_a.split("_", 2)[:2] + [plain_b.split("_", 2)[2]])
    assert _client(forged).get("/api/v1/agents/me").status_code == 401
    assert _client(plain_b).get("/api/v1/agents/me").json()["key"] == b.key


def test_last_used_is_recorded(agent):
    token, plain = token_issue(agent=agent)
    _client(plain).get("/api/v1/agents/me")
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_staff_session_cannot_use_agent_only_endpoint(staff_api):
    response = staff_api.get("/api/v1/agents/me")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"


def test_issue_token_command_prints_a_working_token(agent, capsys):
    from django.core.management import call_command

    call_command("issue_token", agent.key, "--name", "cli", "--expires-days", "3")
    plain = capsys.readouterr().out.strip()
    assert _client(plain).get("/api/v1/agents/me").json()["key"] == agent.key
    assert AgentToken.objects.get(agent=agent, name="cli").expires_at is not None


def test_issue_token_command_for_unknown_agent_fails_cleanly(db):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="does not exist"):
        call_command("issue_token", "ghost")


def test_authenticated_agent_carries_its_decoded_configuration(db):
    from tools_app.services.agents import token_authenticate

    agent = make_agent(other_config={"rate_limit_per_hour": 7, "denied_paths": ["secret/"]})
    _, plain = token_issue(agent=agent)
    loaded = token_authenticate(plain).agent
    assert loaded.other_config == {"rate_limit_per_hour": 7, "denied_paths": ["secret/"]}
    assert loaded.created_at == agent.created_at and loaded.pk == agent.pk
