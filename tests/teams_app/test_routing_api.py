"""The routing API: `routes/resolve` tells a channel gateway (staff or any agent token) which agent gets a
conversation's next message; staff manage agent links by agent key (agents get 403); `delegations/` shows an agent
its own delegations both ways and staff every one. Bad input is a 400 envelope, never a 500."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from teams_app.actors import Actor
from teams_app.models import AgentLink, HandoffRoute
from teams_app.services.delegation import agent_link_create, delegation_complete, delegation_create
from teams_app.services.handoff import handoff_set
from tests.factories import make_agent

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("counters_reread_only_after_a_change")]  # counts queries
STAFF = Actor.system("test")


@pytest.fixture
def route(agent):
    target = make_agent(key="billing")
    agent_link_create(actor=STAFF, source=agent, target=target)
    return handoff_set(actor=Actor.for_agent(agent), source=agent, target=target, channel="telegram",
                       chat_id="chat 42", reason="invoices")


# --- routes/resolve ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("client_name", ["api", "staff_api"])
def test_resolve_names_the_handoff_agent_for_staff_and_agents(request, route, client_name):
    client = request.getfixturevalue(client_name)
    body = client.get("/api/v1/routes/resolve", {"channel": "telegram", "chat_id": "chat 42"}).json()
    assert body["channel"] == "telegram" and body["chat_id"] == "chat 42" and body["agent"] == "billing"
    assert body["route"]["from_agent"] == route.source.key and body["route"]["reason"] == "invoices"
    assert body["route"]["expires_at"] is None


def test_resolve_without_a_route_answers_null(api):
    body = api.get("/api/v1/routes/resolve/", {"channel": "telegram", "chat_id": "nobody"}).json()
    assert body == {"channel": "telegram", "chat_id": "nobody", "agent": None, "route": None}


def test_resolve_ignores_and_purges_an_expired_route(api, route):
    HandoffRoute.objects.filter(pk=route.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    body = api.get("/api/v1/routes/resolve", {"channel": "telegram", "chat_id": "chat 42"}).json()
    assert body["agent"] is None and body["route"] is None
    assert not HandoffRoute.objects.exists()


@pytest.mark.parametrize("query", [{}, {"channel": "telegram"}, {"chat_id": "1"}, {"channel": "", "chat_id": "1"},
                                   {"channel": "x" * 65, "chat_id": "1"}, {"channel": "t", "chat_id": "a\x00b"}])
def test_resolve_with_bad_query_parameters_is_a_400_envelope(api, query):
    response = api.get("/api/v1/routes/resolve", query)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"


def test_resolve_needs_credentials(db):
    response = APIClient().get("/api/v1/routes/resolve", {"channel": "t", "chat_id": "1"})
    assert response.status_code in (401, 403) and "error" in response.json()


# --- agent links ---------------------------------------------------------------------------------------------------
def test_staff_create_read_change_and_delete_links_by_agent_key(staff_api):
    make_agent(key="src"), make_agent(key="dst")
    created = staff_api.post("/api/v1/agent-links/", {
        "source": "src", "target": "dst", "direction": "bidirectional", "max_concurrent": 4,
        "allow_user_ids": ["alice"], "deny_user_ids": ["bob"], "description": "research help"}, format="json")
    assert created.status_code == 201, created.content
    link = created.json()
    assert {k: link[k] for k in ("source", "target", "direction", "max_concurrent", "allow_user_ids",
                                 "deny_user_ids", "description", "enabled")} == {
        "source": "src", "target": "dst", "direction": "bidirectional", "max_concurrent": 4,
        "allow_user_ids": ["alice"], "deny_user_ids": ["bob"], "description": "research help", "enabled": True}
    listed = staff_api.get("/api/v1/agent-links/").json()
    assert [row["id"] for row in listed["results"]] == [link["id"]]
    assert staff_api.get(f"/api/v1/agent-links/{link['id']}/").json()["target"] == "dst"
    patched = staff_api.patch(f"/api/v1/agent-links/{link['id']}/", {"max_concurrent": 1, "enabled": False},
                              format="json")
    assert patched.status_code == 200 and (patched.json()["max_concurrent"], patched.json()["enabled"]) == (1, False)
    assert staff_api.delete(f"/api/v1/agent-links/{link['id']}/").status_code == 204
    assert not AgentLink.objects.exists()
    assert staff_api.get(f"/api/v1/agent-links/{link['id']}/").status_code == 404


def test_link_writes_with_bad_input_are_400s_and_duplicates_409(staff_api):
    make_agent(key="src"), make_agent(key="dst")
    bad = [{"source": "src", "target": "ghost"}, {"source": "src", "target": "src"},
           {"source": "src", "target": "dst", "max_concurrent": 0},
           {"source": "src", "target": "dst", "max_concurrent": True},
           {"source": "src", "target": "dst", "direction": "inbound"},
           {"source": "src", "target": "dst", "allow_user_ids": "alice"},
           {"source": "src", "target": "dst", "deny_user_ids": [1]}, {"source": 5, "target": "dst"}]
    for body in bad:
        response = staff_api.post("/api/v1/agent-links/", body, format="json")
        assert response.status_code == 400, (body, response.content)
        assert "error" in response.json()
    assert staff_api.post("/api/v1/agent-links/", {"source": "src", "target": "dst"}, format="json").status_code == 201
    again = staff_api.post("/api/v1/agent-links/", {"source": "src", "target": "dst"}, format="json")
    assert again.status_code == 409 and again.json()["error"]["code"] == "agent_link_exists"
    assert staff_api.get("/api/v1/agent-links/abc/").status_code == 404
    assert staff_api.get("/api/v1/agent-links/99999999999999999999999/").status_code == 404


def test_agents_may_not_manage_links(api, agent):
    other = make_agent(key="other")
    link = agent_link_create(actor=STAFF, source=other, target=agent)
    assert api.get("/api/v1/agent-links/").status_code == 403
    assert api.post("/api/v1/agent-links/", {"source": agent.key, "target": "other"}, format="json").status_code == 403
    assert api.patch(f"/api/v1/agent-links/{link.pk}/", {"max_concurrent": 100}, format="json").status_code == 403
    assert api.delete(f"/api/v1/agent-links/{link.pk}/").status_code == 403
    assert AgentLink.objects.get().max_concurrent == 3


# --- delegations ---------------------------------------------------------------------------------------------------
def test_an_agent_lists_its_own_delegations_both_ways_and_staff_see_all(api, staff_api, agent):
    helper, boss, stranger = make_agent(key="helper"), make_agent(key="boss"), make_agent(key="stranger")
    for source, target in ((agent, helper), (boss, agent), (stranger, helper)):
        agent_link_create(actor=STAFF, source=source, target=target)
    out = delegation_create(source=agent, target=helper, request="outgoing")
    incoming = delegation_create(source=boss, target=agent, request="incoming")
    delegation_create(source=stranger, target=helper, request="not mine")
    delegation_complete(agent=agent, delegation=incoming, result="done")
    mine = api.get("/api/v1/delegations/").json()["results"]
    assert {d["id"] for d in mine} == {f"D-{out.pk}", f"D-{incoming.pk}"}
    running = api.get("/api/v1/delegations", {"status": "running"}).json()["results"]
    assert [(d["id"], d["source"], d["target"], d["request"]) for d in running] == [
        (f"D-{out.pk}", agent.key, "helper", "outgoing")]
    assert len(staff_api.get("/api/v1/delegations/").json()["results"]) == 3
    completed = staff_api.get("/api/v1/delegations/", {"status": "completed"}).json()["results"]
    assert [(d["id"], d["result"]) for d in completed] == [(f"D-{incoming.pk}", "done")]
    bad = api.get("/api/v1/delegations/", {"status": "finished"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"


def test_the_delegation_list_costs_the_same_queries_for_one_row_or_many(api, agent):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from teams_app.services.teams import team_create

    lead = make_agent(key="lead")
    team_create(actor=STAFF, name="Crew", lead=lead)
    agent_link_create(actor=STAFF, source=agent, target=lead, max_concurrent=10)
    delegation_create(source=agent, target=lead, request="first")
    api.get("/api/v1/delegations/")  # the token's first use of the run records its last use once
    with CaptureQueriesContext(connection) as one:
        assert len(api.get("/api/v1/delegations/").json()["results"]) == 1
    for n in range(4):
        delegation_create(source=agent, target=lead, request=f"more {n}")
    with CaptureQueriesContext(connection) as five:
        rows = api.get("/api/v1/delegations/").json()["results"]
    assert len(rows) == 5 and all(row["task"].startswith("T-") and row["team"] for row in rows)
    assert len(five.captured_queries) == len(one.captured_queries)
