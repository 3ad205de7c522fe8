"""Agent tokens are authenticated from a per-process cache (token_authenticate_cached): a hit costs no query, yet a
revoked, expired or deleted token, or a disabled or changed agent, is refused at once in the process that made the
change and within PROPAGATION_SECONDS in another one."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from goclaw import generations
from tests.factories import make_agent
from tests.servers import PROPAGATION_SECONDS, ROOT, DaphneProcess, up_env, wait_until
from tools_app.models import AgentToken
from tools_app.services import agents
from goclaw.generations import MISSING
from tools_app.services.agents import (TOKENS_CACHE, agent_update, token_authenticate_cached, token_authenticate_in_memory,
                                       token_issue, token_revoke)


@pytest.fixture
def warm(monkeypatch):
    """Generation counters and cache entries that stay fresh for the whole test, whatever the machine's load."""
    monkeypatch.setattr(generations, "CHECK_SECONDS", 3600)
    monkeypatch.setattr(agents, "TOKEN_CACHE_SECONDS", 3600)


def issued(**agent_fields) -> tuple[AgentToken, str]:
    return token_issue(agent=make_agent(**agent_fields), name="cache")


@pytest.mark.django_db
def test_a_cached_token_is_authenticated_without_a_query(warm, django_assert_num_queries):
    token, plain = issued()
    assert token_authenticate_cached(plain).pk == token.pk
    with django_assert_num_queries(0):
        assert token_authenticate_cached(plain).agent.pk == token.agent_id


@pytest.mark.django_db
def test_the_cache_is_keyed_by_the_tokens_hash_never_the_token(warm):
    _, plain = issued()
    token_authenticate_cached(plain)
    keys = list(agents._authenticated.entries)
    assert hashlib.sha256(plain.encode()).hexdigest() in keys
    assert not any(plain in key or plain.split("_", 2)[2] in key for key in keys)


@pytest.mark.django_db
def test_unknown_tokens_are_never_cached_so_guessing_cannot_fill_the_cache(warm, django_assert_num_queries):
    token, plain = issued()
    forged = plain[:-4] + ("AAAA" if not plain.endswith("AAAA") else "BBBB")
    assert token_authenticate_cached(plain) is not None
    for _ in range(2):
        with django_assert_num_queries(1):
            assert token_authenticate_cached(forged) is None
    assert list(agents._authenticated.entries) == [hashlib.sha256(plain.encode()).hexdigest()]


@pytest.mark.django_db
def test_a_revoked_token_is_refused_at_once_by_the_revoking_process(warm):
    token, plain = issued()
    assert token_authenticate_cached(plain) is not None
    token_revoke(token=token)
    assert token_authenticate_cached(plain) is None


@pytest.mark.django_db
def test_a_token_of_a_disabled_agent_is_refused_at_once(warm):
    token, plain = issued()
    assert token_authenticate_cached(plain) is not None
    agent_update(agent=token.agent, enabled=False)
    assert token_authenticate_cached(plain) is None


@pytest.mark.django_db
def test_a_changed_agent_is_served_with_its_new_configuration(warm):
    token, plain = issued(other_config={"rate_limit_per_hour": 5})
    assert token_authenticate_cached(plain).agent.other_config == {"rate_limit_per_hour": 5}
    agent_update(agent=token.agent, other_config={"rate_limit_per_hour": 9})
    assert token_authenticate_cached(plain).agent.other_config == {"rate_limit_per_hour": 9}


@pytest.mark.django_db
def test_a_token_that_expires_while_cached_is_refused_on_its_next_use(warm, monkeypatch, django_assert_num_queries):
    token, plain = token_issue(agent=make_agent(), expires_days=1)
    assert token_authenticate_cached(plain) is not None
    later = timezone.now() + timedelta(days=1, seconds=1)
    monkeypatch.setattr(timezone, "now", lambda: later)
    with django_assert_num_queries(0):  # the cached row's expiry is checked on every use
        assert token_authenticate_cached(plain) is None


@pytest.mark.django_db
def test_tokens_revoked_expired_or_deleted_in_the_admin_are_refused_at_once(warm, admin_client):
    revoked, revoked_plain = issued()
    expired, expired_plain = issued()
    deleted, deleted_plain = issued()
    for plain in (revoked_plain, expired_plain, deleted_plain):
        assert token_authenticate_cached(plain) is not None

    def change(token, **fields):
        form = {"name": token.name, "expires_at_0": "", "expires_at_1": "", **fields}
        response = admin_client.post(f"/admin/tools_app/agenttoken/{token.pk}/change/", form)
        assert response.status_code == 302, response.content[:2000]

    change(revoked, revoked="on")
    yesterday = timezone.localtime() - timedelta(days=1)
    change(expired, expires_at_0=yesterday.strftime("%Y-%m-%d"), expires_at_1=yesterday.strftime("%H:%M:%S"))
    assert admin_client.post(f"/admin/tools_app/agenttoken/{deleted.pk}/delete/", {"post": "yes"}).status_code == 302

    for plain in (revoked_plain, expired_plain, deleted_plain):
        assert token_authenticate_cached(plain) is None


@pytest.mark.django_db
def test_a_change_that_bypasses_the_models_is_seen_after_the_cache_lifetime(warm, monkeypatch):
    token, plain = issued()
    assert token_authenticate_cached(plain) is not None
    AgentToken.objects.filter(pk=token.pk).update(revoked=True)  # no signal, no generation bump: only the lifetime
    monkeypatch.setattr(agents, "TOKEN_CACHE_SECONDS", 0)
    assert token_authenticate_cached(plain) is None


@pytest.mark.django_db
def test_last_used_is_written_at_most_once_per_interval(warm, monkeypatch, django_assert_num_queries):
    token, plain = issued()
    token_authenticate_cached(plain)
    first = AgentToken.objects.get(pk=token.pk).last_used_at
    assert first is not None
    with django_assert_num_queries(0):
        token_authenticate_cached(plain)
    later = timezone.now() + timedelta(seconds=settings.TOOL_TOKEN_LAST_USED_INTERVAL + 1)
    monkeypatch.setattr(timezone, "now", lambda: later)
    with django_assert_num_queries(1):  # the UPDATE, the row itself still comes from the cache
        token_authenticate_cached(plain)
    assert AgentToken.objects.get(pk=token.pk).last_used_at == later


# --- answered in memory (the MCP endpoint's event loop: no query, else a worker thread) -------------------------
@pytest.mark.django_db
def test_a_token_is_answered_in_memory_only_once_read_and_never_with_a_query(warm, django_assert_num_queries):
    token, plain = issued()
    forged = plain[:-4] + ("AAAA" if not plain.endswith("AAAA") else "BBBB")
    with django_assert_num_queries(0):
        assert token_authenticate_in_memory(plain) is MISSING  # never read in this process: a thread reads it
    token_authenticate_cached(plain)
    with django_assert_num_queries(0):
        assert token_authenticate_in_memory(plain).pk == token.pk
        assert token_authenticate_in_memory(forged) is MISSING  # unknown tokens are never cached
        assert token_authenticate_in_memory("not-a-goclaw-token") is None  # malformed: refused outright


@pytest.mark.django_db
@pytest.mark.parametrize("change", ["revoke", "disable the agent"])
def test_after_a_change_a_token_is_never_granted_from_memory(warm, change, django_assert_num_queries):
    token, plain = issued()
    token_authenticate_cached(plain)
    if change == "revoke":
        token_revoke(token=token)
    else:
        agent_update(agent=token.agent, enabled=False)
    with django_assert_num_queries(0):
        assert token_authenticate_in_memory(plain) is MISSING  # the change dropped the cache: only a thread answers
    assert token_authenticate_cached(plain) is None  # a thread read the changed row
    with django_assert_num_queries(0):
        assert token_authenticate_in_memory(plain) is None  # and now memory refuses it too


@pytest.mark.django_db
def test_an_expired_cached_token_is_refused_in_memory_and_a_due_stamp_goes_to_a_thread(warm, monkeypatch):
    token, plain = token_issue(agent=make_agent(), expires_days=1)
    token_authenticate_cached(plain)
    soon = timezone.now() + timedelta(seconds=settings.TOOL_TOKEN_LAST_USED_INTERVAL + 1)
    monkeypatch.setattr(timezone, "now", lambda: soon)
    assert token_authenticate_in_memory(plain) is MISSING  # last_used_at is due: a write, so not on the loop
    token_authenticate_cached(plain)
    assert token_authenticate_in_memory(plain).pk == token.pk
    later = timezone.now() + timedelta(days=1, seconds=1)
    monkeypatch.setattr(timezone, "now", lambda: later)
    assert token_authenticate_in_memory(plain) is None


def test_stale_generation_counters_are_never_trusted_in_memory(monkeypatch):
    monkeypatch.setattr(generations._counters, "checked_at", None)
    assert generations.generation_cache(TOKENS_CACHE).peek_generation() is None
    assert generations.generation_cache(TOKENS_CACHE).peek("anything") is MISSING


# --- across processes ------------------------------------------------------------------------------------------
# A second goclaw process on the test database authenticates the tokens it reads on stdin with the cached service
# and answers, per line, whether it accepted the token, how many queries that took, the agent's config, and the
# token cache's generation it went by.
PROBE = """
import json, sys
from django.db import connection
from django.test.utils import CaptureQueriesContext
from tools_app.services.agents import _authenticated, token_authenticate_cached
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    with CaptureQueriesContext(connection) as queries:
        token = token_authenticate_cached(line.strip())
    print(json.dumps({"ok": token is not None, "queries": len(queries), "generation": _authenticated.generation,
                      "config": token.agent.other_config if token else None}), flush=True)
"""


class Probe:
    def __init__(self, env: dict[str, str]):
        self.proc = subprocess.Popen([sys.executable, "manage.py", "shell", "--no-imports", "-c", PROBE], cwd=ROOT, env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert json.loads(self.proc.stdout.readline()) == {"ready": True}

    def authenticate(self, plain: str) -> dict:
        self.proc.stdin.write(plain + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def cached(self, plain: str, generation: int) -> dict:
        """Authenticate until the other process answers from its cache filled under the test's `generation`."""
        return wait_until(lambda: ((answer := self.authenticate(plain))["ok"] and answer["queries"] == 0
                                   and answer["generation"] == generation and answer),
                          message="a cached authentication in the other process")

    def seen_in_time(self, plain: str, changed: float, seen) -> None:
        """Every request that starts later than PROPAGATION_SECONDS after the change sees it (the contract)."""
        while True:
            started = time.monotonic()
            answer = self.authenticate(plain)
            if seen(answer):
                return
            assert started - changed < PROPAGATION_SECONDS, f"the other process still answered {answer}"
            time.sleep(0.02)

    def stop(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


@pytest.fixture(scope="module")
def other_process(django_db_setup, django_db_blocker, tmp_path_factory):
    with django_db_blocker.unblock():
        url = DaphneProcess.database_url()
    probe = Probe(up_env(tmp_path_factory.mktemp("token-probe") / "var", DATABASE_URL=url, GOCLAW_LOG_LEVEL="warning"))
    yield probe
    probe.stop()


@pytest.fixture
def fresh_counter(transactional_db):
    """Flushing the database between tests restarts the counters: start this test's at a value no process saw."""
    from goclaw.models import CacheGeneration

    return CacheGeneration.objects.update_or_create(name=TOKENS_CACHE, defaults={"value": time.time_ns()})[0].value


@pytest.mark.parametrize("change", ["revoke", "disable the agent", "expire by saving the token", "delete the agent"])
def test_a_token_is_refused_by_another_process_within_the_propagation_bound(other_process, fresh_counter, change):
    token, plain = issued()
    other_process.cached(plain, fresh_counter)
    if change == "revoke":
        token_revoke(token=token)
    elif change == "disable the agent":
        agent_update(agent=token.agent, enabled=False)
    elif change == "expire by saving the token":  # what the admin's token form does
        token.expires_at = timezone.now() - timedelta(seconds=1)
        token.save()
    else:
        agents.agent_delete(queryset=type(token.agent).objects.filter(pk=token.agent_id))
    other_process.seen_in_time(plain, time.monotonic(), lambda answer: not answer["ok"])


def test_another_process_serves_a_changed_agents_new_configuration_within_the_bound(other_process, fresh_counter):
    token, plain = issued(other_config={"rate_limit_per_hour": 5})
    assert other_process.cached(plain, fresh_counter)["config"] == {"rate_limit_per_hour": 5}
    agent_update(agent=token.agent, other_config={"rate_limit_per_hour": 9})
    other_process.seen_in_time(plain, time.monotonic(), lambda answer: answer["config"] == {"rate_limit_per_hour": 9})
