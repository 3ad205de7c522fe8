"""The list endpoints and the catalog answer with a fixed number of SQL queries, however many rows (or tools)
there are: the query count for 30 rows is the count for 3."""
import itertools

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tools_app import pipeline
from tools_app.base import Tool, ToolResult
from tools_app.services import approvals as svc
from tools_app.services.agents import agent_update
from tools_app.toolsets import ToolSource

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("counters_reread_only_after_a_change")]


@pytest.fixture
def staff_user(django_user_model):
    return django_user_model.objects.create_user("decider", password="pw-decider-123", is_staff=True)


def _queries(client, url) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200, response.content[:300]
    return len(queries)


def _assert_flat(client, url, add_rows, django_assert_num_queries):
    """Add 3 rows and count the queries of one GET; add 27 more: the same GET must run exactly as many."""
    add_rows(3)
    client.get(url)  # the first request of a token stamps its last use; that write is not part of the count
    with_3 = _queries(client, url)
    add_rows(27)
    client.get(url)  # adding rows may have changed the agent: re-reading its token is not part of the count either
    with django_assert_num_queries(with_3):
        assert len(client.get(url).json()["results"]) == 30


def _invocations(agent):
    def add(n):
        for i in range(n):
            pipeline.execute(pipeline.ToolCall(agent=agent, tool="datetime", arguments={}, session_key=f"s{i}"))
    return add


def _approvals(agent, staff_user):
    def add(n):
        agent_update(agent=agent, mode="manual")
        for i in range(n):
            asked = pipeline.execute(pipeline.ToolCall(agent=agent, tool="datetime", arguments={}, session_key=f"s{i}"))
            if i % 2:  # decided rows show who decided
                svc.approval_decide(approval_id=asked.extra["approval_id"], decision="deny", actor=staff_user)
    return add


def _held_changes(agent):
    numbers = itertools.count()

    def add(n):
        agent_update(agent=agent, mode="review")
        for _ in range(n):
            held = pipeline.execute(pipeline.ToolCall(agent=agent, tool="write_file",
                                                      arguments={"path": f"held-{next(numbers)}.txt", "content": "x"}))
            assert held.status == "pending_approval"
    return add


@pytest.mark.parametrize("who", ["agent", "staff"])
def test_the_invocation_list_runs_the_same_queries_for_3_and_30_rows(who, api, staff_api, agent, django_assert_num_queries):
    client = api if who == "agent" else staff_api
    _assert_flat(client, "/api/v1/invocations", _invocations(agent), django_assert_num_queries)


@pytest.mark.parametrize("who", ["agent", "staff"])
def test_the_approval_list_runs_the_same_queries_for_3_and_30_rows(who, api, staff_api, agent, staff_user,
                                                                   django_assert_num_queries):
    client = api if who == "agent" else staff_api
    _assert_flat(client, "/api/v1/approvals", _approvals(agent, staff_user), django_assert_num_queries)


@pytest.mark.parametrize("who", ["agent", "staff"])
def test_the_pending_change_list_runs_the_same_queries_for_3_and_30_rows(who, api, staff_api, agent,
                                                                         django_assert_num_queries):
    client = api if who == "agent" else staff_api
    _assert_flat(client, "/api/v1/pending-changes", _held_changes(agent), django_assert_num_queries)


# --- the catalog --------------------------------------------------------------------------------------
class _CountedSource(ToolSource):
    """A tool source with as many tools as the test asks for."""

    name = "query-count-source"

    def __init__(self):
        self.count = 0

    def tools_for(self, agent, user_id):
        return [_Listed(name=f"listed_{i:02d}", description="listed", group="listed") for i in range(self.count)]


class _Listed(Tool):
    def run(self, ctx, args):
        return ToolResult(for_llm="listed")


@pytest.fixture
def counted_source():
    from tools_app.toolsets import tool_source_register, tool_source_unregister

    source = _CountedSource()
    tool_source_register(source)
    yield source
    tool_source_unregister(source.name)


def _cold_catalog(api) -> tuple[int, set[str]]:
    """One catalog request with every cache dropped first (tool sets and policy resolutions)."""
    from tools_app.policy import policy_changed
    from tools_app.toolsets import tools_changed

    tools_changed()
    policy_changed()
    with CaptureQueriesContext(connection) as queries:
        names = {tool["name"] for tool in api.get("/api/v1/tools").json()["tools"]}
    return len(queries), names


def test_the_catalog_runs_the_same_queries_for_3_and_30_listed_tools(api, agent, counted_source):
    from tools_app.models import ToolPolicy
    from tools_app.services.policy import tool_policy_save

    tool_policy_save(actor=None, policy=ToolPolicy(scope="agent", agent=agent, deny=["exec"]))
    api.get("/api/v1/tools")  # stamps the token's last use
    counted_source.count = 3
    with_3, names = _cold_catalog(api)
    assert {"listed_00", "listed_02"} <= names and "exec" not in names
    counted_source.count = 30
    with_30, names = _cold_catalog(api)
    assert "listed_29" in names and "exec" not in names
    assert with_30 == with_3
    with CaptureQueriesContext(connection) as warm:
        api.get("/api/v1/tools")
    assert len(warm) < with_3  # warm: nothing but authentication is read again
