"""The team mailbox: direct messages between teammates, the lead's broadcasts, and reading with read receipts."""
from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from teams_app.errors import TaskInvalid, TaskNotFound, TeamInvalid, TeamNotFound, TeamPermissionDenied
from teams_app.models import TeamMessage
from teams_app.services.mailbox import message_broadcast, message_send, messages_read
from teams_app.services.tasks import task_create
from teams_app.services.teams import team_create, team_member_remove, team_update
from tests.factories import make_agent

pytestmark = pytest.mark.django_db


def test_a_teammate_receives_a_direct_message_once_and_the_read_is_the_receipt(crew):
    sent = message_send(actor=crew.as_worker, team=crew.team, to=crew.worker2, text="Can you take T-002?")
    assert (sent.kind, sent.sender, sent.read_at) == ("direct", f"agent:{crew.worker.key}", None)
    first = messages_read(agent=crew.worker2, team=crew.team)
    assert [m.text for m in first] == ["Can you take T-002?"]
    assert first[0].read_at is not None
    assert TeamMessage.objects.get(pk=sent.pk).read_at == first[0].read_at
    assert messages_read(agent=crew.worker2, team=crew.team) == []


def test_reading_returns_only_what_arrived_since_the_last_read_oldest_first(crew):
    message_send(actor=crew.as_worker, team=crew.team, to=crew.worker2, text="one")
    messages_read(agent=crew.worker2)
    message_send(actor=crew.as_lead, team=crew.team, to=crew.worker2, text="two")
    message_send(actor=crew.as_reviewer, team=crew.team, to=crew.worker2, text="three")
    message_send(actor=crew.as_worker2, team=crew.team, to=crew.worker, text="not for me")
    assert [m.text for m in messages_read(agent=crew.worker2)] == ["two", "three"]


def test_a_read_hands_over_at_most_limit_messages_and_keeps_the_rest_unread(crew):
    for n in range(5):
        message_send(actor=crew.as_worker, team=crew.team, to=crew.worker2, text=f"m{n}")
    assert [m.text for m in messages_read(agent=crew.worker2, limit=2)] == ["m0", "m1"]
    assert [m.text for m in messages_read(agent=crew.worker2, limit="10")] == ["m2", "m3", "m4"]
    with pytest.raises(TaskInvalid, match="limit must be between 1 and 200"):
        messages_read(agent=crew.worker2, limit=0)


def test_a_read_of_one_team_leaves_the_other_teams_messages_unread(crew):
    other = team_create(actor=crew.system, name="other-team", lead=make_agent(), members=[(crew.worker2, "member")])
    message_send(actor=crew.as_worker, team=crew.team, to=crew.worker2, text="here")
    message_send(actor=crew.system, team=other, to=crew.worker2, text="there")
    assert [m.text for m in messages_read(agent=crew.worker2, team=crew.team)] == ["here"]
    assert [m.text for m in messages_read(agent=crew.worker2)] == ["there"]


def test_messages_go_to_teammates_only_and_never_to_yourself(crew):
    with pytest.raises(TaskInvalid, match="cannot send a message to yourself"):
        message_send(actor=crew.as_worker, team=crew.team, to=crew.worker, text="hi me")
    with pytest.raises(TaskInvalid, match="is not in team"):
        message_send(actor=crew.as_worker, team=crew.team, to=crew.outsider, text="psst")
    with pytest.raises(TeamNotFound):
        message_send(actor=crew.as_outsider, team=crew.team, to=crew.worker, text="let me in")
    assert not TeamMessage.objects.exists()


def test_a_message_may_point_at_a_task_of_the_same_team_only(crew, make_task):
    task = make_task()
    other = team_create(actor=crew.system, name="other-team", lead=make_agent())
    theirs = task_create(actor=crew.system, team=other, subject="theirs")
    sent = message_send(actor=crew.as_worker, team=crew.team, to=crew.worker2, text="see this", task=task)
    assert sent.task == task
    with pytest.raises(TaskNotFound):
        message_send(actor=crew.as_worker, team=crew.team, to=crew.worker2, text="and this", task=theirs)


@pytest.mark.parametrize("text,message", [("", "text is required"), ("x" * 10_001, "the limit is 10,000"),
                                          ("a\x00b", "NUL"), (None, "text is required"), (5, "must be text")])
def test_message_text_is_checked_not_truncated(crew, text, message):
    with pytest.raises(TaskInvalid) as bad:
        message_send(actor=crew.as_worker, team=crew.team, to=crew.worker2, text=text)
    assert message in bad.value.message
    assert not TeamMessage.objects.exists()


def test_a_broadcast_reaches_every_member_but_the_sender_each_with_its_own_receipt(crew):
    sent = message_broadcast(actor=crew.as_lead, team=crew.team, text="Stand-up in five")
    assert sorted(m.recipient.key for m in sent) == sorted([crew.worker.key, crew.worker2.key, crew.reviewer.key])
    assert all(m.kind == "broadcast" for m in sent)
    messages_read(agent=crew.worker)
    unread = TeamMessage.objects.filter(read_at__isnull=True).values_list("recipient__key", flat=True)
    assert sorted(unread) == sorted([crew.worker2.key, crew.reviewer.key])


def test_only_the_lead_or_a_person_broadcasts(crew):
    with pytest.raises(TeamPermissionDenied) as denied:
        message_broadcast(actor=crew.as_worker, team=crew.team, text="everyone listen")
    assert denied.value.message == (f"Only the lead can broadcast messages in team {crew.team.name}; "
                                    f"you are a member.")
    assert len(message_broadcast(actor=crew.person, team=crew.team, text="from the humans")) == 4


def test_an_archived_team_has_a_closed_mailbox(crew):
    team_update(actor=crew.system, team=crew.team, status="archived")
    crew.team.refresh_from_db()
    with pytest.raises(TeamInvalid, match="is archived"):
        message_send(actor=crew.as_worker, team=crew.team, to=crew.worker2, text="hello?")


def test_a_removed_member_no_longer_reads_the_teams_mailbox(crew):
    message_send(actor=crew.as_lead, team=crew.team, to=crew.worker2, text="before you go")
    team_member_remove(actor=crew.system, team=crew.team, agent=crew.worker2)
    assert messages_read(agent=crew.worker2) == []


def test_a_sent_message_is_published_to_the_recipient_after_commit(crew, django_capture_on_commit_callbacks):
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(f"agent.{crew.worker2.key}", channel)
    with django_capture_on_commit_callbacks(execute=True):
        sent = message_send(actor=crew.as_worker, team=crew.team, to=crew.worker2, text="ping")
    message = async_to_sync(layer.receive)(channel)
    assert message["event"] == "team_message.sent"
    assert message["payload"]["id"] == sent.pk and message["payload"]["text"] == "ping"
    assert message["payload"]["sender"] == f"agent:{crew.worker.key}"
