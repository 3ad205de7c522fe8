"""The console's hosted-session pages against the real database, services and pipeline: the list (filters, permissions,
a fixed number of queries), the timeline (messages, tool calls with verdicts and audit links, sub-sessions as a tree,
the waiting approval with decide buttons for people who may decide), deciding and cancelling from the page (CSRF,
permissions), hostile text escaped, the live refresh endpoint and the WebSocket groups the pages subscribe to."""
from __future__ import annotations

import re
import uuid

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from goclaw.asgi import application
from runtime_app.choices import MessageRole, SessionStatus
from runtime_app.models import Session, SessionMessage
from runtime_app.services.sessions import message_append, session_create
from tests.factories import make_agent, make_person
from tools_app import pipeline
from tools_app.models import ApprovalRequest, ToolInvocation
from tools_app.services.agents import agent_update

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("counters_reread_only_after_a_change")]  # counts queries

LIST = "/admin/console/sessions/"
VIEW = ("runtime_app.view_session", "runtime_app.view_sessionmessage")
DECIDE = "tools_app.decide_approvalrequest"
RUN = "runtime_app.run_session"
HOSTILE = '<script>alert("x")</script>'
ESCAPED = "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"
GITHUB = "ghp_" + "R8mK2pQ7vX4nL9sT3wY6zA1bC5dE0fG2hJ4k"  # a well-formed (fake) GitHub token


def timeline(session) -> str:
    return f"{LIST}{session.pk}/"


def client_for(*permissions: str, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(make_person(*permissions))
    return client


def listed(response) -> list[str]:
    """The session ids of a list page's rows, in page order."""
    return re.findall(r'<tr data-id="([0-9a-f-]{36})"', response.content.decode())


def csrf_of(page) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()).group(1)


def new_session(agent, *, user_id="", message: str | None = "hello", **fields) -> Session:
    return session_create(agent=agent, created_by="test", user_id=user_id, message=message, **fields)


def set_status(session, status: str, **fields) -> Session:
    """Test set-up: put a session in a state a run would have left it in."""
    Session.objects.filter(pk=session.pk).update(status=status, **fields)
    return Session.objects.select_related("agent").get(pk=session.pk)


def parked(command: str = "echo from-the-session-page", **fields):
    """A hosted session parked on a real approval request: its exec call went through the pipeline, which asked."""
    agent = agent_update(agent=make_agent(), mode="cautious")
    session = new_session(agent, user_id="u-park", **fields)
    message_append(session, role=MessageRole.ASSISTANT, content="",
                   tool_calls=[{"id": "call-1", "name": "exec", "arguments": f'{{"command": "{command}"}}'}])
    outcome = pipeline.execute(pipeline.ToolCall(agent=agent, tool="exec", arguments={"command": command},
                                                 session_key=session.key, user_id=session.user_id))
    assert outcome.status == "pending_approval"
    req = ApprovalRequest.objects.get(pk=outcome.extra["approval_id"])
    return set_status(session, SessionStatus.WAITING_APPROVAL, waiting_approval=req), req


# --- the list -------------------------------------------------------------------------------------------------------
def test_the_list_filters_by_agent_user_and_status():
    alpha, beta = make_agent(key="alpha-list"), make_agent(key="beta-list")
    a1 = new_session(alpha, user_id="u1")
    a2 = set_status(new_session(alpha, user_id="u2"), SessionStatus.COMPLETED)
    b1 = new_session(beta, user_id="u1")
    b2 = set_status(new_session(beta, user_id="u2"), SessionStatus.FAILED)
    client = client_for(*VIEW)

    assert set(listed(client.get(LIST))) == {str(s.pk) for s in (a1, a2, b1, b2)}
    assert set(listed(client.get(LIST, {"agent": "alpha-list"}))) == {str(a1.pk), str(a2.pk)}
    assert set(listed(client.get(LIST, {"user_id": "u1"}))) == {str(a1.pk), str(b1.pk)}
    assert set(listed(client.get(LIST, {"status": "running"}))) == {str(a1.pk), str(b1.pk)}
    assert listed(client.get(LIST, {"status": "failed"})) == [str(b2.pk)]
    assert listed(client.get(LIST, {"agent": "beta-list", "user_id": "u1", "status": "running"})) == [str(b1.pk)]
    assert listed(client.get(LIST, {"agent": "no-such-agent"})) == []


def test_the_list_shows_each_sessions_columns_and_links_to_its_timeline():
    session = new_session(make_agent(key="cols-agent"), user_id="u-cols", channel="telegram")
    Session.objects.filter(pk=session.pk).update(iterations=3, tokens_in=1234, tokens_out=567)
    html = client_for(*VIEW).get(LIST).content.decode()
    row = html.split(f'<tr data-id="{session.pk}">', 1)[1].split("</tr>", 1)[0]
    assert f'href="{timeline(session)}"' in row
    for text in ("cols-agent", "u-cols", "telegram", ">running<", ">3<", ">1234<", ">567<"):
        assert text in row, text
    assert 'id="goclaw-ws-url"' in html and "console_app/sessions.js" in html and 'data-mode="list"' in html


def test_an_unknown_status_filter_is_refused_with_a_message_not_an_error():
    response = client_for(*VIEW).get(LIST, {"status": "exploded"})
    assert response.status_code == 400
    assert 'id="sessions-error-fields"' in response.content.decode() and listed(response) == []


def test_the_list_pages_by_fifty_keeping_the_filters():
    agent = make_agent(key="many-agent")
    for _ in range(51):
        new_session(agent)
    client = client_for(*VIEW)
    first = client.get(LIST, {"agent": "many-agent"})
    assert len(listed(first)) == 50
    assert "?agent=many-agent&amp;page=2" in first.content.decode()
    assert len(listed(client.get(LIST, {"agent": "many-agent", "page": "2"}))) == 1


def test_the_list_costs_the_same_few_queries_for_one_session_or_thirty(django_assert_max_num_queries):
    agent = make_agent()
    new_session(agent)
    client = client_for(*VIEW)
    client.get(LIST)  # warm caches (content types, permissions) like any later request
    with CaptureQueriesContext(connection) as one:
        assert len(listed(client.get(LIST))) == 1
    for n in range(29):
        new_session(make_agent() if n % 3 else agent, user_id=f"u{n}")
    with django_assert_max_num_queries(10):
        assert len(listed(client.get(LIST))) == 30
    with CaptureQueriesContext(connection) as thirty:
        client.get(LIST)
    assert len(thirty.captured_queries) == len(one.captured_queries)


@pytest.mark.parametrize("permissions", [(), ("runtime_app.view_session",), ("runtime_app.view_sessionmessage",)])
def test_people_without_both_view_permissions_are_refused(permissions):
    session = new_session(make_agent())
    client = client_for(*permissions)
    for url in (LIST, timeline(session), f"{timeline(session)}live/"):
        assert client.get(url).status_code == 403, url


def test_someone_not_logged_in_is_sent_to_the_login():
    session = new_session(make_agent())
    for url in (LIST, timeline(session)):
        response = Client().get(url)
        assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_the_console_links_to_the_sessions_page_for_people_who_may_read_it():
    assert LIST in client_for(*VIEW).get("/admin/").content.decode()
    assert LIST not in client_for("tools_app.view_agent").get("/admin/").content.decode()


# --- the timeline ---------------------------------------------------------------------------------------------------
def test_the_timeline_shows_messages_tool_calls_verdicts_audit_links_and_tokens():
    agent = make_agent(key="tl-agent")
    session = new_session(agent, user_id="u-tl", message="What time is it?")
    message_append(session, role=MessageRole.ASSISTANT, content="Let me look.", tokens_in=120, tokens_out=30,
                   tool_calls=[{"id": "call-7", "name": "datetime", "arguments": '{"tz": "UTC"}'}])
    audit = ToolInvocation.objects.create(agent_key=agent.key, tool_name="datetime", status="ok", arguments={})
    message_append(session, role=MessageRole.TOOL, content="2026-11-23T09:00:00Z", tool_call_id="call-7",
                   tool_name="datetime", verdict="ok", invocation_id=audit.pk)
    message_append(session, role=MessageRole.TOOL, content="policy: no", tool_call_id="call-8", tool_name="exec",
                   verdict="denied", is_error=True)
    Session.objects.filter(pk=session.pk).update(iterations=2, max_iterations=20, tokens_in=120, tokens_out=30)

    html = client_for(*VIEW, "tools_app.view_toolinvocation").get(timeline(session)).content.decode()
    assert html.index("What time is it?") < html.index("Let me look.") < html.index("2026-11-23T09:00:00Z")
    assert "datetime" in html and "{&quot;tz&quot;: &quot;UTC&quot;}" in html and "call-7" in html
    assert 'class="verdict verdict-good">ok<' in html
    assert 'class="verdict verdict-bad">denied<' in html and ">is_error<" in html
    assert f'href="/admin/console/audit/{audit.pk}/" class="audit-link"' in html
    assert 'id="session-iterations">2 / 20<' in html and 'id="session-tokens">120 / 30<' in html
    assert "tokens 120 / 30" in html and "u-tl" in html
    assert f'data-session="{session.pk}"' in html and 'data-mode="timeline"' in html

    # without the audit permission the row is named, not linked (the link would only be refused)
    html = client_for(*VIEW).get(timeline(session)).content.decode()
    assert 'class="audit-link"' not in html and str(audit.pk) in html


def test_a_tool_result_names_its_approval_and_how_it_was_decided():
    session, req = parked()
    from tools_app.services.approvals import approval_decide

    approval_decide(approval_id=req.pk, decision="deny", actor=None)
    message_append(session, role=MessageRole.TOOL, content="denied by a person", tool_call_id="call-1",
                   tool_name="exec", verdict="denied", is_error=True, approval_id=req.pk)
    session = set_status(session, SessionStatus.RUNNING, waiting_approval=None)
    html = client_for(*VIEW, "tools_app.view_approvalrequest").get(timeline(session)).content.decode()
    assert f'href="/admin/tools_app/approvalrequest/{req.pk}/change/" class="approval-link">approval</a> denied (deny)' in html


def test_the_timeline_shows_sub_sessions_as_a_tree_and_links_back_to_the_parent():
    agent = make_agent()
    root = new_session(agent)
    child = new_session(agent, parent=root, label="research")
    second = set_status(new_session(agent, parent=root, label="summarise"), SessionStatus.COMPLETED)
    grandchild = new_session(agent, parent=child, label="deep dive")
    message_append(root, role=MessageRole.ANNOUNCE, content="[Subagent summarise completed]\ndone", child=second)

    html = client_for(*VIEW).get(timeline(root)).content.decode()
    tree = html.split('id="session-children"', 1)[1].split("</div>", 1)[0]
    child_item = tree.split(f'<li data-session="{child.pk}">', 1)[1]
    assert f'href="{timeline(child)}"' in child_item and "research" in child_item
    # the grandchild is nested under its parent, before the parent's sibling
    assert child_item.index(f'data-session="{grandchild.pk}"') < child_item.index(f'data-session="{second.pk}"')
    assert child_item.index("<ul>") < child_item.index("deep dive")
    assert "session-status-completed" in tree.split(f'data-session="{second.pk}"', 1)[1]
    assert f'href="{timeline(second)}" class="announce-child"' in html

    child_page = client_for(*VIEW).get(timeline(grandchild)).content.decode()
    assert f'href="{timeline(child)}" id="session-parent"' in child_page


def test_an_unknown_session_is_a_404_page():
    response = client_for(*VIEW).get(f"{LIST}{uuid.uuid4()}/")
    assert response.status_code == 404 and "no such session" in response.content.decode()


# --- the waiting approval, decided from the page --------------------------------------------------------------------
def test_a_parked_session_shows_its_approval_with_decide_buttons_for_people_who_may_decide():
    session, req = parked("git status && echo done")
    html = client_for(*VIEW, DECIDE).get(timeline(session)).content.decode()
    panel = html.split('id="session-pending-approval"', 1)[1]
    assert f'data-approval="{req.pk}"' in html and "exec" in panel
    assert "$ git status &amp;&amp; echo done" in panel  # the summary, as the approval queue shows it
    assert "&quot;command&quot;: &quot;git status &amp;&amp; echo done&quot;" in panel
    assert f'action="{timeline(session)}approvals/{req.pk}/decide/"' in panel
    assert 'value="allow_once"' in panel and 'value="deny"' in panel

    html = client_for(*VIEW).get(timeline(session)).content.decode()
    assert 'id="session-pending-approval"' in html and 'id="session-decide-form"' not in html
    assert 'value="allow_once"' not in html and 'id="session-decide-hidden"' in html


def test_approve_once_from_the_page_approves_the_request():
    session, req = parked()
    person = make_person(*VIEW, DECIDE)
    client = Client(enforce_csrf_checks=True)
    client.force_login(person)
    page = client.get(timeline(session))
    url = f"{timeline(session)}approvals/{req.pk}/decide/"
    assert client.post(url, {"decision": "allow_once"}).status_code == 403  # no CSRF token
    response = client.post(url, {"decision": "allow_once", "csrfmiddlewaretoken": csrf_of(page)})
    assert response.status_code == 302 and response["Location"] == timeline(session)
    req.refresh_from_db()
    assert (req.status, req.decision, req.decided_by) == ("approved", "allow_once", person)
    assert "Allow once" in client.get(timeline(session)).content.decode()  # the message, shown once


def test_deny_from_the_page_denies_the_request():
    session, req = parked()
    client_for(*VIEW, DECIDE).post(f"{timeline(session)}approvals/{req.pk}/decide/", {"decision": "deny"})
    req.refresh_from_db()
    assert (req.status, req.decision) == ("denied", "deny")


def test_deciding_from_the_page_needs_the_decide_permission():
    session, req = parked()
    url = f"{timeline(session)}approvals/{req.pk}/decide/"
    assert client_for(*VIEW).post(url, {"decision": "allow_once"}).status_code == 403
    assert client_for(DECIDE).post(url, {"decision": "allow_once"}).status_code == 403
    assert client_for(*VIEW, DECIDE).get(url).status_code == 403  # only POST decides
    req.refresh_from_db()
    assert req.status == "pending"


def test_the_page_decides_only_allow_once_or_deny_and_only_the_call_its_session_waits_on():
    session, req = parked()
    other_session, other = parked("echo another")
    client = client_for(*VIEW, DECIDE)
    response = client.post(f"{timeline(session)}approvals/{req.pk}/decide/", {"decision": "allow_always"}, follow=True)
    assert "allow always from the approval queue" in response.content.decode()
    response = client.post(f"{timeline(session)}approvals/{other.pk}/decide/", {"decision": "allow_once"}, follow=True)
    assert "no longer waits for that approval request" in response.content.decode()
    req.refresh_from_db()
    other.refresh_from_db()
    assert (req.status, other.status) == ("pending", "pending")


def test_a_second_decision_from_a_stale_page_is_told_it_was_already_decided():
    session, req = parked()
    client = client_for(*VIEW, DECIDE)
    url = f"{timeline(session)}approvals/{req.pk}/decide/"
    client.post(url, {"decision": "deny"})
    response = client.post(url, {"decision": "allow_once"}, follow=True)
    assert "already decided" in response.content.decode()
    req.refresh_from_db()
    assert req.decision == "deny"


# --- cancel ---------------------------------------------------------------------------------------------------------
def test_cancel_from_the_page_cancels_a_running_session():
    session = new_session(make_agent())
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_person(*VIEW, RUN))
    page = client.get(timeline(session))
    assert 'id="session-cancel"' in page.content.decode()
    response = client.post(f"{timeline(session)}cancel/", {"csrfmiddlewaretoken": csrf_of(page)})
    assert response.status_code == 302 and response["Location"] == timeline(session)
    session.refresh_from_db()
    assert session.status == SessionStatus.CANCELLED and session.error.startswith("cancelled by staff:")
    assert 'id="session-cancel"' not in client.get(timeline(session)).content.decode()  # ended: no button


def test_cancel_withdraws_the_waiting_approval():
    session, req = parked()
    client_for(*VIEW, RUN).post(f"{timeline(session)}cancel/")
    session.refresh_from_db()
    req.refresh_from_db()
    assert (session.status, req.status) == (SessionStatus.CANCELLED, "cancelled")


def test_cancelling_needs_run_session_and_the_button_is_hidden_without_it():
    session = new_session(make_agent())
    client = client_for(*VIEW)
    assert 'id="session-cancel"' not in client.get(timeline(session)).content.decode()
    assert client.post(f"{timeline(session)}cancel/").status_code == 403
    assert client_for(RUN).post(f"{timeline(session)}cancel/").status_code == 403
    session.refresh_from_db()
    assert session.status == SessionStatus.RUNNING


# --- hostile text -----------------------------------------------------------------------------------------------------
def test_hostile_text_in_messages_tool_names_and_arguments_is_escaped():
    agent = make_agent()
    session = new_session(agent, user_id=HOSTILE, message=f"hi {HOSTILE}", channel="x")
    Session.objects.filter(pk=session.pk).update(label=HOSTILE, error=HOSTILE, end_reason="<b>x</b>")
    child = new_session(agent, parent=session, label=HOSTILE)
    calls = message_append(session, role=MessageRole.ASSISTANT, content=HOSTILE,
                           tool_calls=[{"id": HOSTILE, "name": HOSTILE, "arguments": f'{{"a": "{HOSTILE}"}}'}])
    # a row that is not what the runtime writes (an object for arguments, a call that is not an object) still renders
    SessionMessage.objects.filter(pk=calls.pk).update(tool_calls=[
        *calls.tool_calls, {"id": "c2", "name": "odd", "arguments": {"raw": HOSTILE}}, "not-a-call"])
    message_append(session, role=MessageRole.TOOL, content=HOSTILE, tool_call_id=HOSTILE, tool_name=HOSTILE,
                   verdict="<img src=x onerror=alert(1)>")
    client = client_for(*VIEW, RUN)
    for response in (client.get(timeline(session)), client.get(LIST), client.get(f"{timeline(session)}live/"),
                     client.get(timeline(child))):
        body = response.content.decode()
        assert response.status_code == 200
        assert "<script>alert" not in body and "<img src=x" not in body and "<b>x</b>" not in body
    html = client.get(timeline(session)).content.decode()
    assert html.count(ESCAPED) >= 5
    assert "{&quot;a&quot;: &quot;&lt;script&gt;" in html  # arguments, escaped inside the <pre>
    live = client.get(f"{timeline(session)}live/").json()
    assert ESCAPED in live["messages"] and ESCAPED in live["header"] and ESCAPED in live["tree"]


def test_credentials_in_tool_call_arguments_are_scrubbed_on_the_page():
    session = new_session(make_agent())
    message_append(session, role=MessageRole.ASSISTANT, content="",
                   tool_calls=[{"id": "c1", "name": "web_fetch", "arguments": f'{{"token": "{GITHUB}"}}'}])
    client = client_for(*VIEW)
    html = client.get(timeline(session)).content.decode()
    assert "web_fetch" in html and GITHUB not in html and GITHUB[:8] not in html
    assert GITHUB not in client.get(f"{timeline(session)}live/").content.decode()


def test_a_long_message_and_long_arguments_are_cut_on_the_page():
    session = new_session(make_agent(), message="x" * 30_000)
    message_append(session, role=MessageRole.ASSISTANT, content="",
                   tool_calls=[{"id": "c", "name": "write_file", "arguments": "y" * 5000}])
    html = client_for(*VIEW).get(timeline(session)).content.decode()
    assert "x" * 20_000 + "… (10000 characters more)" in html and "x" * 20_001 not in html
    assert "y" * 2000 + "… (3000 characters more)" in html


# --- live -----------------------------------------------------------------------------------------------------------
def test_the_live_endpoint_returns_the_messages_after_a_seq_and_the_current_parts():
    session = new_session(make_agent(), message="first")
    client = client_for(*VIEW, RUN)
    page = client.get(timeline(session)).content.decode()
    assert 'data-last-seq="1"' in page and 'data-tail="1"' in page
    message_append(session, role=MessageRole.ASSISTANT, content="second")
    child = new_session(session.agent, parent=session, label="helper")
    live = client.get(f"{timeline(session)}live/", {"after": "1"}).json()
    assert live["last_seq"] == 2 and "second" in live["messages"] and "first" not in live["messages"]
    assert 'id="message-2"' in live["messages"] and live["status"] == "running"
    assert 'id="session-cancel"' in live["header"] and f'data-session="{child.pk}"' in live["tree"]
    assert live["approval"].strip() == "" and live["more"] is False
    nothing = client.get(f"{timeline(session)}live/", {"after": "2"}).json()
    assert nothing["last_seq"] == 2 and nothing["messages"].strip() == ""
    assert client.get(f"{timeline(session)}live/", {"after": "x"}).status_code == 400
    assert client.get(f"{LIST}{uuid.uuid4()}/live/").status_code == 404


def test_a_long_session_shows_its_latest_messages_with_a_link_to_earlier_ones():
    session = new_session(make_agent(), message="m1")
    for n in range(2, 306):
        message_append(session, role=MessageRole.USER, content=f"m{n}")
    client = client_for(*VIEW)
    html = client.get(timeline(session)).content.decode()
    assert 'id="message-305"' in html and 'id="message-6"' in html and 'id="message-5"' not in html
    assert 'href="?from=1" id="session-earlier"' in html and 'data-tail="1"' in html
    earlier = client.get(timeline(session), {"from": "1"}).content.decode()
    assert 'id="message-1"' in earlier and 'id="message-301"' not in earlier
    assert 'id="session-later"' in earlier and 'data-tail=""' in earlier  # not the end: nothing appended live


@pytest.mark.django_db(transaction=True)
@pytest.mark.asyncio
async def test_a_person_who_may_read_the_pages_receives_the_events_they_subscribe_to():
    @database_sync_to_async
    def setup():
        make_person(*VIEW, username="session-watcher", password="pw-watch-12345")
        c = Client()
        c.login(username="session-watcher", password="pw-watch-12345")
        return c.cookies["sessionid"].value, new_session(make_agent(), message="first")

    cookie, session = await setup()
    communicator = WebsocketCommunicator(application, "/ws/events/", headers=[
        (b"cookie", f"sessionid={cookie}".encode()), (b"origin", b"http://127.0.0.1:8000")])
    assert (await communicator.connect())[0]
    await communicator.receive_json_from()
    for group in ("sessions", f"session.{session.pk}"):
        await communicator.send_json_to({"action": "subscribe", "group": group})
        assert (await communicator.receive_json_from())["type"] == "subscribed"

    await database_sync_to_async(message_append)(session, role=MessageRole.ASSISTANT, content="reply")
    seen = {}
    while "session.message" not in seen or len(seen["session.message"]) < 2:
        message = await communicator.receive_json_from(timeout=5)
        seen.setdefault(message["type"], []).append(message)
    assert {m["group"] for m in seen["session.message"]} == {"sessions", f"session.{session.pk}"}
    assert all(m["payload"]["seq"] == 2 and m["payload"]["content"] == "reply" for m in seen["session.message"])

    from runtime_app.services.sessions import session_cancel

    await database_sync_to_async(session_cancel)(session=session, actor="staff:someone")
    statuses = []
    while len(statuses) < 2:
        message = await communicator.receive_json_from(timeout=5)
        if message["type"] == "session.status":
            statuses.append(message)
    assert {m["payload"]["status"] for m in statuses} == {"cancelled"}
    assert statuses[0]["payload"]["id"] == str(session.pk)
    await communicator.disconnect()


# The pages' JavaScript in a real browser (live list and timeline, approving inline, hostile text) is exercised end
# to end with a hosted run under `up`: tests/runtime_app/test_hosted_e2e.py.
