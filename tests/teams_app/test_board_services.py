"""The board's services: every action and transition (legal and illegal), who may do what, dependencies (chains,
cycles, escalation), inputs refused rather than truncated, and the reads the tools and API build on."""
from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from teams_app import selectors
from teams_app.errors import (DependencyCycle, TaskConflict, TaskInvalid, TaskNotFound, TeamInvalid, TeamNotFound,
                              TeamPermissionDenied)
from teams_app.models import TaskComment, TaskDependency, TeamEvent, TeamMember, TeamMessage, TeamTask
from teams_app.services import tasks as svc
from teams_app.services.teams import team_create, team_member_remove, team_update
from tests.factories import make_agent

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("counters_reread_only_after_a_change")]  # counts queries


def fresh(task: TeamTask) -> TeamTask:
    return TeamTask.objects.select_related("owner").get(pk=task.pk)


def event_types(task: TeamTask) -> list[str]:
    return list(TeamEvent.objects.filter(task=task).order_by("created_at", "id").values_list("event_type", flat=True))


def claimed(crew, make_task, subject="Write the report", actor=None, **kwargs) -> TeamTask:
    task = make_task(subject, **kwargs)
    return svc.task_claim(actor=actor or crew.as_worker, team=crew.team, task=task)


# ---------------------------------------------------------------- create

def test_tasks_are_numbered_per_team_in_the_database(crew, make_task):
    other = team_create(actor=crew.system, name="other-team", lead=make_agent())
    first, second = make_task("one"), make_task("two")
    elsewhere = svc.task_create(actor=crew.system, team=other, subject="elsewhere")
    assert (first.identifier, second.identifier, elsewhere.identifier) == ("T-001", "T-002", "T-001")
    crew.team.refresh_from_db()
    assert crew.team.task_counter == 2


def test_a_task_without_an_assignee_is_open_and_one_with_an_assignee_waits_for_them(crew, make_task):
    open_task = make_task("open")
    assigned = make_task("assigned", assignee=crew.worker2)
    assert (open_task.status, open_task.owner) == ("pending", None)
    assert (assigned.status, assigned.owner) == ("pending", crew.worker2)
    assert TeamEvent.objects.get(task=assigned, event_type="created").data == {"assignee": crew.worker2.key,
                                                                               "blocked_by": []}


def test_the_assignee_must_be_a_member_never_the_lead_or_an_outsider(crew, make_task):
    with pytest.raises(TaskInvalid, match="is the lead of team .* never works tasks"):
        make_task(assignee=crew.lead)
    with pytest.raises(TaskInvalid, match="is not in team"):
        make_task(assignee=crew.outsider)
    with pytest.raises(TaskInvalid, match="reviewer"):
        make_task(assignee=crew.reviewer)
    assert not TeamTask.objects.exists()


def test_only_the_lead_or_a_person_creates_tasks_and_outsiders_learn_nothing(crew, make_task):
    with pytest.raises(TeamPermissionDenied) as denied:
        make_task(actor=crew.as_worker)
    assert denied.value.message == f"Only the lead can create tasks in team {crew.team.name}; you are a member."
    with pytest.raises(TeamNotFound):
        make_task(actor=crew.as_outsider)
    by_person = make_task(actor=crew.person)
    assert by_person.created_by == "user:staff-person"
    assert make_task().created_by == f"agent:{crew.lead.key}"


def test_blocked_by_names_every_bad_reference(crew, make_task):
    done = claimed(crew, make_task, "done")
    svc.task_complete(actor=crew.as_worker, task=done, result="ok")
    other = team_create(actor=crew.system, name="other-team", lead=make_agent())
    for n in range(5):
        svc.task_create(actor=crew.system, team=other, subject=f"theirs {n}")
    with pytest.raises(TaskInvalid) as bad:
        make_task("waits", blocked_by=["T-001", "T-005", "nonsense"])
    message = bad.value.message
    assert "T-001 is already completed" in message and "T-005 is not on team" in message
    assert "'nonsense' is not a task identifier" in message
    assert TeamTask.objects.filter(team=crew.team).count() == 1


def test_a_task_with_unfinished_blockers_starts_blocked(crew, make_task):
    first = make_task("first")
    waiting = make_task("waiting", blocked_by=["t-1"])
    assert waiting.status == "blocked"
    assert selectors.task_as_dict(fresh(waiting))["blocked_by"] == [first.identifier]


@pytest.mark.parametrize("field,value,message", [
    ("subject", "s" * 501, "subject is 501 characters long; the limit is 500"),
    ("description", "d" * 20_001, "description is 20,001 characters long; the limit is 20,000"),
    ("subject", "", "subject is required"),
    ("subject", "a\x00b", "NUL"),
    ("subject", ["list"], "subject must be text"),
    ("priority", "high", "priority must be a whole number"),
    ("priority", True, "priority must be a whole number"),
    ("priority", 10 ** 12, "priority must be between"),
    ("channel", "c" * 65, "channel is 65 characters long"),
    ("blocked_by", {"T-001": 1}, "blocked_by must be a list"),
])
def test_oversized_or_ill_typed_task_fields_are_refused_not_truncated(crew, field, value, message):
    kwargs = {"subject": "fine", field: value}
    with pytest.raises(TaskInvalid) as bad:
        svc.task_create(actor=crew.as_lead, team=crew.team, **kwargs)
    assert message in bad.value.message
    assert not TeamTask.objects.exists()


def test_long_results_and_comments_are_refused_not_truncated(crew, make_task):
    task = claimed(crew, make_task)
    with pytest.raises(TaskInvalid, match="result is 50,001 characters long"):
        svc.task_complete(actor=crew.as_worker, task=task, result="r" * 50_001)
    with pytest.raises(TaskInvalid, match="content is 10,001 characters long"):
        svc.task_comment(actor=crew.as_worker, task=task, content="c" * 10_001)
    assert fresh(task).status == "in_progress" and not TaskComment.objects.exists()
    svc.task_complete(actor=crew.as_worker, task=task, result="r" * 50_000)
    assert len(fresh(task).result) == 50_000


def test_an_archived_team_can_be_read_but_not_changed(crew, make_task):
    task = make_task()
    team_update(actor=crew.system, team=crew.team, status="archived")
    crew.team.refresh_from_db()
    with pytest.raises(TeamInvalid, match="is archived"):
        make_task("more")
    with pytest.raises(TeamInvalid, match="is archived"):
        svc.task_claim(actor=crew.as_worker, team=crew.team)
    with pytest.raises(TeamInvalid, match="is archived"):
        svc.task_cancel(actor=crew.person, task=task)
    assert selectors.task_get(crew.team, "T-001").status == "pending"


# ---------------------------------------------------------------- claim

def test_claim_takes_the_highest_priority_then_the_lowest_number(crew, make_task):
    make_task("low")
    urgent_later = make_task("urgent later", priority=5)
    urgent_first = make_task("urgent first", priority=5)
    assert urgent_first.number > urgent_later.number
    got = svc.task_claim(actor=crew.as_worker, team=crew.team)
    assert got.pk == urgent_later.pk
    assert svc.task_claim(actor=crew.as_worker2, team=crew.team).pk == urgent_first.pk


def test_claim_sets_the_owner_and_a_lock_for_the_team_lock_minutes(crew, make_task):
    team_update(actor=crew.system, team=crew.team, lock_minutes=15)
    crew.team.refresh_from_db()
    task = svc.task_claim(actor=crew.as_worker, team=crew.team, task=make_task())
    row = fresh(task)
    assert (row.status, row.owner) == ("in_progress", crew.worker)
    assert row.lock_expires_at - row.locked_at == timedelta(minutes=15)
    assert event_types(task) == ["created", "claimed"]
    assert TeamEvent.objects.get(task=task, event_type="claimed").actor == f"agent:{crew.worker.key}"


def test_a_member_claims_a_task_assigned_to_them_but_not_one_assigned_to_someone_else(crew, make_task):
    mine = make_task("mine", assignee=crew.worker)
    theirs = make_task("theirs", assignee=crew.worker2)
    with pytest.raises(TaskConflict) as conflict:
        svc.task_claim(actor=crew.as_worker, team=crew.team, task=theirs)
    assert conflict.value.message == (f"T-002 is assigned to agent {crew.worker2.key}; claim an open task or one "
                                      f"assigned to you.")
    assert svc.task_claim(actor=crew.as_worker, team=crew.team).pk == mine.pk
    with pytest.raises(TaskNotFound, match="No task is waiting to be claimed"):
        svc.task_claim(actor=crew.as_worker, team=crew.team)
    assert svc.task_claim(actor=crew.as_worker2, team=crew.team).pk == theirs.pk


def test_claiming_a_task_that_is_not_pending_is_a_conflict_saying_why(crew, make_task):
    task = claimed(crew, make_task)
    with pytest.raises(TaskConflict) as taken:
        svc.task_claim(actor=crew.as_worker2, team=crew.team, task=task)
    assert taken.value.message == f"T-001 was claimed by agent {crew.worker.key} first; claim another task."
    waiting = make_task("waiting", blocked_by=["T-001"])
    with pytest.raises(TaskConflict, match="T-002 is blocked by T-001; it can be claimed once they are completed"):
        svc.task_claim(actor=crew.as_worker2, team=crew.team, task=waiting)
    svc.task_complete(actor=crew.as_worker, task=task, result="done")
    with pytest.raises(TaskConflict) as done:
        svc.task_claim(actor=crew.as_worker2, team=crew.team, task=task)
    assert done.value.message == "T-001 is completed; only pending tasks can be claimed."
    assert fresh(task).owner == crew.worker


def test_the_lead_reviewers_and_people_never_claim(crew, make_task):
    make_task()
    with pytest.raises(TeamPermissionDenied, match="Only members can claim tasks .* you are the lead"):
        svc.task_claim(actor=crew.as_lead, team=crew.team)
    with pytest.raises(TeamPermissionDenied, match="you are a reviewer"):
        svc.task_claim(actor=crew.as_reviewer, team=crew.team)
    with pytest.raises(TeamPermissionDenied, match="people assign them"):
        svc.task_claim(actor=crew.person, team=crew.team)
    with pytest.raises(TeamNotFound):
        svc.task_claim(actor=crew.as_outsider, team=crew.team)
    assert TeamTask.objects.get().status == "pending"


def test_a_task_of_another_team_cannot_be_claimed_through_this_one(crew):
    other = team_create(actor=crew.system, name="other-team", lead=make_agent(), members=[(crew.worker, "member")])
    theirs = svc.task_create(actor=crew.system, team=other, subject="theirs")
    with pytest.raises(TaskNotFound):
        svc.task_claim(actor=crew.as_worker, team=crew.team, task=theirs)
    assert fresh(theirs).status == "pending"


# ---------------------------------------------------------------- progress, complete, fail, cancel

def test_progress_never_goes_back_and_renews_the_lock(crew, make_task):
    task = claimed(crew, make_task)
    TeamTask.objects.filter(pk=task.pk).update(lock_expires_at=fresh(task).locked_at + timedelta(minutes=1))
    svc.task_progress(actor=crew.as_worker, task=task, percent=40, step="drafting")
    row = fresh(task)
    assert (row.progress_percent, row.progress_step) == (40, "drafting")
    assert row.lock_expires_at - row.locked_at == timedelta(minutes=crew.team.lock_minutes)
    with pytest.raises(TaskInvalid) as back:
        svc.task_progress(actor=crew.as_worker, task=task, percent=30)
    assert back.value.message == "Progress never goes back: T-001 is at 40%; report 40% or more."
    svc.task_progress(actor=crew.as_worker, task=task, percent=40)
    with pytest.raises(TaskInvalid, match="between 0 and 100"):
        svc.task_progress(actor=crew.as_worker, task=task, percent=101)
    assert fresh(task).progress_percent == 40


def test_only_the_owner_reports_progress_and_only_while_in_progress(crew, make_task):
    task = claimed(crew, make_task)
    with pytest.raises(TeamPermissionDenied) as denied:
        svc.task_progress(actor=crew.as_worker2, task=task, percent=10)
    assert denied.value.message == (f"T-001 is owned by agent {crew.worker.key}; only its owner can report "
                                    f"progress on it.")
    open_task = make_task("open")
    with pytest.raises(TeamPermissionDenied, match="T-002 has no owner; claim it before"):
        svc.task_progress(actor=crew.as_worker, task=open_task, percent=10)
    svc.task_review(actor=crew.as_worker, task=task)
    with pytest.raises(TaskConflict, match="T-001 is in review; only in progress tasks can be given progress"):
        svc.task_progress(actor=crew.as_worker, task=task, percent=50)


def test_complete_needs_the_owner_and_a_result(crew, make_task):
    task = claimed(crew, make_task)
    with pytest.raises(TaskInvalid, match="result is required"):
        svc.task_complete(actor=crew.as_worker, task=task, result="  ")
    with pytest.raises(TeamPermissionDenied):
        svc.task_complete(actor=crew.as_worker2, task=task, result="mine now")
    done = svc.task_complete(actor=crew.as_worker, task=task, result="the report")
    row = fresh(done)
    assert (row.status, row.result, row.lock_expires_at) == ("completed", "the report", None)
    assert row.completed_at is not None
    with pytest.raises(TaskConflict, match="T-001 is completed; only in progress or pending tasks can be completed"):
        svc.task_complete(actor=crew.as_worker, task=task, result="again")


def test_an_owner_whose_lock_expired_can_still_complete_its_task(crew, make_task):
    task = claimed(crew, make_task)
    TeamTask.objects.filter(pk=task.pk).update(status="pending", locked_at=None, lock_expires_at=None)
    svc.task_complete(actor=crew.as_worker, task=task, result="finished anyway")
    assert fresh(task).status == "completed"


def test_completing_blockers_unblocks_a_chain_one_step_at_a_time(crew, make_task):
    a = make_task("A")
    b = make_task("B", blocked_by=["T-001"])
    c = make_task("C", blocked_by=["T-002"])
    svc.task_claim(actor=crew.as_worker, team=crew.team, task=a)
    svc.task_complete(actor=crew.as_worker, task=a, result="a")
    assert (fresh(b).status, fresh(c).status) == ("pending", "blocked")
    assert TeamEvent.objects.get(task=b, event_type="unblocked").data == {"by": "T-001"}
    svc.task_claim(actor=crew.as_worker2, team=crew.team, task=b)
    svc.task_complete(actor=crew.as_worker2, task=b, result="b")
    assert fresh(c).status == "pending"
    assert svc.task_claim(actor=crew.as_worker, team=crew.team).pk == c.pk


def test_a_task_waiting_for_two_blockers_waits_until_both_complete(crew, make_task):
    first, second = make_task("first"), make_task("second")
    both = make_task("both", blocked_by=["T-001", "T-002"])
    svc.task_claim(actor=crew.as_worker, team=crew.team, task=first)
    svc.task_complete(actor=crew.as_worker, task=first, result="1")
    assert fresh(both).status == "blocked"
    svc.task_claim(actor=crew.as_worker, team=crew.team, task=second)
    svc.task_complete(actor=crew.as_worker, task=second, result="2")
    assert fresh(both).status == "pending"


@pytest.mark.parametrize("finish", ["fail", "cancel"])
def test_a_failed_or_cancelled_blocker_keeps_dependents_blocked_and_tells_the_lead(crew, make_task, finish):
    blocker = claimed(crew, make_task, "blocker")
    waiting = make_task("waiting", blocked_by=["T-001"])
    also = make_task("also waiting", blocked_by=["T-001"])
    if finish == "fail":
        svc.task_fail(actor=crew.as_worker, task=blocker, reason="the API is down")
    else:
        svc.task_cancel(actor=crew.as_lead, task=blocker, reason="not needed")
    assert fresh(blocker).status == ("failed" if finish == "fail" else "cancelled")
    assert (fresh(waiting).status, fresh(also).status) == ("blocked", "blocked")
    escalated = TeamEvent.objects.get(task=waiting, event_type="escalated")
    assert escalated.data["blocker"] == "T-001"
    notice = TeamMessage.objects.get(recipient=crew.lead, kind="system")
    assert "T-001" in notice.text and "T-002, T-003 wait for it and stay blocked" in notice.text
    assert notice.task_id == blocker.pk


def test_cancel_is_for_the_lead_or_a_person_and_only_for_unfinished_tasks(crew, make_task):
    task = claimed(crew, make_task)
    with pytest.raises(TeamPermissionDenied) as denied:
        svc.task_cancel(actor=crew.as_worker, task=task)
    assert denied.value.message == f"Only the lead can cancel tasks in team {crew.team.name}; you are a member."
    svc.task_cancel(actor=crew.person, task=task, reason="changed plans")
    row = fresh(task)
    assert (row.status, row.result) == ("cancelled", "changed plans")
    assert TeamEvent.objects.get(task=task, event_type="cancelled").actor == "user:staff-person"
    with pytest.raises(TaskConflict, match="T-001 is cancelled; only pending, in progress"):
        svc.task_cancel(actor=crew.as_lead, task=task)


def test_fail_is_for_the_owner_or_the_lead(crew, make_task):
    task = claimed(crew, make_task)
    with pytest.raises(TeamPermissionDenied):
        svc.task_fail(actor=crew.as_worker2, task=task, reason="not mine")
    with pytest.raises(TaskInvalid, match="reason is required"):
        svc.task_fail(actor=crew.as_worker, task=task, reason="")
    svc.task_fail(actor=crew.as_worker, task=task, reason="cannot reach the server")
    assert (fresh(task).status, fresh(task).result) == ("failed", "cannot reach the server")
    other = make_task("other")
    svc.task_fail(actor=crew.as_lead, task=other, reason="obsolete")
    assert fresh(other).status == "failed"


def test_every_finished_task_carrying_a_delegation_is_reported_to_the_delegation_service(crew, make_task,
                                                                                         monkeypatch):
    import teams_app.services.delegation as delegation
    from teams_app.models import Delegation

    finished = []
    monkeypatch.setattr(delegation, "delegation_task_finished", lambda task: finished.append((task.pk, task.status)))
    done, failed, cancelled = (claimed(crew, make_task, s) for s in ("done", "failed", "cancelled"))
    for task in (done, failed, cancelled):
        Delegation.objects.create(source=crew.outsider, target=crew.lead, request="work", task=task)
    plain = claimed(crew, make_task, "nobody delegated this")
    svc.task_complete(actor=crew.as_worker, task=done, result="ok")
    svc.task_complete(actor=crew.as_worker, task=plain, result="ok")  # no delegation: no call (the hot path)
    svc.task_fail(actor=crew.as_worker, task=failed, reason="no")
    svc.task_cancel(actor=crew.as_lead, task=cancelled)
    svc.task_progress(actor=crew.as_worker, task=claimed(crew, make_task, "still going"), percent=5)
    assert finished == [(done.pk, "completed"), (failed.pk, "failed"), (cancelled.pk, "cancelled")]


# ---------------------------------------------------------------- review

def test_review_then_approval_completes_the_task_and_unblocks_its_dependents(crew, make_task):
    task = claimed(crew, make_task)
    waiting = make_task("waiting", blocked_by=["T-001"])
    svc.task_review(actor=crew.as_worker, task=task, result="draft 1")
    assert (fresh(task).status, fresh(task).result, fresh(task).lock_expires_at) == ("in_review", "draft 1", None)
    with pytest.raises(TeamPermissionDenied, match="Only the lead or reviewers can approve tasks"):
        svc.task_approve(actor=crew.as_worker2, task=task)
    svc.task_approve(actor=crew.as_reviewer, task=task, note="looks right")
    assert fresh(task).status == "completed" and fresh(waiting).status == "pending"
    assert TaskComment.objects.get(task=task).content == "looks right"
    assert event_types(task)[-2:] == ["reviewed", "approved"]
    with pytest.raises(TaskConflict, match="T-001 is completed; only in review tasks can be approved"):
        svc.task_approve(actor=crew.as_lead, task=task)


def test_rejection_sends_the_task_back_to_its_owner_with_the_feedback(crew, make_task):
    task = claimed(crew, make_task)
    svc.task_review(actor=crew.as_worker, task=task)
    with pytest.raises(TaskInvalid, match="feedback is required"):
        svc.task_reject(actor=crew.as_lead, task=task, feedback="")
    svc.task_reject(actor=crew.as_lead, task=task, feedback="add the numbers")
    row = fresh(task)
    assert (row.status, row.owner) == ("in_progress", crew.worker)
    assert row.lock_expires_at - row.locked_at == timedelta(minutes=crew.team.lock_minutes)
    assert TaskComment.objects.get(task=task).content == "add the numbers"
    assert "add the numbers" in TeamMessage.objects.get(recipient=crew.worker).text
    assert TeamEvent.objects.get(task=task, event_type="rejected").data["feedback"] == "add the numbers"


def test_rejection_of_an_ownerless_task_returns_it_to_pending(crew, make_task):
    task = claimed(crew, make_task)
    svc.task_review(actor=crew.as_worker, task=task)
    TeamTask.objects.filter(pk=task.pk).update(owner=None)
    svc.task_reject(actor=crew.as_reviewer, task=task, feedback="start over")
    assert (fresh(task).status, fresh(task).owner) == ("pending", None)


def test_only_the_owner_submits_for_review_and_only_from_in_progress(crew, make_task):
    task = claimed(crew, make_task)
    with pytest.raises(TeamPermissionDenied):
        svc.task_review(actor=crew.as_worker2, task=task)
    pending = make_task("pending", assignee=crew.worker)
    with pytest.raises(TaskConflict, match="T-002 is pending; only in progress tasks can be submitted for review"):
        svc.task_review(actor=crew.as_worker, task=pending)
    with pytest.raises(TaskConflict, match="only in review tasks can be rejected"):
        svc.task_reject(actor=crew.as_lead, task=task, feedback="x")


# ---------------------------------------------------------------- comments, questions, attachments

def test_any_teammate_writes_notes_and_outsiders_cannot(crew, make_task):
    task = make_task()
    for actor in (crew.as_worker, crew.as_reviewer, crew.as_lead, crew.person):
        svc.task_comment(actor=actor, task=task, content=f"note by {actor}")
    assert TaskComment.objects.filter(task=task, kind="note").count() == 4
    with pytest.raises(TeamNotFound):
        svc.task_comment(actor=crew.as_outsider, task=task, content="hello")
    with pytest.raises(TaskInvalid, match="kind must be one of note, blocker"):
        svc.task_comment(actor=crew.as_worker, task=task, content="x", kind="shout")
    assert fresh(task).status == "pending"


def test_a_blocker_comment_fails_the_task_and_escalates_to_the_lead(crew, make_task):
    task = claimed(crew, make_task)
    svc.task_comment(actor=crew.as_worker, task=task, content="I have no access to the database", kind="blocker")
    row = fresh(task)
    assert (row.status, row.result) == ("failed", "Blocked: I have no access to the database")
    assert event_types(task)[-3:] == ["commented", "failed", "escalated"]
    notice = TeamMessage.objects.get(recipient=crew.lead)
    assert notice.kind == "system" and notice.sender == "system:escalation"
    assert "T-001" in notice.text and "no access to the database" in notice.text


def test_a_blocker_comment_only_fails_the_task_when_escalation_is_off(crew, make_task):
    team_update(actor=crew.system, team=crew.team, blocker_escalation=False)
    task = claimed(crew, make_task)
    svc.task_comment(actor=crew.as_worker, task=task, content="stuck " * 200, kind="blocker")
    row = fresh(task)
    assert row.status == "failed" and row.result == "Blocked: " + ("stuck " * 200)[:500]
    assert "escalated" not in event_types(task)
    assert not TeamMessage.objects.exists()


def test_only_the_owner_or_the_lead_reports_a_blocker_and_only_on_open_work(crew, make_task):
    task = claimed(crew, make_task)
    with pytest.raises(TeamPermissionDenied, match="Only T-001's owner or the lead can report a blocker"):
        svc.task_comment(actor=crew.as_worker2, task=task, content="sabotage", kind="blocker")
    assert fresh(task).status == "in_progress"
    svc.task_complete(actor=crew.as_worker, task=task, result="done")
    with pytest.raises(TaskConflict, match="a blocker applies to pending or in progress tasks"):
        svc.task_comment(actor=crew.as_lead, task=task, content="too late", kind="blocker")
    assert fresh(task).status == "completed"


def test_a_person_answers_the_owners_question(crew, make_task):
    task = claimed(crew, make_task)
    svc.task_ask_user(actor=crew.as_worker, task=task, question="Which quarter?")
    assert fresh(task).question == "Which quarter?"
    with pytest.raises(TeamPermissionDenied):
        svc.task_answer(actor=crew.as_worker2, task=task, answer="Q1")
    svc.task_answer(actor=crew.person, task=task, answer="Q3, please")
    row = fresh(task)
    assert (row.question, row.question_asked_at, row.status) == ("", None, "in_progress")
    note = TaskComment.objects.get(task=task)
    assert (note.author, note.content) == ("user:staff-person", "Q3, please")
    message = TeamMessage.objects.get(recipient=crew.worker)
    assert "Q3, please" in message.text and "Which quarter?" in message.text
    assert TeamEvent.objects.get(task=task, event_type="answered").actor == "user:staff-person"
    with pytest.raises(TaskConflict, match="T-001 has no open question"):
        svc.task_answer(actor=crew.person, task=task, answer="again")


def test_only_the_owner_asks_and_only_while_working(crew, make_task):
    task = claimed(crew, make_task)
    with pytest.raises(TeamPermissionDenied):
        svc.task_ask_user(actor=crew.as_worker2, task=task, question="?")
    pending = make_task("later", assignee=crew.worker)
    with pytest.raises(TaskConflict, match="T-002 is pending"):
        svc.task_ask_user(actor=crew.as_worker, task=pending, question="?")


def test_attachments_take_workspace_relative_paths_and_re_attaching_updates_them(crew, make_task):
    task = make_task()
    first = svc.task_attach(actor=crew.as_worker, task=task, path="reports/./q3.md", size=120, note="draft")
    assert (first.path, first.size, first.note) == ("reports/q3.md", 120, "draft")
    svc.task_attach(actor=crew.as_reviewer, task=task, path="reports/q3.md", size=300, note="final")
    only = task.attachments.get()
    assert (only.size, only.note, only.created_by) == (300, "final", f"agent:{crew.reviewer.key}")
    assert event_types(task).count("attached") == 2
    with pytest.raises(TeamNotFound):
        svc.task_attach(actor=crew.as_outsider, task=task, path="x.md")


@pytest.mark.parametrize("path,message", [
    ("/etc/passwd", "not an absolute one"),
    ("../other-agent/secrets.txt", "leaves the workspace"),
    ("notes/../../escape.md", "leaves the workspace"),
    ("a\x00b.md", "NUL"),
    ("", "path is empty"),
    (".", "workspace itself"),
    ("~/.ssh/id_rsa", "not an absolute one"),
    ("bad\nname.md", "control character"),
    (42, "path must be a string"),
])
def test_attachment_paths_that_escape_the_workspace_are_refused(crew, make_task, path, message):
    task = make_task()
    with pytest.raises(TaskInvalid) as bad:
        svc.task_attach(actor=crew.as_worker, task=task, path=path)
    assert message in bad.value.message
    assert not task.attachments.exists()


# ---------------------------------------------------------------- update

def test_a_dependency_cycle_is_refused_naming_it(crew, make_task):
    make_task("A")
    b = make_task("B", blocked_by=["T-001"])
    make_task("C", blocked_by=["T-002"])
    a = selectors.task_get(crew.team, "T-001")
    with pytest.raises(DependencyCycle) as cycle:
        svc.task_update(actor=crew.as_lead, task=a, blocked_by=["T-003"])
    assert "T-001 → T-003 → T-002 → T-001" in cycle.value.message
    with pytest.raises(DependencyCycle, match="T-002 → T-002"):
        svc.task_update(actor=crew.as_lead, task=b, blocked_by=["T-002"])
    assert list(TaskDependency.objects.filter(task=a)) == [] and fresh(a).status == "pending"


def test_changing_dependencies_recomputes_blocked_and_pending(crew, make_task):
    first = make_task("first")
    task = make_task("task")
    svc.task_update(actor=crew.as_lead, task=task, blocked_by=["T-001"])
    assert fresh(task).status == "blocked"
    svc.task_update(actor=crew.as_lead, task=task, blocked_by=[])
    assert fresh(task).status == "pending" and not TaskDependency.objects.filter(task=task).exists()
    svc.task_update(actor=crew.as_lead, task=task, blocked_by=["T-001"])
    svc.task_claim(actor=crew.as_worker, team=crew.team, task=first)
    svc.task_complete(actor=crew.as_worker, task=first, result="done")
    assert fresh(task).status == "pending"
    svc.task_update(actor=crew.as_lead, task=task, blocked_by=["T-001"])  # a completed blocker it already had
    assert fresh(task).status == "pending"
    assert TeamEvent.objects.filter(task=task, event_type="updated").count() == 4


def test_update_edits_unfinished_tasks_for_the_lead_only(crew, make_task):
    task = make_task()
    with pytest.raises(TeamPermissionDenied):
        svc.task_update(actor=crew.as_worker, task=task, subject="mine")
    svc.task_update(actor=crew.as_lead, task=task, subject="  Better subject ", priority=3, description="more")
    row = fresh(task)
    assert (row.subject, row.priority, row.description) == ("Better subject", 3, "more")
    with pytest.raises(TaskInvalid, match="Nothing to update"):
        svc.task_update(actor=crew.as_lead, task=task)
    svc.task_claim(actor=crew.as_worker, team=crew.team, task=task)
    with pytest.raises(TaskConflict, match="its dependencies can change only while it is pending, blocked or stale"):
        svc.task_update(actor=crew.as_lead, task=task, blocked_by=[])
    svc.task_complete(actor=crew.as_worker, task=task, result="done")
    with pytest.raises(TaskConflict, match="finished tasks cannot be changed"):
        svc.task_update(actor=crew.as_lead, task=task, subject="rewrite history")


# ---------------------------------------------------------------- recovery: retry, assign, unblock

def test_a_completed_task_can_be_retried_for_its_owner_to_claim_again(crew, make_task):
    task = claimed(crew, make_task)
    svc.task_progress(actor=crew.as_worker, task=task, percent=80, step="almost")
    svc.task_complete(actor=crew.as_worker, task=task, result="wrong numbers")
    svc.task_retry(actor=crew.person, task=task)
    row = fresh(task)
    assert (row.status, row.owner, row.result, row.progress_percent, row.completed_at) == (
        "pending", crew.worker, "", 0, None)
    assert TeamEvent.objects.get(task=task, event_type="retried").data == {"from": "completed"}
    with pytest.raises(TaskConflict):
        svc.task_claim(actor=crew.as_worker2, team=crew.team, task=task)
    assert svc.task_claim(actor=crew.as_worker, team=crew.team).pk == task.pk


def test_retry_applies_to_failed_and_cancelled_tasks_by_the_lead_only(crew, make_task):
    failed = claimed(crew, make_task, "failed")
    svc.task_fail(actor=crew.as_worker, task=failed, reason="oops")
    with pytest.raises(TeamPermissionDenied):
        svc.task_retry(actor=crew.as_worker, task=failed)
    svc.task_retry(actor=crew.as_lead, task=failed)
    cancelled = make_task("cancelled")
    svc.task_cancel(actor=crew.as_lead, task=cancelled)
    svc.task_retry(actor=crew.as_lead, task=cancelled)
    assert (fresh(failed).status, fresh(cancelled).status) == ("pending", "pending")
    with pytest.raises(TaskConflict, match="T-002 is pending; only failed, stale, cancelled or completed tasks"):
        svc.task_retry(actor=crew.as_lead, task=cancelled)


def test_a_retried_task_that_still_waits_for_an_unfinished_blocker_is_blocked(crew, make_task):
    blocker = make_task("blocker")
    waiting = make_task("waiting", blocked_by=["T-001"])
    svc.task_cancel(actor=crew.as_lead, task=waiting)
    svc.task_retry(actor=crew.as_lead, task=waiting)
    assert fresh(waiting).status == "blocked"
    assert fresh(blocker).status == "pending"


def test_reassigning_a_task_in_progress_returns_it_to_pending_for_the_new_owner(crew, make_task):
    task = claimed(crew, make_task)
    svc.task_assign(actor=crew.as_lead, task=task, assignee=crew.worker2)
    row = fresh(task)
    assert (row.status, row.owner, row.lock_expires_at) == ("pending", crew.worker2, None)
    assert TeamEvent.objects.get(task=task, event_type="assigned").data == {"assignee": crew.worker2.key,
                                                                            "previous": crew.worker.key}
    assert "reassigned to" in TeamMessage.objects.get(recipient=crew.worker).text
    with pytest.raises(TeamPermissionDenied):
        svc.task_complete(actor=crew.as_worker, task=task, result="I was first")
    assert svc.task_claim(actor=crew.as_worker2, team=crew.team).pk == task.pk


def test_assign_is_for_the_lead_and_only_to_members(crew, make_task):
    task = make_task()
    with pytest.raises(TeamPermissionDenied):
        svc.task_assign(actor=crew.as_worker, task=task, assignee=crew.worker)
    with pytest.raises(TaskInvalid, match="never works tasks"):
        svc.task_assign(actor=crew.person, task=task, assignee=crew.lead)
    with pytest.raises(TaskInvalid, match="is not in team"):
        svc.task_assign(actor=crew.as_lead, task=task, assignee=crew.outsider)
    blocked = make_task("blocked", blocked_by=["T-001"])
    svc.task_assign(actor=crew.as_lead, task=blocked, assignee=crew.worker)
    assert (fresh(blocked).status, fresh(blocked).owner) == ("blocked", crew.worker)
    svc.task_cancel(actor=crew.as_lead, task=task)
    with pytest.raises(TaskConflict, match="T-001 is cancelled"):
        svc.task_assign(actor=crew.as_lead, task=task, assignee=crew.worker)


def test_unblocking_by_hand_drops_the_unfinished_dependencies(crew, make_task):
    done = claimed(crew, make_task, "done")
    svc.task_complete(actor=crew.as_worker, task=done, result="ok")
    failed = claimed(crew, make_task, "failed")
    make_task("open")
    waiting = make_task("waiting", blocked_by=["T-002", "T-003"])
    TaskDependency.objects.create(task=waiting, blocker=done)
    svc.task_fail(actor=crew.as_worker, task=failed, reason="no")
    with pytest.raises(TeamPermissionDenied):
        svc.task_unblock(actor=crew.as_worker, task=waiting)
    svc.task_unblock(actor=crew.person, task=waiting)
    assert fresh(waiting).status == "pending"
    assert list(TaskDependency.objects.filter(task=waiting).values_list("blocker__number", flat=True)) == [1]
    assert TeamEvent.objects.get(task=waiting, event_type="unblocked").data == {"by": "hand",
                                                                                "dropped": ["T-002", "T-003"]}
    with pytest.raises(TaskConflict, match="only blocked tasks can be unblocked"):
        svc.task_unblock(actor=crew.person, task=waiting)


# ---------------------------------------------------------------- teams

def test_a_team_has_its_lead_as_a_member_with_role_lead(crew):
    roles = dict(TeamMember.objects.filter(team=crew.team).values_list("agent__key", "role"))
    assert roles == {crew.lead.key: "lead", crew.worker.key: "member", crew.worker2.key: "member",
                     crew.reviewer.key: "reviewer"}
    with pytest.raises(TeamPermissionDenied):
        team_create(actor=crew.as_lead, name="my own", lead=crew.lead)
    with pytest.raises(TeamInvalid, match="already exists"):
        team_create(actor=crew.system, name=crew.team.name.upper(), lead=crew.lead)
    with pytest.raises(TeamInvalid, match="listed twice"):
        team_create(actor=crew.system, name="dup", lead=crew.lead, members=[(crew.lead, "member")])
    with pytest.raises(TeamInvalid, match="Unknown team setting"):
        team_create(actor=crew.system, name="odd", lead=crew.lead, colour="red")


def test_a_new_lead_takes_the_lead_row_and_the_old_one_stays_a_member(crew, make_task):
    task = claimed(crew, make_task)
    team_update(actor=crew.system, team=crew.team, lead=crew.worker)
    roles = dict(TeamMember.objects.filter(team=crew.team).values_list("agent__key", "role"))
    assert (roles[crew.worker.key], roles[crew.lead.key]) == ("lead", "member")
    assert (fresh(task).status, fresh(task).owner) == ("pending", None)
    with pytest.raises(TeamPermissionDenied, match="you are a member"):
        make_task("by the old lead")


def test_removing_a_member_returns_their_work_to_the_board(crew, make_task):
    task = claimed(crew, make_task)
    team_member_remove(actor=crew.system, team=crew.team, agent=crew.worker)
    assert (fresh(task).status, fresh(task).owner) == ("pending", None)
    with pytest.raises(TeamNotFound):
        svc.task_claim(actor=crew.as_worker, team=crew.team)
    with pytest.raises(TeamInvalid, match="is the lead"):
        team_member_remove(actor=crew.system, team=crew.team, agent=crew.lead)


# ---------------------------------------------------------------- reads

def test_task_get_accepts_the_usual_spellings_of_an_identifier(crew, make_task):
    task = make_task()
    for ref in ("T-001", "t-1", "1", 1, " T-0001 "):
        assert selectors.task_get(crew.team, ref).pk == task.pk
    for ref in ("T-002", "x", "", None, True, "T-1; DROP TABLE"):
        with pytest.raises(TaskNotFound):
            selectors.task_get(crew.team, ref)


def test_an_agent_in_several_teams_must_say_which_one(crew):
    assert selectors.team_for_agent(crew.worker) == crew.team
    second = team_create(actor=crew.system, name="second-team", lead=make_agent(), members=[(crew.worker, "member")])
    with pytest.raises(TeamInvalid) as which:
        selectors.team_for_agent(crew.worker)
    assert which.value.message == f"You are in teams {crew.team.name}, second-team: pass team to say which one."
    assert selectors.team_for_agent(crew.worker, "second-team") == second
    assert selectors.team_for_agent(crew.worker, str(second.pk)) == second
    with pytest.raises(TeamNotFound):
        selectors.team_for_agent(crew.outsider, "second-team")
    with pytest.raises(TeamNotFound):
        selectors.team_for_agent(crew.outsider)
    team_update(actor=crew.system, team=second, status="archived")
    assert list(selectors.teams_for_agent(crew.worker)) == [crew.team]


def test_task_list_filters_by_status_and_owner_and_searches_subject_and_description(crew, make_task):
    make_task("Quarterly revenue report", description="numbers for finance")
    mine = claimed(crew, make_task, "Fix the login page")
    make_task("Write release notes", description="mention the revenue dashboard")
    assert [t.identifier for t in selectors.task_list(crew.team, status="pending")] == ["T-001", "T-003"]
    assert [t.pk for t in selectors.task_list(crew.team, owner=crew.worker)] == [mine.pk]
    assert [t.pk for t in selectors.task_list(crew.team, owner=crew.worker.key)] == [mine.pk]
    assert {t.identifier for t in selectors.task_list(crew.team, query="revenue")} == {"T-001", "T-003"}
    assert list(selectors.task_list(crew.team, query="login")) == [mine]
    assert len(selectors.task_list(crew.team, limit=1)) == 1
    with pytest.raises(TeamInvalid, match="Unknown task status"):
        selectors.task_list(crew.team, status="done")
    with pytest.raises(TeamInvalid, match="limit must be a whole number"):
        selectors.task_list(crew.team, limit="lots")


def test_a_task_has_one_json_shape_with_details_on_request(crew, make_task):
    blocker = make_task("blocker")
    task = make_task("task", blocked_by=["T-001"], user_id="u1", channel="telegram", chat_id="42")
    svc.task_comment(actor=crew.as_worker, task=task, content="hi")
    data = selectors.task_as_dict(selectors.task_get(crew.team, "T-002"), detail=True)
    assert {k: data[k] for k in ("id", "team", "status", "owner", "blocked_by", "user_id", "channel", "chat_id")} == {
        "id": "T-002", "team": crew.team.pk, "status": "blocked", "owner": None, "blocked_by": ["T-001"],
        "user_id": "u1", "channel": "telegram", "chat_id": "42"}
    assert data["progress"] == {"percent": 0, "step": ""}
    assert [c["content"] for c in data["comments"]] == ["hi"]
    assert [e["type"] for e in data["events"]] == ["created", "commented"]
    assert selectors.task_as_dict(blocker, detail=True)["blocks"] == ["T-002"]


def test_board_events_reach_the_team_and_the_owner_after_commit(crew, make_task, django_capture_on_commit_callbacks):
    layer = get_channel_layer()
    team_channel, owner_channel = async_to_sync(layer.new_channel)(), async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(f"team.{crew.team.pk}", team_channel)
    async_to_sync(layer.group_add)(f"agent.{crew.worker.key}", owner_channel)
    task = make_task()
    with django_capture_on_commit_callbacks(execute=True):
        svc.task_claim(actor=crew.as_worker, team=crew.team, task=task)
    for channel in (team_channel, owner_channel):
        message = async_to_sync(layer.receive)(channel)
        assert message["event"] == "team_task.claimed"
        assert message["payload"]["task"]["id"] == "T-001" and message["payload"]["task"]["owner"] == crew.worker.key
        assert message["payload"]["actor"] == f"agent:{crew.worker.key}"


# ---------------------------------------------------------------- the hot path (one statement per claim / complete)

def _statements(queries) -> list[str]:
    return [q["sql"] for q in queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))]


def test_a_claim_and_a_completion_each_take_one_statement_on_the_common_path(crew, make_task):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    warm = claimed(crew, make_task, "warm-up")  # the connection prepares the statements once
    svc.task_complete(actor=crew.as_worker, task=warm, result="done")
    make_task("first")
    with CaptureQueriesContext(connection) as claim:
        task = svc.task_claim(actor=crew.as_worker, team=crew.team)
    with CaptureQueriesContext(connection) as complete:
        svc.task_complete(actor=crew.as_worker, task=task, result="done")
    assert (len(_statements(claim.captured_queries)), len(_statements(complete.captured_queries))) == (1, 1)
    assert (fresh(task).status, fresh(task).owner_id, fresh(task).result) == ("completed", crew.worker.pk, "done")
    assert event_types(task) == ["created", "claimed", "completed"]


def test_the_one_statement_claim_and_completion_publish_what_the_full_path_would(crew, make_task):
    from unittest import mock

    from django.core.serializers.json import DjangoJSONEncoder

    blocker = claimed(crew, make_task, "blocker")
    waiting = make_task("waiting", blocked_by=[blocker.identifier])
    with mock.patch("goclaw.events.publish_many") as publish_many:
        svc.task_complete(actor=crew.as_worker, task=blocker, result="done")  # releases `waiting`
        task = svc.task_claim(actor=crew.as_worker2, team=crew.team)
        svc.task_complete(actor=crew.as_worker2, task=task, result="also done")
    sent = [(name, payload, list(groups)) for c in publish_many.call_args_list for name, payload, groups in c.args[0]]
    assert [name for name, _, _ in sent] == ["team_task.completed", "team_task.unblocked", "team_task.claimed",
                                             "team_task.completed"]
    claim_payload, complete_payload = sent[2][1], sent[3][1]
    lock_expires = TeamEvent.objects.get(task=waiting, event_type="claimed").data["lock_expires_at"]
    assert task.pk == waiting.pk and claim_payload["task"]["blocked_by"] == [blocker.identifier]
    assert claim_payload["data"] == {"lock_expires_at": DjangoJSONEncoder().default(task.lock_expires_at)}
    assert claim_payload["data"]["lock_expires_at"] == lock_expires  # the audit row holds the same
    assert claim_payload["actor"] == f"agent:{crew.worker2.key}" and claim_payload["team"] == crew.team.pk
    assert complete_payload["task"] == selectors.task_as_dict(fresh(waiting))
    team_groups = [f"team.{crew.team.pk}", "teams"]
    assert sent[2][2] == team_groups + [f"agent.{crew.worker2.key}"]  # claimed: the owner, not the lead
    assert sent[3][2] == team_groups + [f"agent.{crew.worker2.key}", f"agent.{crew.lead.key}"]  # completed: both


def test_a_failed_one_statement_attempt_falls_back_to_the_full_checks_and_their_sentences(crew, make_task):
    task = claimed(crew, make_task, "taken")
    with pytest.raises(TaskConflict, match="was claimed by agent .* first"):
        svc.task_claim(actor=crew.as_worker2, team=crew.team, task=task)
    with pytest.raises(TeamPermissionDenied, match="only its owner can complete it"):
        svc.task_complete(actor=crew.as_worker2, task=task, result="mine now")
    with pytest.raises(TaskNotFound, match="No task is waiting to be claimed"):
        svc.task_claim(actor=crew.as_worker2, team=crew.team)
    team_update(actor=crew.system, team=crew.team, status="archived")
    with pytest.raises(TeamInvalid, match="archived"):
        svc.task_complete(actor=crew.as_worker, task=task, result="done")
    assert (fresh(task).status, fresh(task).owner_id) == ("in_progress", crew.worker.pk)
    assert event_types(task) == ["created", "claimed"]


def test_a_stale_team_object_does_not_let_a_claim_through_on_an_archived_board(crew, make_task):
    make_task("open")
    stale = type(crew.team).objects.get(pk=crew.team.pk)
    team_update(actor=crew.system, team=crew.team, status="archived")
    with pytest.raises(TeamInvalid, match="archived"):
        svc.task_claim(actor=crew.as_worker, team=stale)
    assert not TeamTask.objects.filter(team=crew.team, status="in_progress").exists()


# ---------------------------------------------------------------- batches (a worker taking several tasks at once)

def test_a_batch_claim_takes_the_best_claimable_tasks_in_board_order_each_with_its_own_event(crew, make_task):
    low, high, mine, theirs, also = (make_task("low"), make_task("high", priority=5),
                                     make_task("mine", assignee=crew.worker), make_task("theirs", assignee=crew.worker2),
                                     make_task("also"))
    taken = svc.task_claim_many(actor=crew.as_worker, team=crew.team, count=3)
    assert [t.pk for t in taken] == [high.pk, low.pk, mine.pk]  # priority, then number; never another's task
    for task in taken:
        row = fresh(task)
        assert (row.status, row.owner_id, row.lock_expires_at is not None) == ("in_progress", crew.worker.pk, True)
        assert event_types(task) == ["created", "claimed"]
    assert (fresh(theirs).status, fresh(also).status) == ("pending", "pending")
    assert [t.pk for t in svc.task_claim_many(actor=crew.as_worker, team=crew.team, count=50)] == [also.pk]
    with pytest.raises(TaskNotFound, match="No task is waiting to be claimed"):
        svc.task_claim_many(actor=crew.as_worker, team=crew.team, count=5)


def test_a_batch_claim_refuses_what_a_single_claim_refuses(crew, make_task):
    make_task("open")
    for count in (0, 51, "many", True, 2.5):
        with pytest.raises(TaskInvalid, match="count must be"):
            svc.task_claim_many(actor=crew.as_worker, team=crew.team, count=count)
    for actor, refusal in ((crew.as_lead, TeamPermissionDenied), (crew.as_reviewer, TeamPermissionDenied),
                           (crew.person, TeamPermissionDenied), (crew.as_outsider, TeamNotFound)):
        with pytest.raises(refusal):
            svc.task_claim_many(actor=actor, team=crew.team, count=2)
    team_update(actor=crew.system, team=crew.team, status="archived")
    with pytest.raises(TeamInvalid, match="archived"):
        svc.task_claim_many(actor=crew.as_worker, team=crew.team, count=2)
    assert not TeamTask.objects.filter(team=crew.team, status="in_progress").exists()


def test_a_batch_completion_completes_the_callers_tasks_and_says_why_for_each_other_one(crew, make_task):
    blocker = claimed(crew, make_task, "blocker")
    waiting = make_task("waiting", blocked_by=[blocker.identifier])
    plain = claimed(crew, make_task, "plain")
    foreign = claimed(crew, make_task, "foreign", actor=crew.as_worker2)
    answers = svc.task_complete_many(actor=crew.as_worker, results=[(blocker, "b done"), (foreign, "stolen"),
                                                                    (plain, "p done")])
    assert [type(a).__name__ for a in answers] == ["TeamTask", "TeamPermissionDenied", "TeamTask"]
    assert "only its owner can complete it" in answers[1].message
    assert (fresh(blocker).status, fresh(blocker).result, fresh(plain).result) == ("completed", "b done", "p done")
    assert (fresh(foreign).status, fresh(foreign).result) == ("in_progress", "")
    assert fresh(waiting).status == "pending"  # the finishing logic ran for the task something waited for
    assert event_types(plain) == ["created", "claimed", "completed"]


def test_a_batch_completion_refuses_bad_lists_before_changing_anything(crew, make_task):
    task = claimed(crew, make_task, "one")
    for results, message in (([], "at least one"), ([(task, "a"), (task, "b")], "listed twice"),
                             ([(task, "")], "result"), ([(task, "x")] * 51, "at most 50")):
        with pytest.raises(TaskInvalid, match=message):
            svc.task_complete_many(actor=crew.as_worker, results=results)
    assert fresh(task).status == "in_progress"


def test_a_batch_claim_and_completion_take_one_statement_each_for_the_whole_batch(crew, make_task):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    make_task("warm")  # the connection prepares the statements once
    warm = svc.task_claim_many(actor=crew.as_worker, team=crew.team, count=1)
    svc.task_complete_many(actor=crew.as_worker, results=[(warm[0], "done")])
    for n in range(10):
        make_task(f"job {n}")
    with CaptureQueriesContext(connection) as claim:
        tasks = svc.task_claim_many(actor=crew.as_worker, team=crew.team, count=10)
    with CaptureQueriesContext(connection) as complete:
        answers = svc.task_complete_many(actor=crew.as_worker, results=[(t, f"done {t.number}") for t in tasks])
    assert (len(_statements(claim.captured_queries)), len(_statements(complete.captured_queries))) == (1, 1)
    assert len(tasks) == 10 and all(fresh(t).result == f"done {t.number}" for t in answers)
