"""The queue says why a call asks (mode, permission, exec settings, shell-check observations, rules) and what the
analysed command does (its risk), recorded with the request; requests from before show their reason."""
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from tests.factories import make_agent
from tools_app import pipeline
from tools_app.models import ApprovalRequest, ToolPermission
from tools_app.services.agents import agent_update

QUEUE = "/admin/tools_app/approvalrequest/queue/"


def ask(command, mode="cautious", agent=None, **config):
    agent = agent or make_agent()
    agent = agent_update(agent=agent, mode=mode, other_config={**agent.other_config, **config})
    outcome = pipeline.execute(pipeline.ToolCall(agent=agent, tool="exec", arguments={"command": command}))
    assert outcome.status == "pending_approval", outcome.for_llm
    return agent, ApprovalRequest.objects.get(pk=outcome.extra["approval_id"])


@pytest.fixture
def admin_client(db, django_user_model):
    django_user_model.objects.create_superuser("boss", password="pw-boss-12345")
    client = Client(enforce_csrf_checks=True)
    client.login(username="boss", password="pw-boss-12345")
    return client


def effects_of(req):
    return {e["effect"]: e["where"] for e in req.details["risk"]["effects"]}


@pytest.mark.django_db
def test_a_cautious_agent_s_destructive_network_call_records_mode_and_high_risk():
    agent, req = ask("rm -rf build && curl https://example.com/x -o page.html")
    why = req.details["why"]
    assert why["mode"] == "cautious" and why["reason"] == f"agent {agent.key} is in cautious mode"
    assert why["lines"][0] == f"Asked because agent {agent.key} is in cautious mode."
    assert "Agent mode: Cautious (mutating tools ask)." in why["lines"]
    assert why["exec"] == {"security": "full", "ask": "off", "allowlist": "none"}
    effects = effects_of(req)
    assert effects["delete"] == ["rm -rf build"]
    assert effects["network"] == ["curl https://example.com/x -o page.html"] and "write" in effects
    assert req.details["risk"]["level"] == "high"
    assert req.details["risk"]["line"].startswith("Risk (high): deletes files (rm -rf build); uses the network")


@pytest.mark.django_db
def test_an_ask_permission_is_named_with_its_scope():
    agent = make_agent()
    ToolPermission.objects.create(scope="agent", agent=agent, tool="exec", permission="ask")
    _, req = ask("ls", mode="autonomous", agent=agent)
    assert req.details["why"]["permissions"] == [{"scope": "agent", "tool": "exec", "mode": ""}]
    assert "Tool permission set to ask: exec (agent)." in req.details["why"]["lines"]
    assert req.details["risk"] == {"level": "low", "effects": [], "line": "Risk (low): reads only"}


@pytest.mark.django_db
def test_exec_settings_and_shell_check_observations_are_recorded():
    _, req = ask("pip install requests", mode="autonomous", exec_ask="always")
    why = req.details["why"]
    assert why["reason"] == "every command needs approval (exec_ask=always)"
    assert why["exec"]["ask"] == "always"
    assert why["observations"] == ["package_install: pip installs packages"]
    assert "Shell check observed: package_install: pip installs packages." in why["lines"]
    assert "unknown" in effects_of(req)  # pip is not in goclaw's effects table


@pytest.mark.django_db
def test_an_allowlist_miss_and_paths_outside_the_workspace():
    _, req = ask("cat /etc/hosts > copy.txt", mode="autonomous", exec_ask="on-miss", exec_allowlist=["ls"])
    assert req.details["why"]["exec"]["allowlist"] == "not covered"
    effects = effects_of(req)
    assert effects["outside"] == ["/etc/hosts"] and effects["write"] == ["cat /etc/hosts > copy.txt"]
    assert req.details["risk"]["level"] == "high"


@pytest.mark.django_db
def test_active_allow_always_rules_that_do_not_cover_the_call_are_counted():
    from tools_app.services import approvals as svc

    agent, first = ask("echo one")
    svc.approval_decide(approval_id=first.pk, decision="allow_always", actor=None)
    _, second = ask("echo two", agent=agent)
    assert second.details["why"]["rules"] == 1
    assert "No allow-always rule covers this call (1 active for exec)." in second.details["why"]["lines"]


@pytest.mark.django_db
def test_the_queue_shows_why_and_risk_escaped(admin_client):
    _, req = ask("rm -rf '<b>build</b>'")
    html = admin_client.get(QUEUE).content.decode()
    row = re.search(rf'<tr id="approval-{req.pk}".*?</tr>', html, re.S).group(0)
    assert '<div class="risk risk-high" data-field="risk">Risk (high): deletes files (rm -rf &#x27;&lt;b&gt;build&lt;/b&gt;&#x27;)' in row
    assert "<b>build" not in row
    assert "<li>Agent mode: Cautious (mutating tools ask).</li>" in row
    assert f'data-field="reason" hidden>agent {req.agent.key} is in cautious mode' in row
    # the live rendering gets the same lines from the event payload and writes them with textContent only
    assert "function whyAndRisk(row, details)" in html and "innerHTML" not in html


@pytest.mark.django_db
def test_a_request_recorded_before_why_and_risk_shows_its_reason(admin_client):
    agent = make_agent()
    now = timezone.now()
    old = ApprovalRequest.objects.create(agent=agent, tool_name="exec", arguments={"command": "ls"}, args_hash="x" * 64,
                                         summary="exec in /w:\n$ ls", details={"command": "ls"},
                                         reason="an older reason", requested_at=now, expires_at=now + timedelta(minutes=5))
    page = admin_client.get(QUEUE)
    row = re.search(rf'<tr id="approval-{old.pk}".*?</tr>', page.content.decode(), re.S).group(0)
    assert page.status_code == 200
    assert '<div class="help" data-field="reason">an older reason</div>' in row
    assert 'data-field="why" hidden></ul>' in row and 'data-field="risk" hidden></div>' in row
    detail = admin_client.get(f"/admin/tools_app/approvalrequest/{old.pk}/change/").content.decode()
    assert "<li>an older reason</li>" in detail


@pytest.mark.django_db
def test_the_request_detail_page_lists_why_and_risk(admin_client):
    _, req = ask("curl https://example.com")
    page = admin_client.get(f"/admin/tools_app/approvalrequest/{req.pk}/change/").content.decode()
    assert "Risk (medium): uses the network (curl https://example.com)" in page
    assert f"<li>Asked because agent {req.agent.key} is in cautious mode.</li>" in page
