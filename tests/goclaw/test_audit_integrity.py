"""The audit trail is append-only and tamper-evident (docs/audit-integrity.md): the database refuses UPDATE, DELETE and
TRUNCATE of the audit tables from the app role; every row is chained with a key the database never sees, so an
UPDATE, DELETE or INSERT made behind goclaw's back, even by the database superuser, makes `audit_verify` exit 1 and
name the row. Real pipeline calls, real group commit, a real superuser connection."""
from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from io import StringIO

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone

from goclaw.audit_chain import AppendOnlyError
from goclaw.audit_trail import audit_checkpoint_write, audit_verify
from goclaw.models import AuditPurge
from tests.concurrency import at_once
from tests.factories import make_agent
from tools_app import pipeline
from tools_app.models import AuditEvent, StoredToolOutput, ToolInvocation
from tools_app.services.audit import audit_event_record, audit_purge_expired

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def superuser(embedded_pg):
    """The database superuser on the test database: what someone with full database access could do."""
    with psycopg.connect(embedded_pg.uri(connection.settings_dict["NAME"], superuser=True), autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")  # ordinary triggers off: the superuser's way around them
        yield conn


@pytest.fixture
def agent():
    return make_agent(key="auditor-target")


def _calls(agent, count: int, threads: int = 1) -> list[str]:
    """Real pipeline calls outside any transaction (the group-commit path), from `threads` threads at once."""
    ids: list[str] = []
    lock = threading.Lock()

    def work(_n=0):
        for i in range(count):
            outcome = pipeline.execute(pipeline.ToolCall(agent=agent, tool="datetime", arguments={}, session_key=f"s{i}"))
            with lock:
                ids.append(outcome.invocation_id)
        connection.close()

    at_once(work, threads) if threads > 1 else work()
    return ids


def _verify() -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("audit_verify", stdout=out, stderr=err)
        code = 0
    except SystemExit as exc:
        code = exc.code
    return code, out.getvalue(), err.getvalue()


def _middle_of_a_chain() -> ToolInvocation:
    """A row with rows after it in its own chain."""
    for row in ToolInvocation.objects.order_by("chain", "chain_seq"):
        if ToolInvocation.objects.filter(chain=row.chain, chain_seq=row.chain_seq + 1).exists() and row.chain_seq > 0:
            return row
    raise AssertionError("no chain with three rows")


def test_calls_from_many_threads_are_chained_and_the_trail_verifies(agent):
    _calls(agent, 15, threads=4)
    rows = list(ToolInvocation.objects.values_list("chain", "chain_seq"))
    assert len(rows) == 60 and all(chain is not None for chain, _ in rows)
    by_chain: dict = {}
    for chain, seq in rows:
        by_chain.setdefault(chain, []).append(seq)
    assert any(len(seqs) > 1 for seqs in by_chain.values())  # group commit extends this process's chain
    assert all(sorted(seqs) == list(range(len(seqs))) for seqs in by_chain.values())  # no hole, no fork
    code, out, err = _verify()
    assert code == 0, err
    assert "tools_app_toolinvocation: 60 rows" in out and "audit trail intact" in out


def test_an_update_by_the_database_superuser_is_found_and_named(agent, superuser):
    _calls(agent, 6)
    victim = _middle_of_a_chain()
    superuser.execute("UPDATE tools_app_toolinvocation SET status = 'denied' WHERE id = %s", (victim.pk,))
    code, out, err = _verify()
    assert code == 1
    assert f"BROKEN tools_app_toolinvocation row {victim.pk}: its content does not match its hash" in err
    assert f"first: tools_app_toolinvocation row {victim.pk}" in out


def test_recomputing_an_unkeyed_hash_does_not_hide_an_update(agent, superuser):
    """Someone who knows the algorithm but not the key (it never enters the database) cannot make the row fit again."""
    _calls(agent, 4)
    victim = _middle_of_a_chain()
    superuser.execute("UPDATE tools_app_toolinvocation SET error = 'x', chain_hash = encode(sha256(convert_to(id::text, "
                      "'UTF8')), 'hex') WHERE id = %s", (victim.pk,))
    code, _, err = _verify()
    assert code == 1 and str(victim.pk) in err


def test_a_delete_in_the_middle_of_a_chain_is_found(agent, superuser):
    _calls(agent, 6)
    victim = _middle_of_a_chain()
    after = ToolInvocation.objects.get(chain=victim.chain, chain_seq=victim.chain_seq + 1)
    superuser.execute("DELETE FROM tools_app_toolinvocation WHERE id = %s", (victim.pk,))
    code, _, err = _verify()
    assert code == 1
    assert f"row {after.pk}: rows {victim.chain_seq}..{victim.chain_seq} of chain {victim.chain} before it are missing" in err


def test_deleting_the_first_rows_of_a_chain_needs_a_recorded_purge(agent, superuser):
    _calls(agent, 4)
    first = ToolInvocation.objects.get(chain_seq=0, chain=ToolInvocation.objects.order_by("-chain_seq")[0].chain)
    superuser.execute("DELETE FROM tools_app_toolinvocation WHERE id = %s", (first.pk,))
    code, _, err = _verify()
    assert code == 1 and "no retention purge removed the rows before it (deleted)" in err


def test_deleting_the_newest_rows_after_a_checkpoint_is_found(agent, superuser):
    _calls(agent, 5)
    assert audit_checkpoint_write() is not None
    newest = ToolInvocation.objects.order_by("-chain_seq")[0]
    superuser.execute("DELETE FROM tools_app_toolinvocation WHERE chain = %s AND chain_seq >= %s",
                      (newest.chain, newest.chain_seq - 1))
    code, _, err = _verify()
    assert code == 1
    assert (f"BROKEN tools_app_toolinvocation row {newest.pk}: checkpoint 0 recorded chain {newest.chain} up to place "
            f"{newest.chain_seq}, but it ends at place {newest.chain_seq - 2}: this row and any after it were deleted") in err


def test_rows_inserted_out_of_band_are_found(agent, superuser):
    _calls(agent, 3)
    template = ToolInvocation.objects.order_by("chain_seq")[0]
    forged, unchained = uuid.uuid4(), uuid.uuid4()
    # A copy of a real row under a new id, in a new chain with a made-up hash, and a row with no chain at all.
    columns = [f.column for f in ToolInvocation._meta.concrete_fields if f.column != "id"]
    listed = ", ".join(columns)
    superuser.execute(f"INSERT INTO tools_app_toolinvocation (id, {listed}) SELECT %s, {listed} "
                      f"FROM tools_app_toolinvocation WHERE id = %s", (forged, template.pk))
    superuser.execute("UPDATE tools_app_toolinvocation SET chain = %s, chain_seq = 0, chain_hash = repeat('ab', 32) "
                      "WHERE id = %s", (uuid.uuid4(), forged))
    superuser.execute(f"INSERT INTO tools_app_toolinvocation (id, {listed}) SELECT %s, {listed} "
                      f"FROM tools_app_toolinvocation WHERE id = %s", (unchained, template.pk))
    superuser.execute("UPDATE tools_app_toolinvocation SET chain = NULL, chain_seq = NULL, chain_hash = '' WHERE id = %s",
                      (unchained,))
    report = audit_verify()
    reasons = {problem.row_id: problem.reason for problem in report.problems}
    assert "does not match its hash" in reasons[str(forged)]
    assert "inserted out of band" in reasons[str(unchained)]
    code, _, _ = _verify()
    assert code == 1


def test_a_duplicated_row_at_the_same_place_is_found(agent, superuser):
    _calls(agent, 3)
    template = _middle_of_a_chain()
    copy = uuid.uuid4()
    columns = ", ".join(f.column for f in ToolInvocation._meta.concrete_fields if f.column != "id")
    superuser.execute(f"INSERT INTO tools_app_toolinvocation (id, {columns}) SELECT %s, {columns} "
                      f"FROM tools_app_toolinvocation WHERE id = %s", (copy, template.pk))
    report = audit_verify()
    assert not report.intact
    assert any("inserted out of band" in p.reason or "does not match" in p.reason for p in report.problems)


def test_the_app_role_cannot_update_delete_or_truncate_audit_rows(agent):
    _calls(agent, 2)  # every table gets a row: a row trigger has nothing to refuse in an empty table
    AuditEvent.objects.create(kind="test.event", actor="system")
    StoredToolOutput.objects.create(agent_key="a", tool_name="t", content="x")
    AuditPurge.objects.create(table="t", cutoff=timezone.now())
    audit_checkpoint_write()
    for table in ("tools_app_toolinvocation", "tools_app_storedtooloutput", "tools_app_auditevent",
                  "goclaw_auditcheckpoint", "goclaw_auditpurge"):
        for statement in (f"UPDATE {table} SET chain_hash = ''", f"DELETE FROM {table}", f"TRUNCATE {table}"):
            with pytest.raises(Exception, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(statement)
    assert ToolInvocation.objects.count() == 2


def test_the_orm_refuses_to_change_or_remove_audit_rows(agent):
    _calls(agent, 1)
    row = ToolInvocation.objects.get()
    row.status = "denied"
    with pytest.raises(AppendOnlyError):
        row.save()
    with pytest.raises(AppendOnlyError):
        row.delete()
    with pytest.raises(AppendOnlyError):
        ToolInvocation.objects.filter(pk=row.pk).update(status="denied")
    with pytest.raises(AppendOnlyError):
        ToolInvocation.objects.all().delete()


def test_the_purge_function_refuses_recent_cutoffs_and_other_tables(agent):
    from django.db import DatabaseError

    for table, cutoff in (("tools_app_toolinvocation", timezone.now()), ("tools_app_agent", timezone.now() - timedelta(days=9)),
                          ("goclaw_auditpurge", timezone.now() - timedelta(days=9))):
        with pytest.raises(DatabaseError), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT goclaw_audit_purge(%s::regclass, %s, 10)", [table, cutoff])


def test_the_retention_purge_keeps_the_trail_verifiable_and_records_what_it_removed(agent, settings):
    settings.AUDIT_RETENTION_DAYS = 30
    _calls(agent, 4)  # today's, on this process's chain
    old = timezone.now() - timedelta(days=40)
    with transaction.atomic():  # a chain of old rows followed by young ones, as a long-running process would leave
        rows = [ToolInvocation(agent_key="a", tool_name="t", status="ok", created_at=old + timedelta(seconds=i))
                for i in range(5)] + [ToolInvocation(agent_key="a", tool_name="t", status="ok") for _ in range(2)]
        ToolInvocation.objects.bulk_create(rows)
        StoredToolOutput.objects.create(agent_key="a", tool_name="t", content="old", created_at=old)
    audit_checkpoint_write(now=old + timedelta(minutes=1))  # checkpoints age out like the rows they recorded
    audit_checkpoint_write()
    report = audit_purge_expired(batch_size=2)
    assert (report["removed"], report["outputs_removed"]) == (5, 1)
    assert report["tables"]["goclaw.AuditCheckpoint"] == 1
    purge = AuditPurge.objects.filter(table="tools_app_toolinvocation").order_by("-created_at")[0]
    assert str(rows[0].chain) in purge.cut_chains and purge.cut_chains[str(rows[0].chain)][0] == 4
    assert sum(p.removed for p in AuditPurge.objects.filter(table="tools_app_toolinvocation")) == 5
    verified = audit_verify()
    assert verified.intact, [str(p) for p in verified.problems]


def test_an_audit_event_written_in_a_transaction_that_rolls_back_leaves_no_hole(agent):
    _calls(agent, 2)
    with pytest.raises(RuntimeError), transaction.atomic():
        audit_event_record(kind="approval.decided", actor="staff:alice", target="x")
        raise RuntimeError("the decision failed")
    audit_event_record(kind="approval.decided", actor="staff:bob", target="y")
    assert list(AuditEvent.objects.values_list("actor", flat=True)) == ["staff:bob"]
    assert audit_verify().intact


@pytest.mark.parametrize("arguments", [
    {"n": 1e20, "f": 1.0, "z": -0.0, "big": 10**30, "tiny": 1e-7, "neg": -2**63, "e": 1.5e300},
    {"nested": [{"b": 1, "a": [None, True, "é\u2028\U0001f600"]}], "": "empty key"},
    {"text": "x" * 5000, "unicode": "ÄÖÜ ß 中文 עברית"},
])
def test_rows_round_trip_through_postgresql_and_still_verify(agent, arguments):
    """What PostgreSQL keeps of a value (jsonb numbers, timestamps, floats) hashes the same as what was written."""
    from goclaw.db import FastInsert

    insert = FastInsert(ToolInvocation)
    insert(agent_key="a", tool_name="t", status="ok", arguments=arguments, duration_ms=0.1 + 0.2)
    with transaction.atomic():
        insert(agent_key="a", tool_name="t", status="ok", arguments=arguments, observe_reasons=["r"])
    ToolInvocation.objects.create(agent_key="a", tool_name="t", status="ok", arguments=arguments)
    report = audit_verify()
    assert report.intact, [str(p) for p in report.problems]


def test_nobody_deletes_or_edits_audit_rows_in_the_admin_not_even_a_superuser(agent, admin_client):
    _calls(agent, 1)
    row = ToolInvocation.objects.get()
    audit_event_record(kind="audit.exported", actor="staff:x")
    event = AuditEvent.objects.get()
    for model, pk in (("toolinvocation", row.pk), ("auditevent", event.pk)):
        assert admin_client.get(f"/admin/tools_app/{model}/{pk}/delete/").status_code == 403
        changelist = admin_client.get(f"/admin/tools_app/{model}/")
        assert changelist.status_code == 200 and b"delete_selected" not in changelist.content
        response = admin_client.post(f"/admin/tools_app/{model}/", {"action": "delete_selected", "_selected_action": [pk]})
        assert response.status_code in (200, 302)
    assert ToolInvocation.objects.filter(pk=row.pk).exists() and AuditEvent.objects.filter(pk=event.pk).exists()


def test_backdating_rows_so_that_retention_takes_them_early_is_found(agent, superuser, settings):
    """The purge takes rows by created_at: a superuser who backdates recent rows has the next retention purge remove
    them, recorded as an ordinary purge. A checkpoint knew when they were really created."""
    settings.AUDIT_RETENTION_DAYS = 30
    _calls(agent, 3)
    assert audit_checkpoint_write() is not None  # records this process's chain up to place 2
    _calls(agent, 3)
    chain = ToolInvocation.objects.get(chain_seq=2).chain
    superuser.execute("UPDATE tools_app_toolinvocation SET created_at = now() - interval '40 days' "
                      "WHERE chain = %s AND chain_seq <= 2", (chain,))
    assert audit_purge_expired(batch_size=100)["removed"] == 3
    code, _, err = _verify()
    assert code == 1
    assert f"recorded place 2 of chain {chain}" in err and "deleted early" in err
