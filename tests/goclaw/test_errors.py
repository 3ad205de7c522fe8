import json

import pytest
from django.test import override_settings

pytestmark = pytest.mark.django_db


def _envelope(response):
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    return body["error"]


def test_unknown_api_route_is_a_json_404(api):
    response = api.get("/api/v1/no-such-thing")
    assert response.status_code == 404
    assert _envelope(response)["code"] == "not_found"


def test_wrong_method_is_a_json_405(api):
    response = api.delete("/api/v1/tools/execute")
    assert response.status_code == 405
    assert _envelope(response)["code"] == "method_not_allowed"


def test_missing_token_is_a_json_401(client):
    response = client.post("/api/v1/tools/execute", data="{}", content_type="application/json")
    assert response.status_code == 401
    assert _envelope(response)["code"] == "not_authenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_malformed_json_is_a_json_400(api):
    response = api.post("/api/v1/tools/execute", data='{"tool": "datetime",', content_type="application/json")
    assert response.status_code == 400
    assert _envelope(response)["code"] == "malformed_request"


def test_missing_tool_field_is_a_json_400_naming_the_field(api):
    response = api.post("/api/v1/tools/execute", data=json.dumps({"arguments": {}}), content_type="application/json")
    assert response.status_code == 400
    error = _envelope(response)
    assert error["code"] == "invalid_request" and "tool" in error["details"]


@override_settings(MAX_REQUEST_BYTES=2048, DATA_UPLOAD_MAX_MEMORY_SIZE=2048)
def test_oversized_body_is_a_json_413(api):
    body = json.dumps({"tool": "datetime", "arguments": {"timezone": "x" * 5000}})
    response = api.post("/api/v1/tools/execute", data=body, content_type="application/json")
    assert response.status_code == 413
    assert _envelope(response)["code"] == "request_too_large"


def test_unhandled_exception_is_a_json_500_without_traceback(api, monkeypatch):
    from tools_app import pipeline

    def explode(call, reg=None):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(pipeline, "execute", explode)
    response = api.post("/api/v1/tools/execute", data=json.dumps({"tool": "datetime"}), content_type="application/json")
    assert response.status_code == 500
    error = _envelope(response)
    assert error["code"] == "internal_error" and "secret internals" not in response.content.decode()


def test_non_json_content_type_is_415(api):
    response = api.post("/api/v1/tools/execute", data="tool=datetime", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415
    assert _envelope(response)["code"] == "unsupported_media_type"


def test_database_outage_is_a_json_503_not_a_traceback(api):
    from django.db import connection

    def refuse(execute, sql, params, many, context):
        from django.db import OperationalError

        raise OperationalError("connection to server on socket failed: No such file or directory")

    with connection.execute_wrapper(refuse):
        response = api.get("/api/v1/invocations")
    assert response.status_code == 503
    assert _envelope(response)["code"] == "database_unavailable" and response["Retry-After"] == "5"
