"""Audit search pages against the real database and pipeline: filters, full-text search through the GIN index,
count-free pages, clear messages for bad filters, a call's links (approval, held change, stored output, events),
and the streamed CSV / JSON-lines export of a search."""
import csv
import io
import json
from datetime import timedelta
from urllib.parse import parse_qs, urlparse

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.http import StreamingHttpResponse
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.factories import make_agent
from tools_app import execution, pipeline
from tools_app.base import Tool, ToolResult
from tools_app.models import ToolInvocation
from tools_app.registry import registry
from tools_app.selectors_audit import audit_filters_parse, audit_search
from tools_app.services import approvals as approvals_svc
from tools_app.services.agents import agent_update

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("counters_reread_only_after_a_change")]  # counts queries

SEARCH = "/admin/console/audit/"
GITHUB = "ghp_" + "R8mK2pQ7vX4nL9sT3wY6zA1bC5dE0fG2hJ4k"  # a well-formed (fake) GitHub token


class EchoTool(Tool):
    name = "echo_back"
    description = "returns its text, many times"
    parameters = {"type": "object", "properties": {"text": {"type": "string"}, "count": {"type": "integer"}},
                  "additionalProperties": False}
    read_only = True

    def run(self, ctx, args):
        return ToolResult(for_llm=args.get("text", "") * int(args.get("count", 1)))


class ChangeTool(Tool):
    name = "change"
    description = "changes something"
    parameters = {"type": "object", "properties": {"what": {"type": "string"}}, "additionalProperties": False}
    read_only = False

    def run(self, ctx, args):
        return ToolResult(for_llm="changed " + args.get("what", ""))


@pytest.fixture
def reg():
    r = registry.clone()
    r.register(EchoTool())
    r.register(ChangeTool())
    return r


def row(**fields) -> ToolInvocation:
    values = {"agent_key": "alpha", "tool_name": "exec", "status": "ok", "arguments": {"command": "ls"}}
    values.update(fields)
    return ToolInvocation.objects.create(**values)


def ids(response) -> list[str]:
    """The audit row ids listed on a search page, in page order."""
    html = response.content.decode()
    return [part.split('"', 1)[0] for part in html.split('<tr data-id="')[1:]]


def link(response, element_id: str) -> str | None:
    html = response.content.decode()
    marker = f'id="{element_id}"'
    if marker not in html:
        return None
    tag = html[: html.index(marker)].rsplit("<a ", 1)[1]
    href = tag.split('href="', 1)[1].split('"', 1)[0].replace("&amp;", "&")
    return SEARCH + href if href.startswith("?") else href


# --- filters ---------------------------------------------------------------------------------------------------------
def test_each_filter_narrows_the_search_and_lives_in_the_query_string(admin_client):
    now = timezone.now()
    target = row(agent_key="alpha", user_id="u1", session_key="s1", tool_name="read_file", status="error",
                 actor="staff:ann", created_at=now - timedelta(hours=2))
    row(agent_key="beta", user_id="u1", session_key="s1", tool_name="read_file", status="error", actor="staff:ann",
        created_at=now - timedelta(hours=2))
    row(agent_key="alpha", user_id="u2", session_key="s1", tool_name="read_file", status="error", created_at=now - timedelta(hours=2))
    row(agent_key="alpha", user_id="u1", session_key="s2", tool_name="read_file", status="error", created_at=now - timedelta(hours=2))
    row(agent_key="alpha", user_id="u1", session_key="s1", tool_name="exec", status="error", created_at=now - timedelta(hours=2))
    row(agent_key="alpha", user_id="u1", session_key="s1", tool_name="read_file", status="ok", created_at=now - timedelta(hours=2))
    row(agent_key="alpha", user_id="u1", session_key="s1", tool_name="read_file", status="error", created_at=now - timedelta(days=3))
    assert len(ids(admin_client.get(SEARCH))) == 7
    everything = {"agent": "alpha", "user": "u1", "session": "s1", "tool": "read_file", "status": "error",
                  "since": (now - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M"), "until": (now + timedelta(days=1)).date().isoformat()}
    page = admin_client.get(SEARCH, everything)
    assert ids(page) == [str(target.pk)]
    assert ids(admin_client.get(SEARCH, {"actor": "staff:ann", "agent": "alpha"})) == [str(target.pk)]
    assert len(ids(admin_client.get(SEARCH, {"until": (now - timedelta(days=2)).isoformat()}))) == 1
    # The export links carry the same search.
    export = parse_qs(urlparse(link(page, "audit-export-csv")).query)
    assert {k: v[0] for k, v in export.items()} == everything


@pytest.mark.parametrize("params, field", [
    ({"status": "exploded"}, "status"),
    ({"since": "yesterday"}, "since"),
    ({"until": "2026-13-45"}, "until"),
    ({"since": "2026-05-02", "until": "2026-05-01"}, "until"),
    ({"q": "x" * 501}, "q"),
    ({"older": "not-a-cursor"}, "cursor"),
    ({"newer": "123.zz"}, "cursor"),
])
def test_an_invalid_filter_is_answered_with_a_clear_message_not_a_500(admin_client, params, field):
    response = admin_client.get(SEARCH, params)
    html = response.content.decode()
    assert response.status_code == 400
    assert 'id="audit-error"' in html and f"<code>{field}</code>" in html
    assert admin_client.get("/admin/console/audit/export.csv", params).status_code == (400 if field != "cursor" else 200)


def test_odd_characters_in_a_filter_match_nothing_instead_of_failing(admin_client):
    row()
    response = admin_client.get(SEARCH, {"agent": "al\x00pha", "q": "\x00 & | ! :*"})
    assert response.status_code == 200 and ids(response) == []


# --- full-text search ------------------------------------------------------------------------------------------------
def test_free_text_matches_words_of_arguments_errors_and_tool_names(admin_client, reg):
    agent = make_agent()
    ok = pipeline.execute(pipeline.ToolCall(agent, "echo_back", {"text": "deploy the kraken", "count": 1}), reg)
    bad = pipeline.execute(pipeline.ToolCall(agent, "echo_back", {"text": 7}), reg)
    other = pipeline.execute(pipeline.ToolCall(agent, "echo_back", {"text": "release the hounds to staging"}), reg)
    assert bad.status == "invalid_arguments"
    assert ids(admin_client.get(SEARCH, {"q": "kraken"})) == [ok.invocation_id]
    assert ids(admin_client.get(SEARCH, {"q": '"the kraken"'})) == [ok.invocation_id]
    assert set(ids(admin_client.get(SEARCH, {"q": "kraken or hounds"}))) == {ok.invocation_id, other.invocation_id}
    assert ids(admin_client.get(SEARCH, {"q": "the -kraken", "agent": agent.key})) == [other.invocation_id]
    assert ids(admin_client.get(SEARCH, {"q": "invalid"})) == [bad.invocation_id]  # the error text
    assert len(ids(admin_client.get(SEARCH, {"q": "echo_back"}))) == 3  # the tool name


def test_secrets_were_scrubbed_before_storage_so_they_cannot_be_found(admin_client, reg):
    agent = make_agent()
    pipeline.execute(pipeline.ToolCall(agent, "echo_back", {"text": f"token {GITHUB} here"}), reg)
    assert ids(admin_client.get(SEARCH, {"q": GITHUB})) == []
    found = admin_client.get(SEARCH, {"q": "token here"})
    assert len(ids(found)) == 1 and GITHUB not in found.content.decode()


def test_the_text_search_is_answered_by_the_gin_index():
    for i in range(30):
        row(arguments={"command": f"echo number{i}"})
    query = audit_search(audit_filters_parse({"q": "number7"}))
    with connection.cursor() as cursor:  # a 30-row table is read whole otherwise, index or not
        cursor.execute("SET LOCAL enable_seqscan = off; SET LOCAL enable_indexscan = off")
        plan = query.explain()
    assert "invocation_search_gin" in plan
    assert [r.arguments for r in query] == [{"command": "echo number7"}]


# --- pages -----------------------------------------------------------------------------------------------------------
def test_pages_walk_older_and_back_newer_without_counting(admin_client):
    start = timezone.now() - timedelta(hours=1)
    made = [row(created_at=start + timedelta(seconds=i // 2)) for i in range(120)]  # ties on created_at too
    expected = [str(r.pk) for r in sorted(made, key=lambda r: (r.created_at, r.pk.hex), reverse=True)]
    with CaptureQueriesContext(connection) as queries:
        first = admin_client.get(SEARCH, {"agent": "alpha"})
    audit_reads = [q["sql"].upper() for q in queries.captured_queries if "TOOLS_APP_TOOLINVOCATION" in q["sql"].upper()]
    assert len(audit_reads) == 1 and "COUNT(" not in audit_reads[0]
    assert ids(first) == expected[:50] and link(first, "audit-newer") is None
    second = admin_client.get(link(first, "audit-older"))
    assert ids(second) == expected[50:100]
    third = admin_client.get(link(second, "audit-older"))
    assert ids(third) == expected[100:] and link(third, "audit-older") is None
    back = admin_client.get(link(third, "audit-newer"))
    assert ids(back) == expected[50:100]
    assert ids(admin_client.get(link(back, "audit-newer"))) == expected[:50]
    assert "agent=alpha" in link(second, "audit-older")  # the filters survive paging


def test_the_search_costs_the_same_queries_whatever_the_rows_and_filters(admin_client):
    def measure(params):
        with CaptureQueriesContext(connection) as queries:
            response = admin_client.get(SEARCH, params)
        assert response.status_code == 200
        audit = [q["sql"] for q in queries.captured_queries if "tools_app_toolinvocation" in q["sql"]]
        return len(queries.captured_queries), len(audit)

    row(arguments={"command": "make build"})
    small = measure({"q": "build"})
    for i in range(80):
        row(arguments={"command": f"make build {i}"}, session_key="s", user_id="u", error="failed build")
    assert measure({"q": "build"}) == small
    assert measure({"q": "build", "session": "s", "user": "u", "since": "2020-01-01"}) == small
    assert measure({}) == small
    assert small[1] == 1  # one query reads the audit table


# --- access ----------------------------------------------------------------------------------------------------------
def test_the_pages_are_for_staff_with_the_audit_view_permission(client, django_user_model):
    audit = row()
    urls = [SEARCH, f"{SEARCH}{audit.pk}/", f"{SEARCH}export.csv", f"{SEARCH}export.jsonl"]
    for url in urls:
        response = client.get(url)
        assert response.status_code == 302 and "/admin/login/" in response["Location"]
    staff = django_user_model.objects.create_user("clerk", password="pw-clerk-1", is_staff=True)
    client.force_login(staff)
    assert all(client.get(url).status_code == 403 for url in urls)
    staff.user_permissions.add(Permission.objects.get(codename="view_toolinvocation"))
    assert [client.get(url).status_code for url in urls] == [200, 200, 403, 403]  # exporting needs export_audit
    staff.user_permissions.add(Permission.objects.get(codename="export_audit"))
    assert all(client.get(url).status_code == 200 for url in urls)
    assert client.post(SEARCH).status_code == 405


# --- one call and its links ------------------------------------------------------------------------------------------
def test_the_detail_of_an_approved_run_links_its_approval_and_names_its_events(admin_client, reg, django_user_model):
    staff = django_user_model.objects.create_user("approver", password="pw-approver-1", is_staff=True)
    agent = agent_update(agent=make_agent(), mode="cautious")
    asked = pipeline.execute(pipeline.ToolCall(agent, "change", {"what": "the <b>thing</b>"}, session_key="s9"), reg)
    approval_id = asked.extra["approval_id"]
    approvals_svc.approval_decide(approval_id=approval_id, decision="allow_once", actor=staff)
    ran = execution.approval_execute(approval_id=approval_id, agent=agent, tools=reg)
    response = admin_client.get(f"{SEARCH}{ran.invocation_id}/")
    html = response.content.decode()
    assert response.status_code == 200
    assert f'href="/admin/tools_app/approvalrequest/{approval_id}/change/"' in html
    assert "This call ran on" in html and "approved" in html and "approver" in html
    assert "<code>tool.executed</code>" in html and "agent." + agent.key in html
    assert "the &lt;b&gt;thing&lt;/b&gt;" in html and "<b>thing</b>" not in html  # agent text is escaped
    assert "No held file change." in html and "fitted the output budget" in html


def test_the_detail_of_an_applied_change_links_the_held_change(admin_client, django_user_model, tmp_path):
    staff = django_user_model.objects.create_user("reviewer", password="pw-reviewer-1", is_staff=True)
    agent = agent_update(agent=make_agent(workspace=str(tmp_path)), mode="review")
    held = pipeline.execute(pipeline.ToolCall(agent, "write_file", {"path": "notes.txt", "content": "hello"}), registry)
    change_id = held.extra["pending_change_id"]
    change = execution.pending_change_decide(change_id=change_id, accept=True, actor=staff, tools=registry)
    assert change.status == "accepted"
    html = admin_client.get(f"{SEARCH}{change.invocation_id}/").content.decode()
    assert f'href="/admin/tools_app/pendingchange/{change_id}/change/"' in html
    assert "This call applied" in html and "notes.txt" in html


def test_the_detail_links_the_stored_output_and_shows_its_scrubbed_beginning(admin_client, reg):
    agent = make_agent(other_config={"output_budget_chars": 1000})
    cut = pipeline.execute(pipeline.ToolCall(agent, "echo_back", {"text": f"line {GITHUB} <i>x</i>\n", "count": 100}), reg)
    assert cut.output_id
    html = admin_client.get(f"{SEARCH}{cut.invocation_id}/").content.decode()
    assert f'href="/admin/tools_app/storedtooloutput/{cut.output_id}/change/"' in html
    assert 'id="audit-output-head"' in html and "&lt;i&gt;x&lt;/i&gt;" in html
    assert GITHUB not in html and "[REDACTED" in html


def test_an_unknown_or_purged_row_is_a_clear_404(admin_client):
    for ident in ("not-a-uuid", "0c8a3c0e-7d1c-4a59-9a8b-2f1f4f0b9f3e"):
        response = admin_client.get(f"{SEARCH}{ident}/")
        assert response.status_code == 404 and "no such audit row" in response.content.decode()


def test_the_admin_changelist_links_each_row_to_its_console_page(admin_client):
    audit = row()
    html = admin_client.get("/admin/tools_app/toolinvocation/").content.decode()
    assert f'href="{SEARCH}{audit.pk}/"' in html


# --- export ----------------------------------------------------------------------------------------------------------
def csv_rows(response) -> list[dict]:
    body = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(body)))


def test_the_csv_export_streams_the_filtered_search_and_defuses_formulas(admin_client):
    formula = row(agent_key="alpha", error="=HYPERLINK(\"http://evil\")", user_id="@sum", session_key="+1",
                  arguments={"command": "-rm"})
    row(agent_key="beta")
    plain = row(agent_key="alpha", arguments={"command": "ls"})
    response = admin_client.get(f"{SEARCH}export.csv", {"agent": "alpha"})
    assert isinstance(response, StreamingHttpResponse)
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    disposition = response["Content-Disposition"]
    assert disposition.startswith('attachment; filename="goclaw-audit-') and disposition.endswith('Z.csv"')
    rows = csv_rows(response)
    assert [r["id"] for r in rows] == [str(plain.pk), str(formula.pk)]
    evil = rows[1]
    assert evil["error"] == "'=HYPERLINK(\"http://evil\")" and evil["user_id"] == "'@sum" and evil["session_key"] == "'+1"
    assert json.loads(evil["arguments"]) == {"command": "-rm"}  # a JSON cell starts with {: left as it is
    assert rows[0]["agent_key"] == "alpha" and rows[0]["status"] == "ok"


def test_the_jsonl_export_has_one_object_per_call_and_no_secret(admin_client, reg):
    agent = make_agent()
    pipeline.execute(pipeline.ToolCall(agent, "echo_back", {"text": f"key {GITHUB}"}), reg)
    pipeline.execute(pipeline.ToolCall(agent, "echo_back", {"text": "plain"}), reg)
    response = admin_client.get(f"{SEARCH}export.jsonl", {"agent": agent.key, "q": "plain or key"})
    assert response["Content-Type"] == "application/x-ndjson; charset=utf-8"
    body = b"".join(response.streaming_content).decode()
    lines = [json.loads(line) for line in body.splitlines()]
    assert len(lines) == 2 and {line["tool_name"] for line in lines} == {"echo_back"}
    texts = sorted(line["arguments"]["text"] for line in lines)
    assert texts[1] == "plain" and texts[0].startswith("key ") and "REDACTED" in texts[0]
    assert GITHUB not in body


def test_the_export_reads_through_a_server_side_cursor_while_it_streams(admin_client):
    ToolInvocation.objects.bulk_create([ToolInvocation(agent_key="bulk", tool_name="exec", status="ok",
                                                       arguments={"command": f"echo {i} " + "p" * 60})
                                        for i in range(5000)])
    response = admin_client.get(f"{SEARCH}export.csv", {"agent": "bulk"})
    chunks = iter(response.streaming_content)
    first = next(chunks)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_cursors WHERE name LIKE '_django_curs_%%'")
        open_cursors = cursor.fetchone()[0]
    assert open_cursors == 1  # rows come from PostgreSQL a chunk at a time, not all at once
    assert first.startswith(b"created_at,id,")
    rest = b"".join(chunks)
    assert (first + rest).count(b"\n") == 5001
