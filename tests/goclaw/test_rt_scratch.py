import json
import pytest
from django.test import Client
from tests.factories import make_agent, make_person, people_group
from tools_app import pipeline

pytestmark = pytest.mark.django_db

def _op():
    c = Client(); c.force_login(make_person(groups=["Operators"])); return c

def test_probe():
    agent = make_agent()
    pipeline.execute(pipeline.ToolCall(agent=agent, tool="datetime", arguments={"timezone": "SECRETVALUE-Europe/Paris-with-a-long-tail-after-40-chars-XYZZY"}))
    c = _op()
    for q in ["arguments__icontains=XYZZY", "arguments__icontains=NOPE", "error__isnull=False", "arguments__timezone__endswith=XYZZY", "arguments__timezone__endswith=NOPE"]:
        r = c.get("/admin/tools_app/toolinvocation/?" + q)
        print(q, r.status_code, b"XYZZY" in r.content, r.content.count(b'class="action-select"'))
    for q in ["content__icontains=x"]:
        r = c.get("/admin/tools_app/storedtooloutput/?" + q); print(q, r.status_code)
    r = c.get("/api/v1/invocations?q=XYZZY"); print(r.status_code, r.content[:300])
    r = c.get("/admin/console/audit/?q=XYZZY"); print(r.status_code)
