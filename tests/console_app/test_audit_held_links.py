"""The audit row of a held call (the first, pending run) links to the approval request or file change it waits
for, and its detail page leads on to the approved run. Needs the pipeline to record the held row's id
(`approval_id` / `pending_change_id` from the outcome, in tools_app.pipeline.record)."""
import pytest

from tests.factories import make_agent
from tools_app import execution, pipeline
from tools_app.models import ToolInvocation
from tools_app.registry import registry
from tools_app.services import approvals as approvals_svc
from tools_app.services.agents import agent_update

pytestmark = pytest.mark.django_db

SEARCH = "/admin/console/audit/"


def test_a_pending_row_links_its_approval_and_the_approved_run_links_back(admin_client, django_user_model):
    staff = django_user_model.objects.create_user("approver", password="pw-approver-1", is_staff=True)
    agent = agent_update(agent=make_agent(), mode="manual")
    asked = pipeline.execute(pipeline.ToolCall(agent, "list_files", {"path": "."}), registry)
    assert asked.status == "pending_approval"
    approval_id = asked.extra["approval_id"]
    assert str(ToolInvocation.objects.get(pk=asked.invocation_id).approval_id) == approval_id
    approvals_svc.approval_decide(approval_id=approval_id, decision="allow_once", actor=staff)
    ran = execution.approval_execute(approval_id=approval_id, agent=agent, tools=registry)

    pending_page = admin_client.get(f"{SEARCH}{asked.invocation_id}/").content.decode()
    assert "This call waited for" in pending_page
    assert f'href="/admin/tools_app/approvalrequest/{approval_id}/change/"' in pending_page
    assert f'href="{SEARCH}{ran.invocation_id}/"' in pending_page  # on to the approved run
    assert "<code>approval.requested</code>" in pending_page and "<code>approval.resolved</code>" in pending_page
    run_page = admin_client.get(f"{SEARCH}{ran.invocation_id}/").content.decode()
    assert f'href="{SEARCH}{asked.invocation_id}/"' in run_page  # back to the call as first asked


def test_a_held_write_links_its_change_and_the_applied_run(admin_client, django_user_model, tmp_path):
    staff = django_user_model.objects.create_user("reviewer", password="pw-reviewer-1", is_staff=True)
    agent = agent_update(agent=make_agent(workspace=str(tmp_path)), mode="review")
    held = pipeline.execute(pipeline.ToolCall(agent, "write_file", {"path": "a.txt", "content": "x"}), registry)
    change_id = held.extra["pending_change_id"]
    assert str(ToolInvocation.objects.get(pk=held.invocation_id).pending_change_id) == change_id
    change = execution.pending_change_decide(change_id=change_id, accept=True, actor=staff, tools=registry)
    page = admin_client.get(f"{SEARCH}{held.invocation_id}/").content.decode()
    assert "This call was held as" in page and f'href="{SEARCH}{change.invocation_id}/"' in page
    assert "<code>pending_change.created</code>" in page and "<code>pending_change.resolved</code>" in page
