"""The agent request path skips what only browsers need (session, CSRF, messages, content negotiation) and renders
JSON with orjson, while browsers and staff keep sessions and CSRF, and every answer keeps its shape and headers."""
from __future__ import annotations

import json

import pytest
from rest_framework.renderers import JSONRenderer
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


@pytest.fixture
def strict_api(agent_token):
    """An agent client that would be held to CSRF checks if any were made."""
    client = APIClient(enforce_csrf_checks=True)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_token}")
    return client


@pytest.fixture
def staff_session(django_user_model):
    from tests.factories import make_person

    user = make_person("tools_app.view_toolpolicy", username="staff-csrf")  # may use the scrubber
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def test_a_bearer_api_call_sets_no_cookie_and_needs_no_csrf_token(strict_api):
    response = strict_api.post("/api/v1/tools/execute", {"tool": "datetime", "arguments": {}}, format="json")
    assert response.status_code == 200 and response.json()["status"] == "ok"
    assert "Set-Cookie" not in response.headers and not response.cookies
    skipped = response.wsgi_request  # the session, its user and its messages were never loaded
    assert not hasattr(skipped, "session") and not hasattr(skipped, "_messages")


def test_a_bearer_api_call_ignores_a_session_cookie_it_also_carries(agent, staff_session, agent_token):
    staff_session.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_token}")
    response = staff_session.get("/api/v1/agents/me")  # agent-only: the staff session is never consulted
    assert response.status_code == 200 and response.json()["key"] == agent.key
    assert not response.cookies


def test_a_staff_session_api_call_still_needs_its_csrf_token(staff_session):
    refused = staff_session.post("/api/v1/security/scrub", {"text": "hello"}, format="json")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "permission_denied" and "CSRF" in refused.json()["error"]["message"]

    secret = "a" * 32
    staff_session.cookies["csrftoken"] = secret
    allowed = staff_session.post("/api/v1/security/scrub", {"text": "hello"}, format="json", HTTP_X_CSRFTOKEN=secret)
    assert allowed.status_code == 200 and allowed.json() == {"text": "hello", "redactions": 0}


def test_the_admin_login_keeps_its_session_and_csrf_protection(db):
    from django.test import Client

    browser = Client(enforce_csrf_checks=True)
    page = browser.get("/admin/login/")
    assert page.status_code == 200 and "csrftoken" in page.cookies
    assert browser.post("/admin/login/", {"username": "x", "password": "y"}).status_code == 403


def test_security_headers_stay_on_bearer_api_answers(strict_api):
    response = strict_api.get("/api/v1/tools")
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_the_api_answers_json_whatever_the_client_accepts(strict_api):
    for accept in ("text/html", "application/xml", "*/*", "application/json; indent=4"):
        response = strict_api.get("/api/v1/agents/me", HTTP_ACCEPT=accept)
        assert response.status_code == 200 and response.headers["Content-Type"] == "application/json"
        assert response.json()["key"]


@pytest.mark.parametrize("header, code, status", [
    ("Bearer gclw_nope_secret", "not_authenticated", 401),
    ("Bearer", "not_authenticated", 401),
])
def test_credential_errors_keep_the_error_envelope(db, header, code, status):
    client = APIClient(enforce_csrf_checks=True)
    response = client.post("/api/v1/tools/execute", {"tool": "datetime"}, format="json", HTTP_AUTHORIZATION=header)
    assert response.status_code == status
    assert response.json() == {"error": {"code": code, "message": response.json()["error"]["message"], "details": None}}
    assert response.headers["WWW-Authenticate"] == 'Bearer realm="goclaw"'


def test_body_errors_keep_the_error_envelope(strict_api):
    malformed = strict_api.post("/api/v1/tools/execute", "{not json", content_type="application/json")
    assert malformed.status_code == 400 and malformed.json()["error"]["code"] == "malformed_request"
    form = strict_api.post("/api/v1/tools/execute", "tool=datetime", content_type="application/x-www-form-urlencoded")
    assert form.status_code == 415 and form.json()["error"]["code"] == "unsupported_media_type"
    unknown = strict_api.get("/api/v1/no-such-thing")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"


def test_answers_are_byte_for_byte_what_drfs_json_renderer_writes(strict_api, staff_session):
    catalog = strict_api.get("/api/v1/tools")
    executed = strict_api.post("/api/v1/tools/execute", {"tool": "datetime", "arguments": {}}, format="json")
    secret = "b" * 32
    staff_session.cookies["csrftoken"] = secret
    text = "naïve café 漢字 🎉 line\u2028separator\u2029 tab\t ctrl\x01 quote\" backslash\\ </script>"
    scrubbed = staff_session.post("/api/v1/security/scrub", {"text": text}, format="json", HTTP_X_CSRFTOKEN=secret)
    for response in (catalog, executed, scrubbed):
        assert response.status_code == 200
        assert response.content == JSONRenderer().render(response.data)
    assert b"\\u2028" in scrubbed.content and json.loads(scrubbed.content)["text"] == text


def test_the_openapi_schema_still_negotiates_yaml_or_json(staff_session):
    assert staff_session.get("/api/schema/").headers["Content-Type"].startswith("application/vnd.oai.openapi")
    as_json = staff_session.get("/api/schema/?format=json")
    assert as_json.headers["Content-Type"].startswith("application/vnd.oai.openapi+json")
    assert json.loads(as_json.content)["openapi"].startswith("3.")


def _query_request(query: str = ""):
    from rest_framework.request import Request
    from rest_framework.test import APIRequestFactory

    return Request(APIRequestFactory().get("/api/v1/anything" + (f"?{query}" if query else "")))


def test_an_empty_query_validates_to_the_defaults_every_time_whatever_a_caller_did_with_them():
    from goclaw.api import StrictIntegerField, validated_query
    from rest_framework import serializers

    class Query(serializers.Serializer):
        depth = StrictIntegerField(required=False, default=0, min_value=0)

    first = validated_query(Query, _query_request())
    first["depth"] = 99  # a view editing its copy
    assert validated_query(Query, _query_request()) == {"depth": 0}
    assert validated_query(Query, _query_request("depth=3")) == {"depth": 3}


def test_an_empty_query_is_validated_again_when_its_answer_can_vary():
    import itertools

    from goclaw.api import validated_query
    from rest_framework import serializers

    ticks = itertools.count()

    class Stamped(serializers.Serializer):
        tick = serializers.IntegerField(required=False, default=lambda: next(ticks))

    class Checked(serializers.Serializer):
        seen = serializers.IntegerField(required=False, default=0)

        def validate(self, attrs):
            return {**attrs, "seen": next(ticks)}

    assert validated_query(Stamped, _query_request()) != validated_query(Stamped, _query_request())
    assert validated_query(Checked, _query_request()) != validated_query(Checked, _query_request())
