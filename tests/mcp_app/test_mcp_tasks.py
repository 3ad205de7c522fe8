"""Calls that wait for a person, answered as MCP tasks (the `io.modelcontextprotocol/tasks` extension): real
uvicorn processes serving `mcp_app.server.asgi` on the test database, a person deciding through the approval
service, and the task polled from any process, across a restart.

On the 2025-11-25 wire the requests are plain JSON-RPC (`LegacySession`): the SDK's client advertises extensions
that claim results only on the 2026-07-28 wire, and it checks 2025-11-25 answers against that revision's schema,
where a tools/call result has no `resultType`. On the 2026-07-28 wire the SDK's client speaks the extension through
its own extension mechanism (`TasksExtension`: a result claim for `resultType: "task"`)."""
from __future__ import annotations

import asyncio
import threading
import uuid
from datetime import datetime, timezone as dt_timezone
from typing import Any, Literal

import httpx
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter

from tests.mcp_app.test_mcp_server import (  # noqa: F401 (the autouse fixture applies to this module too)
    UvicornProcess, _generations_past_what_the_servers_saw, agent_with_token, cautious, client, decide_when_requested,
    httpx_client, sse_messages,
)
from tests.servers import DaphneProcess, up_env, wait_until

pytestmark = [pytest.mark.django_db(transaction=True)]
APPROVAL_WAIT = 3  # GOCLAW_MCP_APPROVAL_WAIT of the servers under test (clients without the extension wait this long)
TASKS = "io.modelcontextprotocol/tasks"
DECLARES = {"extensions": {TASKS: {}}}


@pytest.fixture(scope="module")
def servers(django_db_setup, django_db_blocker, tmp_path_factory):
    """Two MCP server processes on the same database (replicas)."""
    home = tmp_path_factory.mktemp("mcp-tasks")
    with django_db_blocker.unblock():
        env = server_env(home)
    started = [UvicornProcess(env, home / f"uvicorn-{i}.log") for i in range(2)]
    try:
        yield [server.wait_listening() for server in started]
    finally:
        for server in started:
            server.stop()


def server_env(home) -> dict[str, str]:
    return up_env(home / "var", DATABASE_URL=DaphneProcess.database_url(), GOCLAW_MCP_APPROVAL_WAIT=str(APPROVAL_WAIT),
                  GOCLAW_LOG_LEVEL="warning")


class RPCError(Exception):
    def __init__(self, error: dict):
        super().__init__(error.get("message"))
        self.code, self.data = error.get("code"), error.get("data")


class LegacySession:
    """A 2025-11-25 session over plain JSON-RPC: initialize with these client capabilities, then requests to any
    of the servers (the session id is the same everywhere)."""

    def __init__(self, url: str, token: str, capabilities: dict):
        self.url = url
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
        self.ids = iter(range(1, 10_000))
        opened = httpx.post(url, headers=self.headers, timeout=30, json={
            "jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": capabilities,
                "clientInfo": {"name": "tasks-test", "version": "0"}}})
        assert opened.status_code == 200, opened.text
        self.initialize_result = self._answer(opened, 0)
        self.headers.update({"Mcp-Session-Id": opened.headers["mcp-session-id"], "Mcp-Protocol-Version": "2025-11-25"})
        httpx.post(url, headers=self.headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, timeout=30)

    def request(self, method: str, params: dict, *, url: str | None = None) -> dict:
        """The result of one request (RPCError for a JSON-RPC error), sent to `url` (another replica) or ours."""
        request_id = next(self.ids)
        answer = httpx.post(url or self.url, headers=self.headers, timeout=60,
                            json={"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return self._answer(answer, request_id)

    @staticmethod
    def _answer(response: httpx.Response, request_id: int) -> dict:
        message = next(m for m in sse_messages(response.text) if m.get("id") == request_id)
        if "error" in message:
            raise RPCError(message["error"])
        return message["result"]

    def call(self, name: str, arguments: dict, **params) -> dict:
        return self.request("tools/call", {"name": name, "arguments": arguments, **params})

    def get(self, task_id: str, *, url: str | None = None) -> dict:
        return self.request("tasks/get", {"taskId": task_id}, url=url)

    def cancel(self, task_id: str) -> dict:
        return self.request("tasks/cancel", {"taskId": task_id})


def cautious_agent():
    agent, token = agent_with_token()
    cautious(agent)
    return agent, token


def decide(approval_id, decision: str, note: str = "", *, close: bool = False):
    """A person decides (`close`: from a worker thread, whose database connection is closed after)."""
    from django.db import connection

    from tools_app.services import approvals as svc

    try:
        return svc.approval_decide(approval_id=approval_id, decision=decision, actor=None, note=note)
    finally:
        if close:
            connection.close()


def approval(approval_id):
    from tools_app.models import ApprovalRequest

    return ApprovalRequest.objects.get(pk=approval_id)


def iso(moment: datetime) -> str:
    return moment.astimezone(dt_timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def finished(session: LegacySession, task_id: str, *, url: str | None = None) -> dict:
    """The task once it is no longer working: polled like a client does (the poll that starts an approved call
    answers before a slow one ends)."""
    return wait_until(lambda: (task := session.get(task_id, url=url))["status"] != "working" and task, timeout=60,
                      interval=0.2, message="the task to end")


def ran_lines(agent, name: str = "ran.txt") -> list[str]:
    path = agent.workspace_path / name
    return path.read_text().splitlines() if path.exists() else []


# --- the extension on the 2025-11-25 wire --------------------------------------------------------------------
def test_a_call_waiting_for_a_person_is_a_task_at_once_and_runs_once_when_approved(server):
    from mcp_app.models import MCPTask
    from tools_app.models import ToolInvocation

    agent, token = cautious_agent()
    session = LegacySession(server.url, token, DECLARES)
    assert session.initialize_result["capabilities"]["extensions"] == {TASKS: {}}

    created = session.call("exec", {"command": "echo task-run >> ran.txt"})
    assert created["resultType"] == "task" and created["status"] == "working"
    assert "content" not in created and "result" not in created and "task" not in created
    assert isinstance(created["ttlMs"], int) and created["ttlMs"] > 0 and isinstance(created["pollIntervalMs"], int)
    assert created["createdAt"].endswith("Z") and created["lastUpdatedAt"].endswith("Z")
    task_id, approval_id = created["taskId"], created["_meta"]["goclaw/approval_id"]
    pending = approval(approval_id)
    assert pending.status == "pending" and pending.tool_name == "exec"
    assert "task-run" not in MCPTask.objects.get(pk=task_id).sealed_arguments  # the exact call is kept sealed

    working = session.get(task_id)
    assert working["status"] == "working" and working["resultType"] == "complete" and "result" not in working
    assert (working["ttl"], working["pollInterval"]) == (working["ttlMs"], working["pollIntervalMs"])  # 2025-11-25 names
    assert working["_meta"] == {"goclaw/approval_id": approval_id, "goclaw/tool": "exec",
                                "goclaw/expires_at": iso(pending.expires_at), "goclaw/summary": working["_meta"]["goclaw/summary"]}
    assert "echo task-run" in working["_meta"]["goclaw/summary"]
    assert approval_id in working["statusMessage"] and "echo task-run" in working["statusMessage"]
    assert ran_lines(agent) == []  # nothing ran while the person had not decided

    decide(approval_id, "allow_once")
    done = finished(session, task_id)
    assert done["status"] == "completed" and "error" not in done
    assert done["result"]["isError"] is False and done["result"]["structuredContent"]["status"] == "ok"
    assert done["result"]["structuredContent"]["approval_id"] == approval_id
    assert "goclaw/expires_at" not in done["_meta"]
    assert session.get(task_id)["result"] == done["result"]  # polled again: the same result, not a second run
    assert ran_lines(agent) == ["task-run"]
    assert approval(approval_id).consumed_at is not None
    assert ToolInvocation.objects.filter(agent_key=agent.key, tool_name="exec", status="ok").count() == 1
    assert session.cancel(task_id) == {"resultType": "complete"}  # cancelling a finished task changes nothing
    assert session.request("tasks/update", {"taskId": task_id, "inputResponses": {}}) == {"resultType": "complete"}
    assert session.get(task_id)["status"] == "completed" and ran_lines(agent) == ["task-run"]


def test_another_replica_serves_the_task_and_the_call_runs_exactly_once(servers):
    first, second = servers
    agent, token = cautious_agent()
    session = LegacySession(first.url, token, DECLARES)
    created = session.call("exec", {"command": "echo once >> ran.txt"})
    task_id = created["taskId"]
    assert session.get(task_id, url=second.url)["status"] == "working"  # a process that never saw the call

    decide(created["_meta"]["goclaw/approval_id"], "allow_once")
    start = threading.Barrier(4)
    seen: list[str] = []

    def poll(url: str) -> None:
        start.wait()
        seen.append(session.get(task_id, url=url)["status"])

    polls = [threading.Thread(target=poll, args=(url,)) for url in (first.url, second.url) * 2]
    for thread in polls:
        thread.start()
    for thread in polls:
        thread.join()
    assert set(seen) <= {"working", "completed"}  # while one poll runs it, the others see it working
    results = [finished(session, task_id, url=url) for url in (first.url, second.url)]
    assert results[0]["status"] == "completed" and results[0]["result"] == results[1]["result"]
    assert ran_lines(agent) == ["once"]


def test_a_task_outlives_a_restart_of_the_process_that_created_it(servers, tmp_path):
    agent, token = cautious_agent()
    env = server_env(tmp_path)
    process = UvicornProcess(env, tmp_path / "before.log").wait_listening()
    try:
        session = LegacySession(process.url, token, DECLARES)
        created = session.call("exec", {"command": "echo after-restart >> ran.txt"})
    finally:
        process.stop()
    restarted = UvicornProcess(env, tmp_path / "after.log").wait_listening()
    try:
        assert session.get(created["taskId"], url=restarted.url)["status"] == "working"
        decide(created["_meta"]["goclaw/approval_id"], "allow_once")
        done = finished(session, created["taskId"], url=restarted.url)
    finally:
        restarted.stop()
    assert done["status"] == "completed" and done["result"]["isError"] is False
    assert ran_lines(agent) == ["after-restart"]


def test_a_denied_call_completes_with_an_error_result_that_says_why(server):
    agent, token = cautious_agent()
    session = LegacySession(server.url, token, DECLARES)
    created = session.call("exec", {"command": "touch nope"})
    decide(created["_meta"]["goclaw/approval_id"], "deny", note="use the staging copy")
    done = session.get(created["taskId"])
    assert done["status"] == "completed" and "error" not in done  # a person's no is the tool's outcome, not a failure
    assert done["result"]["isError"] is True and done["result"]["structuredContent"]["status"] == "denied"
    text = done["result"]["content"][0]["text"]
    assert "a person denied this call" in text and "use the staging copy" in text
    assert done["statusMessage"] == text
    assert not (agent.workspace_path / "nope").exists()


def test_a_call_nobody_decides_in_time_completes_as_expired(server):
    from datetime import timedelta

    from django.utils import timezone

    from tools_app.models import ApprovalRequest

    agent, token = cautious_agent()
    session = LegacySession(server.url, token, DECLARES)
    created = session.call("exec", {"command": "touch late"})
    approval_id = created["_meta"]["goclaw/approval_id"]
    ApprovalRequest.objects.filter(pk=approval_id).update(expires_at=timezone.now() - timedelta(seconds=1))  # time passed
    done = session.get(created["taskId"])
    assert done["status"] == "completed" and done["result"]["isError"] is True
    assert "nobody approved this call in time" in done["result"]["content"][0]["text"]
    assert approval(approval_id).status == "expired" and not (agent.workspace_path / "late").exists()


def test_cancelling_a_task_withdraws_its_approval_so_the_call_can_never_run(server):
    from goclaw.errors import Conflict

    agent, token = cautious_agent()
    session = LegacySession(server.url, token, DECLARES)
    created = session.call("exec", {"command": "touch cancelled"})
    approval_id = created["_meta"]["goclaw/approval_id"]
    assert session.cancel(created["taskId"]) == {"resultType": "complete"}
    assert approval(approval_id).status == "cancelled"
    with pytest.raises(Conflict):
        decide(approval_id, "allow_once")
    cancelled = session.get(created["taskId"])
    assert cancelled["status"] == "cancelled" and "result" not in cancelled and "error" not in cancelled
    assert session.cancel(created["taskId"]) == {"resultType": "complete"}  # idempotent
    assert not (agent.workspace_path / "cancelled").exists()


def test_another_agents_task_id_is_answered_as_unknown(server):
    owner, owner_token = cautious_agent()
    _, other_token = agent_with_token()
    created = LegacySession(server.url, owner_token, DECLARES).call("exec", {"command": "touch mine"})
    thief = LegacySession(server.url, other_token, DECLARES)
    for attempt in (lambda: thief.get(created["taskId"]), lambda: thief.cancel(created["taskId"]),
                    lambda: thief.get(str(uuid.uuid4())), lambda: thief.get("not-a-task")):
        with pytest.raises(RPCError) as refused:
            attempt()
        assert refused.value.code == -32602
    assert approval(created["_meta"]["goclaw/approval_id"]).status == "pending"  # the owner's call is untouched


def test_removed_v1_methods_are_not_served(server):
    _, token = agent_with_token()
    session = LegacySession(server.url, token, DECLARES)
    for method in ("tasks/result", "tasks/list"):
        with pytest.raises(RPCError) as refused:
            session.request(method, {"taskId": str(uuid.uuid4())})
        assert refused.value.code == -32601


def test_one_call_may_opt_in_with_its_own_meta(server):
    agent, token = cautious_agent()
    session = LegacySession(server.url, token, {})
    created = session.call("exec", {"command": "echo opted-in >> ran.txt"},
                           _meta={"io.modelcontextprotocol/clientCapabilities": DECLARES})
    assert created["resultType"] == "task"
    decide(created["_meta"]["goclaw/approval_id"], "allow_once")
    assert finished(session, created["taskId"])["status"] == "completed" and ran_lines(agent) == ["opted-in"]


def test_a_session_that_declared_the_extension_gets_tasks_from_every_process(servers):
    """Replicas: a request of the session may reach a process that did not see its initialize (the declaration is
    recorded with the session)."""
    first, second = servers
    agent, token = cautious_agent()
    session = LegacySession(first.url, token, DECLARES)
    created = session.request("tools/call", {"name": "exec", "arguments": {"command": "touch elsewhere"}}, url=second.url)
    assert created["resultType"] == "task"
    assert session.cancel(created["taskId"]) == {"resultType": "complete"}


def test_a_client_without_the_extension_keeps_waiting_and_gets_no_tasks(server):
    from mcp_app.models import MCPTask

    agent, token = cautious_agent()

    async def calls():
        async with client(server.url, token) as c:
            pending = await c.call_tool("exec", {"command": "touch never"})
            with pytest.raises(MCPError) as gated:
                await get_task(c.session, "gate-test")
            return pending, gated.value

    pending, gated = asyncio.run(calls())  # waits GOCLAW_MCP_APPROVAL_WAIT, as before
    assert pending.structured_content["status"] == "pending_approval" and "goclaw_approval_wait" in pending.content[0].text
    assert gated.error.code == -32021 and gated.error.data == {"requiredCapabilities": {"extensions": {TASKS: {}}}}
    assert not MCPTask.objects.filter(agent=agent).exists()


# --- the purge -------------------------------------------------------------------------------------------------
def test_the_purge_forgets_expired_tasks_and_fails_those_whose_process_stopped_mid_run():
    from datetime import timedelta

    from django.utils import timezone

    from mcp_app.models import MCPTask
    from mcp_app.server.services import TASK_RUN_STALE_SECONDS, sessions_purge_idle, task_create
    from tools_app.models import ApprovalRequest

    agent, _ = agent_with_token()
    now = timezone.now()
    tasks = {}
    for name in ("expired", "stale", "running", "fresh"):
        request = ApprovalRequest.objects.create(agent=agent, tool_name="exec", arguments={}, args_hash="x",
                                                 requested_at=now, expires_at=now + timedelta(hours=1))
        tasks[name] = task_create(agent=agent, approval_id=request.pk, arguments={"command": name})
    MCPTask.objects.filter(pk=tasks["expired"].pk).update(status="completed", expires_at=now - timedelta(seconds=1))
    MCPTask.objects.filter(pk=tasks["stale"].pk).update(
        status="running", updated_at=now - timedelta(seconds=TASK_RUN_STALE_SECONDS + 1))
    MCPTask.objects.filter(pk=tasks["running"].pk).update(status="running")
    sessions_purge_idle()
    left = dict(MCPTask.objects.values_list("pk", "status"))
    assert left == {tasks["stale"].pk: "failed", tasks["running"].pk: "running", tasks["fresh"].pk: "working"}
    stale = MCPTask.objects.get(pk=tasks["stale"].pk)
    assert stale.error["code"] == -32603 and stale.sealed_arguments == ""


# --- the 2026-07-28 wire: the SDK's client with a result claim -------------------------------------------------
class CreateTaskResult(types.Result):
    """SEP-2663's flat CreateTaskResult."""

    result_type: Literal["task"]
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None


class TaskIdParams(types.RequestParams):
    task_id: str


class GetTask(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param = "taskId"  # SEP-2663: `Mcp-Name: <taskId>`


async def get_task(session, task_id: str) -> dict[str, Any]:
    return await session.send_request(GetTask(params=TaskIdParams(task_id=task_id)), TypeAdapter(dict[str, Any]))


class TasksExtension(ClientExtension):
    """The client side of the extension: a task answer to tools/call is resolved by polling tasks/get until it
    ends (what `Client.call_tool` returns); every status seen is kept."""

    identifier = TASKS

    def __init__(self):
        self.seen: list[dict] = []

    def claims(self):
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self.resolve)]

    async def resolve(self, created: CreateTaskResult, ctx: ClaimContext) -> types.CallToolResult:
        while True:
            task = await get_task(ctx.session, created.task_id)
            self.seen.append(task)
            if task["status"] in ("completed", "failed", "cancelled"):
                return types.CallToolResult.model_validate(task["result"])
            await asyncio.sleep(created.poll_interval_ms / 1000)  # the server's polling advice


def stateless_client(url: str, token: str, extension: TasksExtension) -> Client:
    return Client(streamable_http_client(url, http_client=httpx_client({"Authorization": f"Bearer {token}"})),
                  mode="2026-07-28", extensions=[extension])


def test_stateless_clients_get_tasks_through_the_sdks_extension_mechanism(servers):
    first, second = servers
    agent, token = cautious_agent()
    extension = TasksExtension()

    async def session():
        async with stateless_client(first.url, token, extension) as c:
            advertised = (await c.session.send_discover("2026-07-28"))["capabilities"]["extensions"]
            created = await c.session.call_tool("exec", {"command": "echo stateless >> ran.txt"}, allow_claimed=True)
            working = await get_task(c.session, created.task_id)
            await asyncio.to_thread(decide, working["_meta"]["goclaw/approval_id"], "allow_once", close=True)
        async with stateless_client(second.url, token, TasksExtension()) as other:  # any replica
            done = await get_task(other.session, created.task_id)
            while done["status"] == "working":  # the poll that starts the call answers before a slow one ends
                await asyncio.sleep(0.2)
                done = await get_task(other.session, created.task_id)
        return advertised, created, working, done

    advertised, created, working, done = asyncio.run(session())
    assert TASKS in advertised
    assert isinstance(created, CreateTaskResult) and created.status == "working" and created.ttl_ms > 0
    assert working["status"] == "working" and working["resultType"] == "complete"
    assert done["status"] == "completed" and done["result"]["isError"] is False and "ttl" not in done
    assert ran_lines(agent) == ["stateless"]


def test_a_stateless_call_tool_resolves_the_task_once_a_person_approves(server):
    agent, token = cautious_agent()
    extension = TasksExtension()

    async def call():
        async with stateless_client(server.url, token, extension) as c:
            return await c.call_tool("exec", {"command": "echo resolved >> ran.txt"})

    thread = decide_when_requested(agent, "allow_once")
    result = asyncio.run(call())
    thread.join()
    assert result.is_error is False and result.structured_content["status"] == "ok"
    assert extension.seen[-1]["status"] == "completed" and ran_lines(agent) == ["resolved"]


def test_a_stateless_tasks_get_whose_mcp_name_names_another_task_is_refused(server):
    _, token = cautious_agent()
    task_id = str(uuid.uuid4())
    meta = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": DECLARES}
    answer = httpx.post(server.url, timeout=30, json={"jsonrpc": "2.0", "id": 1, "method": "tasks/get",
                                                      "params": {"taskId": task_id, "_meta": meta}},
                        headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream",
                                 "Mcp-Protocol-Version": "2026-07-28", "Mcp-Method": "tasks/get", "Mcp-Name": "another"})
    error = next(m for m in sse_messages(answer.text) if m.get("id") == 1)["error"]
    assert error["code"] == -32020


@pytest.fixture
def server(servers):
    return servers[0]
