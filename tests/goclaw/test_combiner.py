"""Flat combining (goclaw.db.Combiner) and the audit INSERT's group commit (goclaw.db.FastInsert): threads of a
process that write at the same moment share one statement, and still each return only once its own row is
committed; one caller's bad item never costs another caller its result; a write inside a caller's transaction
stays in that transaction."""
import threading
import time

import psycopg
import pytest
from django.db import connection, transaction

from goclaw.db import Combiner, FastInsert
from tests.concurrency import at_once
from tools_app.models import ToolInvocation

THREADS = 16


def wait_until(condition, what: str) -> None:
    """Block until `condition()` holds; the deadline only turns a hang into a failure."""
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.001)


def observed_batches(monkeypatch, combiner: Combiner, *, hold_first_until: int = 0) -> list[list]:
    """The items of every `run_batch` call the combiner makes, in order (its behaviour unchanged). With
    `hold_first_until`, the first batch waits until that many items are in it or queued behind it, so the callers
    that arrive meanwhile are certain to be combined."""
    batches: list[list] = []
    real = combiner.run_batch

    def run_batch(items):
        if hold_first_until and not batches:
            wait_until(lambda: len(items) + len(combiner.queue) >= hold_first_until, "every caller queued")
        batches.append(list(items))
        return real(items)

    monkeypatch.setattr(combiner, "run_batch", run_batch)
    return batches


def other_connection() -> psycopg.Connection:
    """A connection of its own (not Django's, not any writer's): it sees committed rows only."""
    db = connection.settings_dict
    return psycopg.connect(dbname=db["NAME"], user=db["USER"], password=db["PASSWORD"], host=db["HOST"],
                           port=db["PORT"], autocommit=True)


def committed(conn: psycopg.Connection, pk) -> bool:
    return conn.execute("SELECT EXISTS (SELECT 1 FROM tools_app_toolinvocation WHERE id = %s)", (pk,)).fetchone()[0]


# --- FastInsert's group commit against the real database ----------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_threads_inserting_at_once_share_a_statement_and_each_returns_with_its_own_row_committed(monkeypatch):
    insert = FastInsert(ToolInvocation)
    batches = observed_batches(monkeypatch, insert.group_commit, hold_first_until=THREADS)
    seen_on_return: dict[int, bool] = {}

    def audit(n):
        with other_connection() as observer:  # opened before the write: only the check runs after it
            pk = insert(agent_key="combined", tool_name=f"tool-{n}", status="ok", arguments={"n": n})
            seen_on_return[n] = committed(observer, pk)

    at_once(audit, THREADS)
    assert seen_on_return == {n: True for n in range(THREADS)}  # durable the moment each thread got its answer
    rows = ToolInvocation.objects.filter(agent_key="combined")
    assert sorted(row.arguments["n"] for row in rows) == list(range(THREADS))
    assert {row.tool_name for row in rows} == {f"tool-{n}" for n in range(THREADS)}
    assert sum(len(batch) for batch in batches) == THREADS  # every row written once (no batch failed and re-ran)
    assert max(len(batch) for batch in batches) > 1  # and some went out together


@pytest.mark.django_db(transaction=True)
def test_concurrent_pipeline_calls_each_return_with_their_audit_row_committed(monkeypatch, agent):
    from tools_app import pipeline

    batches = observed_batches(monkeypatch, pipeline._insert_invocation.group_commit)
    seen_on_return: dict[int, tuple] = {}

    def call(n):
        with other_connection() as observer:
            outcome = pipeline.execute(pipeline.ToolCall(agent=agent, tool="datetime", arguments={},
                                                         session_key=f"together-{n}"))
            seen_on_return[n] = (outcome.status, committed(observer, outcome.invocation_id))

    at_once(call, THREADS)
    assert seen_on_return == {n: ("ok", True) for n in range(THREADS)}
    assert ToolInvocation.objects.filter(agent_key=agent.key).count() == THREADS
    assert sum(len(batch) for batch in batches) == THREADS


@pytest.mark.django_db(transaction=True)
def test_inside_a_callers_transaction_the_row_is_written_in_it_and_rolled_back_with_it(monkeypatch):
    insert = FastInsert(ToolInvocation)
    batches = observed_batches(monkeypatch, insert.group_commit)
    with other_connection() as observer:
        with pytest.raises(RuntimeError), transaction.atomic():
            pk = insert(agent_key="in-transaction", tool_name="t", status="ok")
            assert ToolInvocation.objects.filter(pk=pk).exists()  # the caller's transaction sees it
            assert not committed(observer, pk)  # nobody else does: not committed on another connection
            raise RuntimeError("roll back")
        assert not ToolInvocation.objects.filter(pk=pk).exists()  # gone with the transaction
        assert batches == []  # it never went through the group commit
        outside = insert(agent_key="in-transaction", tool_name="t", status="ok")
        assert committed(observer, outside)  # outside a transaction: committed when the call returns
    assert [len(batch) for batch in batches] == [1]  # that one went through the group commit, alone


@pytest.mark.django_db
def test_fields_left_out_get_their_model_defaults_and_unknown_fields_are_refused():
    insert = FastInsert(ToolInvocation)
    pk = insert(agent_key="defaults", tool_name="t", status="ok")
    row = ToolInvocation.objects.get(pk=pk)
    assert (row.arguments, row.observe_reasons, row.error, row.duration_ms, row.output_id, row.observed) == (
        {}, [], "", 0, None, False)
    assert row.created_at is not None
    with pytest.raises(TypeError, match="unknown fields"):
        insert(agent_key="defaults", tool_name="t", status="ok", colour="blue")


def prepared_inserts() -> list[str]:
    """The audit INSERTs PostgreSQL holds prepared for this session."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s",
                       ['%INSERT INTO "tools_app_toolinvocation"%'])
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.django_db
def test_a_new_insert_is_prepared_once_per_connection_and_then_only_run():
    insert = FastInsert(ToolInvocation)
    pks = [insert(agent_key="prepared", tool_name="t", status="ok") for _ in range(3)]
    assert ToolInvocation.objects.filter(pk__in=pks).count() == 3
    # One statement, parsed and planned once on this connection (the pipeline's own insert, if it ran here
    # before, is the very same statement).
    assert len(prepared_inserts()) == 1


@pytest.mark.django_db
def test_behind_a_transaction_pooler_the_insert_prepares_nothing_and_still_writes(monkeypatch):
    # Django's switch for transaction pooling (PgBouncer): no prepared statement may be left in the session.
    monkeypatch.setitem(connection.settings_dict, "DISABLE_SERVER_SIDE_CURSORS", True)
    insert = FastInsert(ToolInvocation)
    held = prepared_inserts()
    pks = [insert(agent_key="pooled", tool_name="t", status="ok") for _ in range(3)]
    assert ToolInvocation.objects.filter(pk__in=pks).count() == 3
    assert prepared_inserts() == held


# --- the Combiner itself (no database) ----------------------------------------------------------------------


class BadItem(Exception):
    pass


class Held:
    """A run_batch whose first batch (["first"]) is held until released, so the callers that come meanwhile
    queue up and are written together by the next of them; any batch holding "bad" raises."""

    def __init__(self):
        self.entered, self.release = threading.Event(), threading.Event()
        self.batches: list[list] = []

    def __call__(self, items):
        self.batches.append(list(items))
        if items == ["first"]:
            self.entered.set()
            assert self.release.wait(10)
        if "bad" in items:
            raise BadItem(f"cannot write {items}")
        return [f"wrote {item}" for item in items]


def combine(values: list[str]) -> tuple[Held, dict]:
    """Call a Combiner with "first" (held inside its batch), then with every one of `values` at once; each
    caller's outcome: ("result", value) or ("raised", exception)."""
    run_batch = Held()
    combiner = Combiner(run_batch)
    outcomes: dict[str, tuple] = {}

    def call(value):
        try:
            outcomes[value] = ("result", combiner(value))
        except Exception as exc:  # noqa: BLE001 - what the caller got
            outcomes[value] = ("raised", exc)

    first = threading.Thread(target=call, args=("first",))
    first.start()
    assert run_batch.entered.wait(10)
    others = [threading.Thread(target=call, args=(value,)) for value in values]
    for thread in others:
        thread.start()
    wait_until(lambda: len(combiner.queue) == len(values), "every caller queued behind the held batch")
    run_batch.release.set()
    for thread in [first, *others]:
        thread.join(10)
    assert not any(thread.is_alive() for thread in [first, *others])
    assert not combiner.busy and combiner.queue == []
    return run_batch, outcomes


def test_callers_that_arrive_while_a_batch_is_written_are_written_together_and_each_gets_its_own_result():
    run_batch, outcomes = combine(["a", "b", "c"])
    assert outcomes == {value: ("result", f"wrote {value}") for value in ("first", "a", "b", "c")}
    assert run_batch.batches[0] == ["first"]
    assert sorted(run_batch.batches[1]) == ["a", "b", "c"] and len(run_batch.batches) == 2


def test_a_bad_item_in_a_batch_fails_only_its_own_caller():
    run_batch, outcomes = combine(["good-1", "bad", "good-2"])
    assert outcomes["first"] == ("result", "wrote first")
    assert outcomes["good-1"] == ("result", "wrote good-1")
    assert outcomes["good-2"] == ("result", "wrote good-2")
    kind, error = outcomes["bad"]
    assert kind == "raised" and isinstance(error, BadItem)
    assert str(error) == "cannot write ['bad']"  # its own run's error, not the shared batch's
    # The shared batch failed; each of its callers then ran its item alone.
    assert sorted(run_batch.batches[1]) == ["bad", "good-1", "good-2"]
    assert sorted(run_batch.batches[2:]) == [["bad"], ["good-1"], ["good-2"]]


def test_a_lone_callers_error_reaches_it_unchanged_and_is_not_run_again():
    error = BadItem("the one error")
    batches = []

    def run_batch(items):
        batches.append(list(items))
        if items == ["alone"]:
            raise error
        return [f"wrote {item}" for item in items]

    combiner = Combiner(run_batch)
    with pytest.raises(BadItem) as raised:
        combiner("alone")
    assert raised.value is error
    assert batches == [["alone"]]  # once: a lone caller's failed run is its own, not retried
    assert combiner("next") == "wrote next"  # and the combiner is free for the next caller
    assert batches == [["alone"], ["next"]]
