"""`manage.py rotate_encryption_key` on real held calls: every registered sealed value ends under the new key and
still works (the held change is applied), an interrupted rotation resumes, a value no key opens is reported and left
alone, and nothing secret is ever printed (docs/secrets.md)."""
import base64
import io
import threading

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, connections, transaction

from goclaw import crypto
from goclaw.secrets import ENCRYPTED_FIELDS
from tests.factories import make_agent
from tools_app import execution, pipeline
from tools_app.models import ApprovalRequest, PendingChange
from tools_app.services import approvals as svc
from tools_app.services.agents import agent_update
from tools_app.services.approvals.identity import identity_seal_context
from tools_app.workspace import workspace_for

KEY_A, KEY_B, KEY_C = bytes(range(32)), bytes(range(100, 132)), bytes(range(200, 232))
HEX_A, B64_B, HEX_C = KEY_A.hex(), base64.b64encode(KEY_B).decode(), KEY_C.hex()
FAKE_KEY = "sk-proj-" + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4J3i2H1g0"
USER = "user-AKIA" + "Q7XK2M9PLR4TWZ3N"  # a credential-shaped user id: the real one is kept sealed
SEALED = ["tools_app.PendingChange.sealed_arguments", "tools_app.ApprovalRequest.call_context[sealed_identity]",
          "tools_app.PendingChange.call_context[sealed_identity]"]


@pytest.fixture
def keys(settings):
    """Start under key A."""
    settings.GOCLAW_ENCRYPTION_KEY, settings.GOCLAW_ENCRYPTION_OLD_KEYS = HEX_A, []
    return settings


def switch_to_b(settings) -> None:
    """Step 1 of docs/secrets.md: B becomes the key, A stays listed as an old key."""
    settings.GOCLAW_ENCRYPTION_KEY, settings.GOCLAW_ENCRYPTION_OLD_KEYS = B64_B, [HEX_A]


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user("rotation-approver", password="pw-rotation-1", is_staff=True)


def hold_write(agent, path: str) -> PendingChange:
    """A write_file call held for review (arguments and the caller's real ids sealed), through the real pipeline."""
    outcome = pipeline.execute(pipeline.ToolCall(agent=agent, tool="write_file", user_id=USER,
                                                 arguments={"path": path, "content": f"API_KEY={FAKE_KEY}\n"}))
    assert "pending_change_id" in outcome.extra, outcome.for_llm
    return PendingChange.objects.get(pk=outcome.extra["pending_change_id"])


def ask_exec(agent) -> ApprovalRequest:
    outcome = pipeline.execute(pipeline.ToolCall(agent=agent, tool="exec", user_id=USER, arguments={"command": "ls -la"}))
    assert outcome.status == "pending_approval", outcome.for_llm
    return ApprovalRequest.objects.get(pk=outcome.extra["approval_id"])


def sealed_values() -> dict[str, str]:
    """Every sealed value in the database, by place and row."""
    values = {}
    for change in PendingChange.objects.all():
        values[f"args {change.pk}"] = change.sealed_arguments
        values[f"identity {change.pk}"] = change.call_context.get("sealed_identity", "")
    for req in ApprovalRequest.objects.all():
        values[f"identity {req.pk}"] = req.call_context.get("sealed_identity", "")
    return values


def rotate(*args) -> tuple[str, CommandError | None]:
    out = io.StringIO()
    try:
        call_command("rotate_encryption_key", *args, stdout=out, stderr=out)
    except CommandError as exc:
        return out.getvalue() + str(exc), exc
    return out.getvalue(), None


def counts(output: str) -> dict[str, tuple[int, int, int, int]]:
    """{place: (rotated, already current, failed, left)} from the command's report lines, for the places this test
    plants values in (other registered places report zeros)."""
    found = {}
    for line in output.splitlines():
        label, sep, rest = line.partition(": ")
        if sep and label in ENCRYPTED_FIELDS and label in SEALED:
            found[label] = tuple(int(part.split()[-1]) for part in rest.split(", "))
    return found


def assert_nothing_secret(text: str, values) -> None:
    for secret in (FAKE_KEY, USER, "AKIAQ7XK2M9PLR4TWZ3N", HEX_A, B64_B, HEX_C, base64.b64encode(KEY_A).decode(),
                   KEY_B.hex(), *(v for v in values if v)):
        assert secret not in text


@pytest.fixture
def held(keys, db):
    """Under key A: two held writes (arguments + identity sealed) and one exec approval request (identity sealed)."""
    review = agent_update(agent=make_agent(), mode="review")
    cautious = agent_update(agent=make_agent(), mode="cautious")
    changes = [hold_write(review, "conf/one.env"), hold_write(review, "conf/two.env")]
    request = ask_exec(cautious)
    before = sealed_values()
    assert len(before) == 5 and all(v.startswith(f"v2:{crypto.key_id(KEY_A)}:") for v in before.values())
    return review, changes, request, before


def test_rotation_reseals_every_value_with_the_new_key_and_held_calls_still_resume(held, keys, staff, caplog):
    review, changes, request, before = held
    switch_to_b(keys)
    output, error = rotate("--batch-size", "1")
    assert error is None, output
    assert counts(output) == {SEALED[0]: (2, 0, 0, 0), SEALED[1]: (1, 0, 0, 0), SEALED[2]: (2, 0, 0, 0)}
    assert f"current key id: {crypto.key_id(KEY_B)}" in output
    after = sealed_values()
    assert set(after) == set(before) and all(v.startswith(f"v2:{crypto.key_id(KEY_B)}:") for v in after.values())
    assert_nothing_secret(output + caplog.text, [*before.values(), *after.values()])

    keys.GOCLAW_ENCRYPTION_OLD_KEYS = []  # key A is no longer needed
    assert svc.call_identity(ApprovalRequest.objects.get(pk=request.pk))["user_id"] == USER
    done = execution.pending_change_decide(change_id=changes[0].pk, accept=True, actor=staff)
    assert done.status == "accepted", done.result
    assert (workspace_for(review, USER) / "conf" / "one.env").read_text() == f"API_KEY={FAKE_KEY}\n"

    again, error = rotate()  # the accepted change keeps only its sealed identity
    assert error is None and counts(again) == {SEALED[0]: (0, 1, 0, 0), SEALED[1]: (0, 1, 0, 0), SEALED[2]: (0, 2, 0, 0)}


def test_a_dry_run_counts_and_opens_but_writes_nothing(held, keys):
    _, _, _, before = held
    switch_to_b(keys)
    output, error = rotate("--dry-run")
    assert error is None, output
    assert "would rotate 2" in output and "nothing written" in output
    assert counts(output) == {SEALED[0]: (2, 0, 0, 0), SEALED[1]: (1, 0, 0, 0), SEALED[2]: (2, 0, 0, 0)}
    assert sealed_values() == before


def test_an_interrupted_rotation_resumes_where_it_stopped(held, keys, monkeypatch):
    _, _, _, before = held
    switch_to_b(keys)
    first, error = rotate("--batch-size", "1", "--max-batches", "1")  # stopped on purpose after one row
    assert error is not None and "run the command again" in first
    assert counts(first)[SEALED[0]] == (1, 0, 0, 1)

    real_reseal, calls = crypto.reseal, []

    def crash_on_second(token, *, associated_data):
        calls.append(token)
        if len(calls) == 2:
            raise RuntimeError("process killed")
        return real_reseal(token, associated_data=associated_data)

    monkeypatch.setattr(crypto, "reseal", crash_on_second)
    with pytest.raises(RuntimeError):  # killed while re-sealing the approval request: its batch rolls back
        rotate("--batch-size", "2")
    monkeypatch.setattr(crypto, "reseal", real_reseal)
    request = ApprovalRequest.objects.get()
    assert request.call_context["sealed_identity"] == before[f"identity {request.pk}"]

    last, error = rotate("--batch-size", "2")
    assert error is None, last
    assert counts(last) == {SEALED[0]: (0, 2, 0, 0), SEALED[1]: (1, 0, 0, 0), SEALED[2]: (2, 0, 0, 0)}
    assert all(crypto.is_current(v) for v in sealed_values().values())


def test_a_value_no_key_opens_is_reported_by_row_and_left_untouched(held, keys, caplog):
    keys.GOCLAW_ENCRYPTION_KEY = HEX_C  # a key that is then lost: nothing configured opens this row any more
    lost = hold_write(agent_update(agent=make_agent(), mode="review"), "conf/lost.env")
    switch_to_b(keys)
    before = sealed_values()
    output, error = rotate()
    assert error is not None and "2 value(s) open with no configured key" in output
    assert f"failed to open: tools_app.PendingChange {lost.pk} sealed_arguments" in output
    assert f"failed to open: tools_app.PendingChange {lost.pk} call_context[sealed_identity]" in output
    assert counts(output) == {SEALED[0]: (2, 0, 1, 0), SEALED[1]: (1, 0, 0, 0), SEALED[2]: (2, 0, 1, 0)}
    after = sealed_values()
    assert after[f"args {lost.pk}"] == before[f"args {lost.pk}"] and after[f"identity {lost.pk}"] == before[f"identity {lost.pk}"]
    assert all(crypto.is_current(v) for k, v in after.items() if str(lost.pk) not in k)
    assert_nothing_secret(output + caplog.text, [*before.values(), *after.values()])


def test_a_value_moved_into_another_row_does_not_open_there_nor_rotate(held, keys):
    request = held[2]
    other = ask_exec(agent_update(agent=make_agent(), mode="cautious"))
    stolen = ApprovalRequest.objects.get(pk=request.pk).call_context["sealed_identity"]
    ApprovalRequest.objects.filter(pk=other.pk).update(call_context={**other.call_context, "sealed_identity": stolen})
    with pytest.raises(crypto.DecryptionError):
        crypto.decrypt_json(stolen, associated_data=identity_seal_context(other.pk))
    switch_to_b(keys)
    output, error = rotate()
    assert error is not None
    assert f"failed to open: tools_app.ApprovalRequest {other.pk} call_context[sealed_identity]" in output
    assert ApprovalRequest.objects.get(pk=other.pk).call_context["sealed_identity"] == stolen


@pytest.mark.django_db(transaction=True)
def test_rows_held_by_live_traffic_are_skipped_then_rotated_by_the_next_run(keys):
    review = agent_update(agent=make_agent(), mode="review")
    busy, free = hold_write(review, "conf/busy.env"), hold_write(review, "conf/free.env")
    switch_to_b(keys)
    locked, release = threading.Event(), threading.Event()

    def live_request():  # another connection holds the row, as a decision in progress would
        try:
            with transaction.atomic():
                PendingChange.objects.select_for_update().get(pk=busy.pk)
                locked.set()
                release.wait(60)
        finally:
            connections.close_all()

    worker = threading.Thread(target=live_request)
    worker.start()
    try:
        assert locked.wait(30)
        output, error = rotate()
    finally:
        release.set()
        worker.join(60)
    assert error is not None and "run the command again" in output
    assert counts(output)[SEALED[0]] == (1, 0, 0, 1)
    assert crypto.is_current(PendingChange.objects.get(pk=free.pk).sealed_arguments)
    assert not crypto.is_current(PendingChange.objects.get(pk=busy.pk).sealed_arguments)
    output, error = rotate()
    assert error is None, output
    assert counts(output)[SEALED[0]] == (1, 1, 0, 0)
    assert connection.is_usable()
