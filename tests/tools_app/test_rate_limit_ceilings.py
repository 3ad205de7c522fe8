"""Per-user and per-agent ceilings on top of the per-session bucket: a caller cannot dodge the limit with a
fresh session key or user id per call, and a refused call costs no bucket a token (P5 §3)."""
import pytest
from django import conf
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from goclaw.errors import ValidationError
from tests.factories import make_agent
from tools_app import pipeline
from tools_app.models import RateLimitBucket
from tools_app.ratelimit import rate_limit_take

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("counters_reread_only_after_a_change")]  # counts queries

def limits(session=0, user=0, agent=0):
    return {"rate_limit_per_hour": session, "rate_limit_user_per_hour": user, "rate_limit_agent_per_hour": agent}


def run(agent, session_key="", user_id=""):
    return pipeline.execute(pipeline.ToolCall(agent=agent, tool="datetime", arguments={}, session_key=session_key,
                                              user_id=user_id))


@pytest.fixture(params=["postgres", "redis"])
def backend(request, settings):
    """Every test runs against both bucket stores: PostgreSQL, and Redis when REDIS_URL is set."""
    if request.param == "redis":
        settings.REDIS_URL = request.getfixturevalue("redis_url")
    return request.param


def tokens(backend, key):
    if backend == "redis":
        import redis

        return float(redis.Redis.from_url(conf.settings.REDIS_URL).hget(f"goclaw:rl:{key}", "t"))
    return RateLimitBucket.objects.get(key=key).tokens


def test_a_fresh_session_key_per_call_is_stopped_by_the_user_ceiling(backend):
    agent = make_agent(other_config=limits(session=100, user=3, agent=1000))
    outcomes = [run(agent, session_key=f"fresh-{i}", user_id="mallory") for i in range(4)]
    assert [o.status for o in outcomes] == ["ok", "ok", "ok", "rate_limited"]
    assert outcomes[-1].for_llm == "rate limit exceeded: 3 tool calls per hour for this user"
    assert run(agent, session_key="fresh-x", user_id="alice").status == "ok"  # other users are not affected


def test_fresh_user_ids_and_session_keys_per_call_are_stopped_by_the_agent_ceiling(backend):
    agent = make_agent(other_config=limits(session=100, user=100, agent=3))
    outcomes = [run(agent, session_key=f"s-{i}", user_id=f"u-{i}") for i in range(4)]
    assert [o.status for o in outcomes] == ["ok", "ok", "ok", "rate_limited"]
    assert outcomes[-1].for_llm == "rate limit exceeded: 3 tool calls per hour for this agent"
    assert run(make_agent(other_config=limits(agent=3)), session_key="s-9", user_id="u-9").status == "ok"


def test_calls_without_a_session_key_share_one_session_bucket_per_user(backend):
    agent = make_agent(other_config=limits(session=2, user=100, agent=100))
    assert [run(agent, user_id="bob").status for _ in range(3)] == ["ok", "ok", "rate_limited"]
    assert run(agent, user_id="carol").status == "ok"


def test_a_refused_call_takes_no_token_from_the_other_buckets(backend):
    agent = make_agent(other_config=limits(session=1, user=3, agent=100))
    assert run(agent, session_key="a", user_id="eve").status == "ok"
    refused = [run(agent, session_key="a", user_id="eve") for _ in range(5)]
    assert {o.status for o in refused} == {"rate_limited"}
    assert refused[0].for_llm == "rate limit exceeded: 1 tool calls per hour for this session"
    # The five refusals cost the user and agent buckets nothing: two more sessions still fit in the user's 3.
    assert run(agent, session_key="b", user_id="eve").status == "ok"
    assert run(agent, session_key="c", user_id="eve").status == "ok"
    assert run(agent, session_key="d", user_id="eve").status == "rate_limited"
    assert tokens(backend, f"u:{agent.key}:eve") == pytest.approx(0, abs=0.01)
    assert tokens(backend, f"a:{agent.key}") == pytest.approx(97, abs=0.01)


def test_a_refusal_by_the_agent_ceiling_leaves_the_session_and_user_buckets_alone(backend):
    agent = make_agent(other_config=limits(session=10, user=10, agent=1))
    assert run(agent, session_key="s", user_id="u").status == "ok"
    assert run(agent, session_key="s", user_id="u").status == "rate_limited"
    assert tokens(backend, f"s:{agent.key}:s") == pytest.approx(9, abs=0.01)
    assert tokens(backend, f"u:{agent.key}:u") == pytest.approx(9, abs=0.01)


def test_the_refusal_names_every_ceiling_that_was_hit(backend):
    agent = make_agent(other_config=limits(session=1, user=1, agent=100))
    assert run(agent, session_key="s", user_id="u").status == "ok"
    assert run(agent, session_key="s", user_id="u").for_llm == (
        "rate limit exceeded: 1 tool calls per hour for this session; 1 tool calls per hour for this user")


def test_zero_disables_a_ceiling(backend):
    agent = make_agent(other_config=limits(session=0, user=0, agent=0))
    assert {run(agent, session_key=f"s{i}", user_id="u").status for i in range(5)} == {"ok"}


def test_the_global_settings_apply_when_the_agent_does_not_override_them(settings, backend):
    settings.TOOL_RATE_LIMIT_USER_PER_HOUR = 2
    settings.TOOL_RATE_LIMIT_AGENT_PER_HOUR = 1000
    agent = make_agent()
    assert [run(agent, session_key=f"s{i}", user_id="u").status for i in range(3)] == ["ok", "ok", "rate_limited"]


def test_caller_keys_holding_credentials_never_become_bucket_keys(backend):
    secret = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3z5A"
    agent = make_agent(other_config=limits(session=5, user=5, agent=5))
    assert run(agent, session_key=f"s-{secret}", user_id=f"u-{secret}").status == "ok"
    if backend == "redis":
        import redis

        keys = [k.decode() for k in redis.Redis.from_url(conf.settings.REDIS_URL).keys("goclaw:rl:*")]
    else:
        keys = list(RateLimitBucket.objects.filter(key__contains=agent.key).values_list("key", flat=True))
    assert len(keys) == 3 and not any(secret in k for k in keys)


def test_all_buckets_are_checked_in_one_sql_statement(settings):
    settings.REDIS_URL = ""
    rate_limit_take([("warm:1", 5)])  # the statement is prepared on this connection (at most once per connection)
    with CaptureQueriesContext(connection) as queries:
        assert rate_limit_take([("s:x:1", 5), ("u:x:1", 5), ("a:x", 5)]) == []
    assert len(queries) == 1
    with CaptureQueriesContext(connection) as queries:
        assert rate_limit_take([("s:x:1", 0), ("u:x:1", 0)]) == []
    assert len(queries) == 0


def statements(queries) -> list[str]:
    return [q["sql"].split()[0] for q in queries]


def prepared_takes() -> list[str]:
    """The rate-limit statements PostgreSQL holds prepared for this session."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s", ["%goclaw_rate_limit_take%"])
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.django_db(transaction=True)
def test_a_new_connection_prepares_the_take_once_and_it_keeps_working_after_a_rollback(settings):
    settings.REDIS_URL = ""
    connection.close()
    assert rate_limit_take([("p:1", 2)]) == []
    assert rate_limit_take([("p:2", 2)]) == []
    assert len(prepared_takes()) == 1  # parsed and planned once, then only run
    with pytest.raises(RuntimeError), transaction.atomic():
        assert rate_limit_take([("p:1", 2)]) == []
        raise RuntimeError("roll back")  # undoes the take
    with CaptureQueriesContext(connection) as queries:
        assert rate_limit_take([("p:1", 2)]) == []
        assert rate_limit_take([("p:1", 2)]) == [0]
    assert statements(queries) == ["SELECT", "SELECT"]  # the statement itself, its values bound apart from the text
    assert all("p:1" not in q["sql"] for q in queries)
    assert len(prepared_takes()) == 1


def test_behind_a_transaction_pooler_the_take_is_sent_whole_and_stays_all_or_nothing(settings, monkeypatch):
    settings.REDIS_URL = ""
    # Django's switch for transaction pooling (PgBouncer): no session state such as a prepared statement survives.
    monkeypatch.setitem(connection.settings_dict, "DISABLE_SERVER_SIDE_CURSORS", True)
    held = prepared_takes()
    assert rate_limit_take([("d:one", 1), ("d:two", 5)]) == []
    assert rate_limit_take([("d:one", 1), ("d:two", 5)]) == [0]
    assert prepared_takes() == held  # nothing prepared
    assert RateLimitBucket.objects.get(key="d:two").tokens == pytest.approx(4, abs=0.01)


@pytest.fixture
def server_side_binding(monkeypatch):
    """The next connection binds parameters on the server (OPTIONS server_side_binding); closed again afterwards."""
    connection.close()
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", {**connection.settings_dict["OPTIONS"], "server_side_binding": True})
    yield
    connection.close()


@pytest.mark.django_db(transaction=True)
def test_with_server_side_binding_the_take_is_sent_whole_and_stays_all_or_nothing(settings, server_side_binding):
    settings.REDIS_URL = ""
    with CaptureQueriesContext(connection) as queries:
        assert rate_limit_take([("b:one", 1), ("b:two", 5)]) == []
        assert rate_limit_take([("b:one", 1), ("b:two", 5)]) == [0]
    assert statements(queries) == ["SELECT", "SELECT"]
    assert RateLimitBucket.objects.get(key="b:two").tokens == pytest.approx(4, abs=0.01)


@pytest.mark.parametrize("pooled", [False, True])
def test_bucket_keys_are_stored_exactly_whatever_characters_they_hold(settings, monkeypatch, pooled):
    settings.REDIS_URL = ""
    monkeypatch.setitem(connection.settings_dict, "DISABLE_SERVER_SIDE_CURSORS", pooled)
    keys = ["s:a:x', '{}'); DROP TABLE x; --", 's:a:{"b",c}', "s:a:back\\slash NULL", "s:a:é ☃ \t"]
    assert rate_limit_take([(k, 1) for k in keys]) == []
    assert rate_limit_take([(k, 1) for k in keys]) == [0, 1, 2, 3]
    assert sorted(RateLimitBucket.objects.filter(key__in=keys).values_list("key", flat=True)) == sorted(keys)


def test_take_is_all_or_nothing_at_the_store_level(backend):
    assert rate_limit_take([("t:one", 1), ("t:two", 5)]) == []
    assert rate_limit_take([("t:one", 1), ("t:two", 5)]) == [0]
    assert rate_limit_take([("t:two", 5), ("t:three", 1)]) == []
    assert tokens(backend, "t:two") == pytest.approx(3, abs=0.01)


@pytest.mark.parametrize("key", ["rate_limit_user_per_hour", "rate_limit_agent_per_hour"])
def test_per_agent_overrides_are_validated(key):
    with pytest.raises(ValidationError):
        make_agent(other_config={key: -1})
    with pytest.raises(ValidationError):
        make_agent(other_config={key: "lots"})
    assert make_agent(other_config={key: 0}).other_config == {key: 0}


def _synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]


@pytest.fixture
def durable_session():
    """This session commits synchronously, as a real instance does (the test cluster is set to `off` for speed)."""
    with connection.cursor() as cursor:
        cursor.execute("SET synchronous_commit = on")
    yield
    with connection.cursor() as cursor:
        cursor.execute("RESET synchronous_commit")


@pytest.mark.django_db(transaction=True)
def test_a_take_on_its_own_commits_asynchronously_and_leaves_the_session_synchronous(settings, durable_session):
    # Its own commit does not wait for the WAL flush (the agent's shared bucket row is free again at once); the
    # setting ends with that commit, so the audit row written next commits synchronously as before.
    from tools_app.ratelimit import _PG_TAKE

    settings.REDIS_URL = ""
    assert connection.in_atomic_block is False
    assert rate_limit_take([("async:1", 2)]) == []
    assert _synchronous_commit() == "on"
    with transaction.atomic():  # what the statement does to the transaction it runs in
        _PG_TAKE.run(['[[{"key": "async:1", "cap": 2.0}]]', 3600.0, True])
        assert _synchronous_commit() == "off"
    assert _synchronous_commit() == "on"
    assert RateLimitBucket.objects.get(key="async:1").tokens == pytest.approx(0, abs=0.01)
    assert rate_limit_take([("async:1", 2)]) == [0]


@pytest.mark.django_db(transaction=True)
def test_a_take_inside_a_callers_transaction_keeps_that_transaction_synchronous(settings, durable_session):
    settings.REDIS_URL = ""
    with transaction.atomic():
        assert rate_limit_take([("sync:1", 2)]) == []
        assert _synchronous_commit() == "on"
    assert RateLimitBucket.objects.filter(key="sync:1").exists()
