"""Delegation over agent links: a link (either direction when bidirectional) and its user lists decide who may
delegate; the link's max_concurrent and the target's max_delegation_load are enforced, also under concurrent calls
(asserted on the database); the target answers, the source cancels and follows up; delegating to a team lead puts
the work on its board and the task's result flows back to the source; DELEGATION.md lists an agent's targets."""
from __future__ import annotations


import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from teams_app.actors import Actor
from teams_app.choices import DelegationStatus, LinkDirection
from teams_app.errors import AgentAtCapacity
from teams_app.models import AgentLink, Delegation
from teams_app.selectors_delegation import delegation_md
from teams_app.services.delegation import agent_link_create, delegation_create
from tests.factories import make_agent
from tests.teams_app.racing import race
from tools_app import pipeline
from tools_app.selectors_context import agent_context_for

pytestmark = pytest.mark.django_db
STAFF = Actor.system("test")
CAPACITY = "Try a different agent or handle it yourself."


def delegate(agent, args: dict, user_id: str = "alice", **context):
    return pipeline.execute(pipeline.ToolCall(agent, "delegate", args, user_id=user_id, **context))


def link(source, target, **fields) -> AgentLink:
    return agent_link_create(actor=STAFF, source=source, target=target, **fields)


@pytest.fixture
def boss():
    return make_agent(key="boss", display_name="The Boss")


@pytest.fixture
def worker(boss):
    worker = make_agent(key="worker", display_name="Research Worker")
    link(boss, worker, max_concurrent=2, description="finds papers and summarises them")
    return worker


def ident(outcome) -> str:
    return outcome.for_llm.split()[1]  # "Delegated D-12 to …"


# --- delegate, answer, follow up -----------------------------------------------------------------------------------
def test_a_delegation_runs_until_the_target_completes_it_and_the_source_reads_the_result(boss, worker):
    outcome = delegate(boss, {"agent": "worker", "task": "Summarise the 2024 papers on vector search"})
    assert outcome.status == "ok", outcome.for_llm
    d = Delegation.objects.get()
    assert (d.source, d.target, d.status, d.user_id) == (boss, worker, DelegationStatus.RUNNING, "alice")
    assert ident(outcome) == f"D-{d.pk}" and d.link == boss.links_out.get()
    incoming = delegate(worker, {"action": "list"})
    assert f"D-{d.pk} from boss (answer it): Summarise the 2024 papers" in incoming.for_llm
    assert f"D-{d.pk} to worker" in delegate(boss, {"action": "list"}).for_llm
    done = delegate(worker, {"action": "complete", "id": f"D-{d.pk}", "result": "Three papers; HNSW wins."})
    assert done.status == "ok" and "completed" in done.for_llm
    status = delegate(boss, {"action": "status", "id": f"d-{d.pk}"})
    assert f"D-{d.pk} from boss to worker: completed" in status.for_llm
    assert "result: Three papers; HNSW wins." in status.for_llm
    assert "no running delegations" in delegate(boss, {"action": "list"}).for_llm


def test_only_the_target_answers_and_only_the_source_cancels(boss, worker):
    d_id = ident(delegate(boss, {"agent": "worker", "task": "one"}))
    refused = delegate(boss, {"action": "complete", "id": d_id, "result": "self-serve"})
    assert refused.is_error and "Only worker" in refused.for_llm
    assert delegate(worker, {"action": "cancel", "id": d_id}).is_error
    assert delegate(worker, {"action": "fail", "id": d_id, "result": "no access to the papers"}).status == "ok"
    again = delegate(worker, {"action": "complete", "id": d_id, "result": "late"})
    assert again.is_error and "is failed, not running" in again.for_llm
    d = Delegation.objects.get()
    assert (d.status, d.result) == (DelegationStatus.FAILED, "no access to the papers")
    other = ident(delegate(boss, {"agent": "worker", "task": "two"}))
    assert delegate(boss, {"action": "cancel", "id": other}).status == "ok"
    assert Delegation.objects.get(pk=int(other[2:])).status == DelegationStatus.CANCELLED


def test_an_agent_cannot_see_or_touch_delegations_of_others(boss, worker):
    d_id = ident(delegate(boss, {"agent": "worker", "task": "private"}))
    outsider = make_agent(key="outsider")
    for args in ({"action": "status", "id": d_id}, {"action": "cancel", "id": d_id},
                 {"action": "complete", "id": d_id, "result": "x"}, {"action": "status", "id": "D-999999"},
                 {"action": "status", "id": "../../etc"}, {"action": "status", "id": True}):
        outcome = delegate(outsider, args)
        assert outcome.is_error, args
        if args.get("id") is not True:
            assert "You have no delegation" in outcome.for_llm
    assert Delegation.objects.get().status == DelegationStatus.RUNNING


def test_delegation_events_reach_both_agents(boss, worker, django_capture_on_commit_callbacks):
    layer = get_channel_layer()
    channels = {key: async_to_sync(layer.new_channel)() for key in ("boss", "worker")}
    for key, channel in channels.items():
        async_to_sync(layer.group_add)(f"agent.{key}", channel)

    def next_event(channel, name):
        while True:
            message = async_to_sync(layer.receive)(channel)
            if message["event"] == name:
                return message

    with django_capture_on_commit_callbacks(execute=True):
        d_id = ident(delegate(boss, {"agent": "worker", "task": "ping"}))
    for channel in channels.values():
        assert next_event(channel, "delegation.requested")["payload"]["delegation"]["id"] == d_id
    with django_capture_on_commit_callbacks(execute=True):
        delegate(worker, {"action": "complete", "id": d_id, "result": "pong"})
    assert next_event(channels["boss"], "delegation.completed")["payload"]["delegation"]["result"] == "pong"


# --- links and users -----------------------------------------------------------------------------------------------
def test_delegation_needs_a_link_in_the_right_direction(boss, worker):
    back = delegate(worker, {"agent": "boss", "task": "the link is outbound only"})
    assert back.is_error and "no delegation link to agent boss" in back.for_llm
    peer = make_agent(key="peer")
    link(peer, boss, direction=LinkDirection.BIDIRECTIONAL)
    assert delegate(boss, {"agent": "peer", "task": "bidirectional works backwards"}).status == "ok"
    assert delegate(boss, {"agent": "boss", "task": "me"}).is_error
    assert "There is no agent" in delegate(boss, {"agent": "ghost", "task": "x"}).for_llm
    AgentLink.objects.filter(source=boss, target=worker).update(enabled=False)
    assert delegate(boss, {"agent": "worker", "task": "disabled link"}).is_error
    assert Delegation.objects.count() == 1


def test_user_allow_and_deny_lists_decide_for_the_callers_user(boss, worker):
    AgentLink.objects.filter(target=worker).update(allow_user_ids=["alice", "carol"], deny_user_ids=["carol"])
    assert delegate(boss, {"agent": "worker", "task": "a"}, user_id="alice").status == "ok"
    bob = delegate(boss, {"agent": "worker", "task": "b"}, user_id="bob")
    assert bob.is_error and "does not allow delegating for this user" in bob.for_llm
    assert delegate(boss, {"agent": "worker", "task": "c"}, user_id="carol").is_error  # deny wins
    assert delegate(boss, {"agent": "worker", "task": "d"}, user_id="").is_error  # an allow list needs a user
    AgentLink.objects.filter(target=worker).update(allow_user_ids=[], deny_user_ids=["carol"])
    assert delegate(boss, {"agent": "worker", "task": "e"}, user_id="bob").status == "ok"  # empty allow = everyone
    assert Delegation.objects.count() == 2


# --- limits --------------------------------------------------------------------------------------------------------
def test_the_links_max_concurrent_is_enforced_with_the_seeds_sentence(boss, worker):
    first = ident(delegate(boss, {"agent": "worker", "task": "1"}))
    delegate(boss, {"agent": "worker", "task": "2"})
    full = delegate(boss, {"agent": "worker", "task": "3"})
    assert full.is_error
    assert full.for_llm.startswith(f"Agent at capacity (2/2). {CAPACITY}") and "link" in full.for_llm
    assert Delegation.objects.filter(status=DelegationStatus.RUNNING).count() == 2
    delegate(worker, {"action": "complete", "id": first, "result": "done"})
    assert delegate(boss, {"agent": "worker", "task": "3 again"}).status == "ok"


def test_the_targets_max_delegation_load_counts_every_source(boss):
    busy = make_agent(key="busy", other_config={"max_delegation_load": 2})
    other = make_agent(key="other-source")
    link(boss, busy, max_concurrent=10)
    link(other, busy, max_concurrent=10)
    assert delegate(boss, {"agent": "busy", "task": "1"}).status == "ok"
    assert delegate(other, {"agent": "busy", "task": "2"}).status == "ok"
    full = delegate(boss, {"agent": "busy", "task": "3"})
    assert full.for_llm.startswith(f"Agent at capacity (2/2). {CAPACITY}") and "the agent's" in full.for_llm
    with pytest.raises(AgentAtCapacity) as caught:
        delegation_create(source=other, target=busy, request="4")
    assert caught.value.details == {"limit": "agent", "running": 2, "max": 2}


def test_the_default_load_is_five(boss):
    target = make_agent(key="default-load")
    sources = [make_agent(key=f"src-{n}") for n in range(6)]
    for source in sources:
        link(source, target, max_concurrent=3)
    for source in sources[:5]:
        delegation_create(source=source, target=target, request="x")
    with pytest.raises(AgentAtCapacity, match=r"^Agent at capacity \(5/5\)\. Try a different agent or handle it"):
        delegation_create(source=sources[5], target=target, request="x")


@pytest.mark.django_db(transaction=True)
def test_concurrent_delegations_never_exceed_the_link_limit():
    source, target = make_agent(key="race-src"), make_agent(key="race-dst")
    link(source, target, max_concurrent=3)
    calls = [lambda n=n: delegation_create(source=source, target=target, request=f"job {n}") for n in range(8)]
    outcomes = race(lambda call: call(), calls)
    assert sum(isinstance(o, Delegation) for o in outcomes) == 3
    assert sum(isinstance(o, AgentAtCapacity) for o in outcomes) == 5, outcomes
    assert Delegation.objects.filter(target=target, status=DelegationStatus.RUNNING).count() == 3


@pytest.mark.django_db(transaction=True)
def test_concurrent_delegations_from_many_sources_never_exceed_the_targets_load():
    target = make_agent(key="race-load", other_config={"max_delegation_load": 3})
    sources = [make_agent(key=f"race-s{n}") for n in range(4)]
    for source in sources:
        link(source, target, max_concurrent=5)
    calls = [lambda s=s: delegation_create(source=s, target=target, request="job") for s in sources for _ in range(2)]
    outcomes = race(lambda call: call(), calls)
    assert sum(isinstance(o, Delegation) for o in outcomes) == 3
    assert all(isinstance(o, (Delegation, AgentAtCapacity)) for o in outcomes), outcomes
    assert Delegation.objects.filter(target=target, status=DelegationStatus.RUNNING).count() == 3


# --- DELEGATION.md and search --------------------------------------------------------------------------------------
def test_delegation_md_lists_every_target_in_full_up_to_fifteen(boss, worker):
    peer = make_agent(key="peer", display_name="Peer Reviewer")
    link(peer, boss, direction=LinkDirection.BIDIRECTIONAL, description="reviews drafts")
    link(make_agent(key="one-way"), boss)  # an outbound link into boss is not a target of boss
    text = delegation_md(boss, "alice")
    assert "- **worker** (Research Worker), up to 2 at once: finds papers and summarises them" in text
    assert "- **peer** (Peer Reviewer), up to 3 at once: reviews drafts" in text
    assert "one-way" not in text and '"action": "delegate"' in text
    files = {f.name: f.content for f in agent_context_for(boss, "alice").files}
    assert files["DELEGATION.md"] == text
    assert delegation_md(worker, "alice") == ""  # worker delegates to nobody
    AgentLink.objects.filter(target=worker).update(deny_user_ids=["mallory"])
    assert "worker" not in delegation_md(boss, "mallory")


def test_delegation_md_shortens_past_fifteen_targets_and_search_finds_them(boss):
    for n in range(16):
        link(boss, make_agent(key=f"helper-{n:02d}", display_name=f"Helper {n}"),
             description="translates French" if n == 7 else "general help")
    text = delegation_md(boss, "alice")
    assert "helper-00" in text and "helper-15" in text and "translates" not in text
    assert '"action": "search"' in text
    found = delegate(boss, {"action": "search", "query": "french"})
    assert found.status == "ok" and "helper-07" in found.for_llm and "helper-06" not in found.for_llm
    assert "No agent" in delegate(boss, {"action": "search", "query": "100%_"}).for_llm


# --- delegating to a team lead: the board round trip ---------------------------------------------------------------
@pytest.fixture
def board(boss):
    from teams_app.services.teams import team_create

    lead, member = make_agent(key="lead", display_name="Team Lead"), make_agent(key="member")
    team = team_create(actor=STAFF, name="Alpha", lead=lead, members=[(member, "member")])
    link(boss, lead, max_concurrent=5, description="runs the content team")
    return team, lead, member


def execute(client, arguments: dict):
    response = client.post("/api/v1/tools/execute", {"tool": "delegate", "arguments": arguments, "context": {
        "user_id": "alice", "channel": "telegram", "chat_id": "chat-9"}}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def test_delegating_to_a_team_lead_round_trips_through_the_board(boss, board, django_capture_on_commit_callbacks):
    from rest_framework.test import APIClient

    from teams_app.selectors import task_get
    from teams_app.services.tasks import task_claim, task_complete
    from tools_app.services.agents import token_issue

    team, lead, member = board
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_issue(agent=boss, name='t')[1]}")
    answer = execute(client, {"agent": "lead", "task": "Write the launch post\nMention the new pricing."})
    assert answer["status"] == "ok", answer
    assert "it is task T-001 on team Alpha's board" in answer["for_llm"]
    d = Delegation.objects.get()
    task = task_get(team, "T-001")
    assert d.task == task and d.status == DelegationStatus.RUNNING
    assert task.subject == "Write the launch post" and task.owner is None and task.status == "pending"
    assert task.description == "Write the launch post\nMention the new pricing.\n\nDelegated by boss"
    assert (task.user_id, task.channel, task.chat_id) == ("alice", "telegram", "chat-9")
    assert task.created_by == f"system:delegation:D-{d.pk}"
    direct = delegate(lead, {"action": "complete", "id": f"D-{d.pk}", "result": "skip the board"})
    assert direct.is_error and "Complete (or fail) the task instead" in direct.for_llm

    layer = get_channel_layer()
    inbox = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)("agent.boss", inbox)
    claimed = task_claim(actor=Actor.for_agent(member), team=team)
    with django_capture_on_commit_callbacks(execute=True):
        task_complete(actor=Actor.for_agent(member), task=claimed, result="Posted at /blog/launch")
    while (message := async_to_sync(layer.receive)(inbox))["event"] != "delegation.completed":
        pass
    assert message["payload"]["delegation"]["result"] == "Posted at /blog/launch"
    d.refresh_from_db()
    assert (d.status, d.result) == (DelegationStatus.COMPLETED, "Posted at /blog/launch")
    status = execute(client, {"action": "status", "id": f"D-{d.pk}"})
    assert f"D-{d.pk} from boss to lead: completed" in status["for_llm"]
    assert "board task: T-001 on team Alpha (completed, 100% done)" in status["for_llm"]
    assert "result: Posted at /blog/launch" in status["for_llm"]


def test_a_failed_or_cancelled_board_task_finishes_its_delegation(boss, board):
    from teams_app.services.tasks import task_cancel, task_claim, task_fail

    team, lead, member = board
    first = delegation_create(source=boss, target=lead, request="Translate the FAQ")
    second = delegation_create(source=boss, target=lead, request="Draw the diagram")
    task_fail(actor=Actor.for_agent(member), task=task_claim(actor=Actor.for_agent(member), team=team, task=first.task),
              reason="the FAQ is not written yet")
    task_cancel(actor=Actor.for_agent(lead), task=second.task, reason="not needed any more")
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, first.result) == (DelegationStatus.FAILED, "the FAQ is not written yet")
    assert (second.status, second.result) == (DelegationStatus.CANCELLED, "not needed any more")


def test_cancelling_a_board_delegation_cancels_its_task(boss, board):
    team, lead, _ = board
    d_id = ident(delegate(boss, {"agent": "lead", "task": "Plan the offsite"}))
    assert "Its board task T-001 is cancelled too" in delegate(boss, {"action": "cancel", "id": d_id}).for_llm
    d = Delegation.objects.select_related("task").get()
    assert d.status == DelegationStatus.CANCELLED and d.task.status == "cancelled"


def test_a_lead_of_several_teams_needs_the_team_named(boss, board):
    from teams_app.services.teams import team_create

    team, lead, _ = board
    team_create(actor=STAFF, name="Beta", lead=lead)
    unnamed = delegate(boss, {"agent": "lead", "task": "Which board?"})
    assert unnamed.is_error and "leads teams Alpha, Beta: pass team" in unnamed.for_llm
    wrong = delegate(boss, {"agent": "lead", "task": "x", "team": "Gamma"})
    assert wrong.is_error and "leads no team 'Gamma' (it leads Alpha, Beta)" in wrong.for_llm
    named = delegate(boss, {"agent": "lead", "task": "Beta's job", "team": "beta"})
    assert "team Beta's board" in named.for_llm
    assert Delegation.objects.get().task.team.name == "Beta"
    assert "(leads team Alpha, Beta: the work becomes a task on its board" in delegation_md(boss, "alice")
