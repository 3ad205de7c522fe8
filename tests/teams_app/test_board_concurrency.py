"""The board under concurrency: threads with their own database connections race for the same rows, and the
database is the judge (one owner per task, distinct numbers, one unblock, no message read twice)."""
from __future__ import annotations

from collections import Counter

import pytest

from teams_app.actors import Actor
from teams_app.errors import TaskConflict, TaskNotFound
from teams_app.models import TeamEvent, TeamMessage, TeamTask
from teams_app.services import tasks as svc
from teams_app.services.mailbox import message_send, messages_read
from teams_app.services.teams import team_create
from tests.factories import make_agent
from tests.teams_app.racing import race

pytestmark = pytest.mark.django_db(transaction=True)


def big_team(workers: int):
    lead = make_agent()
    members = [make_agent() for _ in range(workers)]
    team = team_create(actor=Actor.system("test"), name=f"swarm-{lead.key}", lead=lead,
                       members=[(m, "member") for m in members])
    return team, lead, members


def test_many_workers_claiming_at_once_get_each_task_exactly_once():
    team, lead, workers = big_team(8)
    for n in range(40):
        svc.task_create(actor=Actor.for_agent(lead), team=team, subject=f"job {n}", priority=n % 3)

    def work(agent):
        mine = []
        while True:
            try:
                task = svc.task_claim(actor=Actor.for_agent(agent), team=team)
            except TaskNotFound:
                return mine
            mine.append(task.pk)
            svc.task_complete(actor=Actor.for_agent(agent), task=task, result=f"done by {agent.key}")

    results = race(work, workers)
    assert not [r for r in results if isinstance(r, Exception)]
    handed_out = [pk for claims in results for pk in claims]
    assert len(handed_out) == len(set(handed_out)) == 40
    rows = TeamTask.objects.filter(team=team)
    assert set(rows.values_list("status", flat=True)) == {"completed"}
    owners = dict(rows.values_list("pk", "owner_id"))
    for agent, claims in zip(workers, results):
        assert all(owners[pk] == agent.pk for pk in claims)
        assert all(TeamTask.objects.get(pk=pk).result == f"done by {agent.key}" for pk in claims)
    per_task = Counter(TeamEvent.objects.filter(team=team, event_type="claimed").values_list("task_id", flat=True))
    assert set(per_task.values()) == {1} and len(per_task) == 40


def test_many_workers_claiming_in_batches_get_each_task_exactly_once():
    team, lead, workers = big_team(6)
    for n in range(60):
        svc.task_create(actor=Actor.for_agent(lead), team=team, subject=f"job {n}", priority=n % 4)

    def work(agent):
        mine, actor = [], Actor.for_agent(agent)
        while True:
            try:
                tasks = svc.task_claim_many(actor=actor, team=team, count=4)
            except TaskNotFound:
                return mine
            mine.extend(task.pk for task in tasks)
            answers = svc.task_complete_many(actor=actor, results=[(t, f"done by {agent.key}") for t in tasks])
            assert all(isinstance(answer, TeamTask) for answer in answers)

    results = race(work, workers)
    assert not [r for r in results if isinstance(r, Exception)]
    handed_out = [pk for claims in results for pk in claims]
    assert len(handed_out) == len(set(handed_out)) == 60
    owners = dict(TeamTask.objects.filter(team=team).values_list("pk", "owner_id"))
    for agent, claims in zip(workers, results):
        assert all(owners[pk] == agent.pk for pk in claims)
    assert set(TeamTask.objects.filter(team=team).values_list("status", flat=True)) == {"completed"}
    per_task = Counter(TeamEvent.objects.filter(team=team, event_type="claimed").values_list("task_id", flat=True))
    assert set(per_task.values()) == {1} and len(per_task) == 60


def test_many_workers_claiming_one_named_task_leave_exactly_one_winner():
    team, lead, workers = big_team(8)
    task = svc.task_create(actor=Actor.for_agent(lead), team=team, subject="the only job")

    results = race(lambda agent: svc.task_claim(actor=Actor.for_agent(agent), team=team, task=task), workers)
    winners = [(agent, r) for agent, r in zip(workers, results) if isinstance(r, TeamTask)]
    assert len(winners) == 1
    losers = [r for r in results if not isinstance(r, TeamTask)]
    assert len(losers) == 7 and all(isinstance(r, TaskConflict) for r in losers)
    row = TeamTask.objects.get(pk=task.pk)
    assert (row.status, row.owner_id) == ("in_progress", winners[0][0].pk)
    assert TeamEvent.objects.filter(task=task, event_type="claimed").count() == 1


def test_concurrent_creates_get_distinct_consecutive_numbers():
    team, lead, _ = big_team(1)

    def work(batch):
        return [svc.task_create(actor=Actor.for_agent(lead), team=team, subject=f"{batch}-{n}").number
                for n in range(5)]

    results = race(work, list(range(8)))
    assert not [r for r in results if isinstance(r, Exception)]
    numbers = sorted(TeamTask.objects.filter(team=team).values_list("number", flat=True))
    assert numbers == list(range(1, 41))
    team.refresh_from_db()
    assert team.task_counter == 40


def test_two_blockers_completed_at_once_release_their_dependent_exactly_once():
    team, lead, workers = big_team(2)
    as_lead = Actor.for_agent(lead)
    first = svc.task_create(actor=as_lead, team=team, subject="first", assignee=workers[0])
    second = svc.task_create(actor=as_lead, team=team, subject="second", assignee=workers[1])
    waiting = svc.task_create(actor=as_lead, team=team, subject="waiting", blocked_by=["T-001", "T-002"])
    for agent, task in zip(workers, (first, second)):
        svc.task_claim(actor=Actor.for_agent(agent), team=team, task=task)

    results = race(lambda pair: svc.task_complete(actor=Actor.for_agent(pair[0]), task=pair[1], result="ok"),
                   list(zip(workers, (first, second))))
    assert all(isinstance(r, TeamTask) for r in results)
    assert TeamTask.objects.get(pk=waiting.pk).status == "pending"
    assert TeamEvent.objects.filter(task=waiting, event_type="unblocked").count() == 1


def test_a_cancel_racing_a_complete_leaves_one_consistent_outcome():
    team, lead, workers = big_team(1)
    task = svc.task_create(actor=Actor.for_agent(lead), team=team, subject="contested")
    svc.task_claim(actor=Actor.for_agent(workers[0]), team=team, task=task)
    moves = [lambda: svc.task_complete(actor=Actor.for_agent(workers[0]), task=task, result="done"),
             lambda: svc.task_cancel(actor=Actor.for_agent(lead), task=task, reason="stop")]

    results = race(lambda move: move(), moves)
    outcomes = [r for r in results if isinstance(r, TeamTask)]
    assert len(outcomes) == 1 and sum(isinstance(r, TaskConflict) for r in results) == 1
    final = TeamTask.objects.get(pk=task.pk).status
    assert final == outcomes[0].status and final in ("completed", "cancelled")
    assert TeamEvent.objects.filter(task=task, event_type__in=("completed", "cancelled")).count() == 1


def test_concurrent_reads_of_one_mailbox_never_hand_out_a_message_twice():
    team, lead, workers = big_team(2)
    for n in range(30):
        message_send(actor=Actor.for_agent(workers[0]), team=team, to=workers[1], text=f"m{n}")

    def work(_):
        got = []
        while batch := messages_read(agent=workers[1], team=team, limit=3):
            got.extend(m.pk for m in batch)
        return got

    results = race(work, list(range(4)))
    assert not [r for r in results if isinstance(r, Exception)]
    handed_out = [pk for got in results for pk in got]
    assert len(handed_out) == len(set(handed_out)) == 30
    assert not TeamMessage.objects.filter(read_at__isnull=True).exists()
