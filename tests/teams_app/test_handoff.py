"""Handoff: an agent passes its conversation (channel + chat id) to an agent it is linked to; the route is one row
per conversation, cleared by the agents of the handoff (or a person), ignored and purged once expired; calls without
a conversation, without a link, or from an agent outside the handoff are refused with a sentence for the model."""
from __future__ import annotations

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.utils import timezone

from teams_app.actors import Actor
from teams_app.choices import LinkDirection
from teams_app.errors import DelegationNotAllowed
from teams_app.models import HandoffRoute
from teams_app.services.delegation import agent_link_create
from teams_app.services.handoff import handoff_route_resolve, handoff_routes_purge_expired, handoff_set
from tests.factories import make_agent
from tools_app import pipeline

pytestmark = pytest.mark.django_db
STAFF = Actor.system("test")
CONVERSATION = {"channel": "telegram", "chat_id": "chat-42", "user_id": "alice"}


def next_event(layer, channel, name: str) -> dict:
    """The next `name` event on `channel` (the pipeline's own tool.executed events go to agent groups too)."""
    while True:
        message = async_to_sync(layer.receive)(channel)
        if message["event"] == name:
            return message


def call(agent, args: dict, **context):
    return pipeline.execute(pipeline.ToolCall(agent, "handoff", args, **{**CONVERSATION, **context}))


@pytest.fixture
def pair():
    front, billing = make_agent(key="front"), make_agent(key="billing")
    agent_link_create(actor=STAFF, source=front, target=billing)
    return front, billing


def test_handoff_routes_the_conversation_to_the_linked_agent(pair):
    front, billing = pair
    outcome = call(front, {"agent": "billing", "reason": "invoice question"})
    assert outcome.status == "ok", outcome.for_llm
    assert "Handed this conversation off to billing" in outcome.for_llm
    route = HandoffRoute.objects.get()
    assert (route.channel, route.chat_id, route.target, route.source) == ("telegram", "chat-42", billing, front)
    assert route.reason == "invoice question" and route.created_by == "agent:front" and route.expires_at is None
    assert handoff_route_resolve(channel="telegram", chat_id="chat-42") == route
    assert handoff_route_resolve(channel="telegram", chat_id="other-chat") is None


def test_handing_on_replaces_the_one_route_of_the_conversation(pair):
    front, billing = pair
    legal = make_agent(key="legal")
    agent_link_create(actor=STAFF, source=billing, target=legal)
    assert call(front, {"agent": "billing"}).status == "ok"
    assert call(billing, {"agent": "legal", "reason": "a contract"}).status == "ok"
    route = HandoffRoute.objects.get()
    assert (route.target, route.source, route.reason) == (legal, billing, "a contract")


def test_clear_gives_the_conversation_back(pair):
    front, billing = pair
    call(front, {"agent": "billing"})
    outcome = call(billing, {"action": "clear"})
    assert outcome.status == "ok" and "Handoff cleared" in outcome.for_llm
    assert not HandoffRoute.objects.exists()
    assert handoff_route_resolve(channel="telegram", chat_id="chat-42") is None
    again = call(billing, {"action": "clear"})
    assert again.status == "ok" and "nothing to clear" in again.for_llm


def test_an_expired_route_is_ignored_and_purged(pair):
    front, billing = pair
    assert call(front, {"agent": "billing", "expires_in_minutes": 30}).status == "ok"
    route = HandoffRoute.objects.get()
    assert timedelta(minutes=29) < route.expires_at - timezone.now() <= timedelta(minutes=30)
    HandoffRoute.objects.filter(pk=route.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert handoff_route_resolve(channel="telegram", chat_id="chat-42") is None
    assert not HandoffRoute.objects.exists()


def test_the_sweep_purges_only_expired_routes(pair):
    front, billing = pair
    now = timezone.now()
    handoff_set(actor=STAFF, source=front, target=billing, channel="web", chat_id="1", expires_in_minutes=5)
    handoff_set(actor=STAFF, source=front, target=billing, channel="web", chat_id="2")
    assert handoff_routes_purge_expired(now=now + timedelta(minutes=6)) == 1
    assert list(HandoffRoute.objects.values_list("chat_id", flat=True)) == ["2"]


def test_a_handoff_without_a_link_is_refused(pair):
    front, billing = pair
    stranger = make_agent(key="stranger")
    outcome = call(front, {"agent": "stranger"})
    assert outcome.is_error and "no link to agent stranger" in outcome.for_llm
    reverse = call(billing, {"agent": "front"})  # the link is outbound only
    assert reverse.is_error and "no link to agent front" in reverse.for_llm
    assert call(stranger, {"agent": "billing"}).is_error
    assert not HandoffRoute.objects.exists()


def test_a_bidirectional_link_allows_handing_back(pair):
    front, billing = pair
    other = make_agent(key="other")
    agent_link_create(actor=STAFF, source=other, target=front, direction=LinkDirection.BIDIRECTIONAL)
    assert call(front, {"agent": "other"}).status == "ok"
    assert HandoffRoute.objects.get().target == other


def test_a_call_without_a_conversation_is_refused(pair):
    front, _ = pair
    outcome = call(front, {"agent": "billing"}, channel="", chat_id="")
    assert outcome.is_error and "no channel and chat id" in outcome.for_llm
    assert call(front, {"action": "clear"}, chat_id="").is_error
    assert not HandoffRoute.objects.exists()


def test_a_disabled_link_a_denied_user_and_self_handoff_are_refused(pair):
    front, billing = pair
    link = front.links_out.get()
    link.deny_user_ids = ["alice"]
    link.save()
    assert "does not allow" in call(front, {"agent": "billing"}).for_llm
    assert call(front, {"agent": "billing"}, user_id="bob").status == "ok"
    assert "yourself" in call(billing, {"agent": "billing"}).for_llm
    HandoffRoute.objects.all().delete()
    link.enabled = False
    link.save()
    assert "no link" in call(front, {"agent": "billing"}, user_id="bob").for_llm


def test_an_agent_outside_the_handoff_can_neither_take_nor_clear_it(pair):
    front, billing = pair
    intruder = make_agent(key="intruder")
    agent_link_create(actor=STAFF, source=intruder, target=front)
    call(front, {"agent": "billing"})
    takeover = call(intruder, {"agent": "front"})
    assert takeover.is_error and "handed off to billing" in takeover.for_llm
    assert call(intruder, {"action": "clear"}).is_error
    assert HandoffRoute.objects.get().target == billing
    with pytest.raises(DelegationNotAllowed):
        handoff_set(actor=Actor.for_agent(intruder), source=intruder, target=front, channel="telegram",
                    chat_id="chat-42")


def test_hostile_arguments_get_sentences_not_crashes(pair):
    front, _ = pair
    assert call(front, {"agent": "nobody"}).for_llm.startswith("There is no agent 'nobody'")
    assert call(front, {"agent": "billing", "expires_in_minutes": 0}).status == "invalid_arguments"
    assert call(front, {"agent": "billing", "reason": "x" * 5000}).status == "invalid_arguments"
    long_chat = call(front, {"agent": "billing"}, chat_id="c" * 300)
    assert long_chat.is_error and "not usable" in long_chat.for_llm
    assert not HandoffRoute.objects.exists()


def test_handoff_changed_reaches_both_agents_and_the_staff_group(pair, django_capture_on_commit_callbacks):
    front, billing = pair
    layer = get_channel_layer()
    channels = {}
    for group in ("agent.front", "agent.billing", "teams"):
        channels[group] = async_to_sync(layer.new_channel)()
        async_to_sync(layer.group_add)(group, channels[group])
    with django_capture_on_commit_callbacks(execute=True):
        call(front, {"agent": "billing", "reason": "invoices"})
    for group, channel in channels.items():
        message = next_event(layer, channel, "handoff.changed")
        assert message["payload"]["action"] == "set" and message["payload"]["route"]["agent"] == "billing"
    with django_capture_on_commit_callbacks(execute=True):
        call(billing, {"action": "clear"})
    message = next_event(layer, channels["agent.front"], "handoff.changed")
    assert message["payload"]["action"] == "cleared" and message["payload"]["route"] is None


def test_staff_clear_a_handoff_from_the_admin_list(pair, admin_client):
    front, billing = pair
    call(front, {"agent": "billing", "reason": "refund"})
    route = HandoffRoute.objects.get()
    page = admin_client.get("/admin/teams_app/handoffroute/")
    assert page.status_code == 200 and "chat-42" in page.content.decode()
    response = admin_client.post("/admin/teams_app/handoffroute/", {
        "action": "clear_selected", "_selected_action": [route.pk]})
    assert response.status_code == 302
    assert not HandoffRoute.objects.exists()


def test_staff_create_a_link_in_the_admin_through_the_link_service(admin_client):
    source, target = make_agent(key="adm-src"), make_agent(key="adm-dst")
    response = admin_client.post("/admin/teams_app/agentlink/add/", {
        "source": source.pk, "target": target.pk, "direction": "outbound", "max_concurrent": 2,
        "allow_user_ids": "[]", "deny_user_ids": '["mallory"]', "description": "", "enabled": "on"})
    assert response.status_code == 302, response.content.decode()[:3000]
    link = source.links_out.get()
    assert (link.target, link.max_concurrent, link.deny_user_ids) == (target, 2, ["mallory"])
    bad = admin_client.post("/admin/teams_app/agentlink/add/", {
        "source": target.pk, "target": source.pk, "direction": "outbound", "max_concurrent": 2,
        "allow_user_ids": '"everyone"', "deny_user_ids": "[]", "description": "", "enabled": "on"})
    assert bad.status_code == 200 and "allow_user_ids must be a list" in bad.content.decode()
    assert not target.links_out.exists()
