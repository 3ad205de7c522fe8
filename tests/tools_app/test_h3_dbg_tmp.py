import json, pytest
from tests.tools_app.test_bad_input import _asked
@pytest.mark.django_db
def test_dbg(api, agent, django_user_model):
    from tools_app.services import approvals as svc
    a = _asked(agent)
    svc.approval_decide(approval_id=a, decision="allow_once", actor=django_user_model.objects.create_user("ops", password="x", is_staff=True))
    r = api.post(f"/api/v1/approvals/{a}/execute", data='{"arguments": {"timezone": 5}}', content_type="application/json")
    print("RESULT", r.status_code, r.content[:500])
