"""People get only what their permissions say (docs/permissions.md). The matrix is generated from the URL conf and
the admin registry, so a new endpoint, page, admin view or action without a permission check fails here:

- a staff account with no permission gets 403 on every method of every view (the API's error envelope with code
  `permission_denied`; pages a plain 403);
- structurally, every staff-reachable API view declares permissions for every method it implements, every page and
  custom admin view is wrapped by goclaw.authz.person_required, every admin action declares `permissions=`;
- a staff account holding exactly what a view declares is not refused (it may get 400 / 404: the dummy ids).
"""
from __future__ import annotations

import itertools
import json
import uuid

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import NoReverseMatch, URLPattern, URLResolver, get_resolver, reverse
from rest_framework.views import APIView

from goclaw import authz
from goclaw.api import IsAgentOrStaff, IsStaff
from tests.factories import make_person

get_resolver().url_patterns  # the admin's modules load with the URLconf (settings install SimpleAdminConfig)

pytestmark = pytest.mark.django_db

EXCLUDED_PATHS = ("healthz", "api/schema/", "api/docs/", "mcp",  # public / agent-only / documented elsewhere
                  # OAuth's machine endpoints are public by their RFCs (oauth/authorize, a person's page, stays covered)
                  ".well-known/oauth-protected-resource", ".well-known/oauth-protected-resource/mcp",
                  ".well-known/oauth-authorization-server", "oauth/token", "oauth/register", "oauth/revoke")
API_METHODS = ("get", "post", "put", "patch", "delete")
PAGE_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
DUMMY = str(uuid.UUID(int=0x7A5E))  # any syntactically valid id: the permission check runs before the lookup
OUR_APPS = ("goclaw", "tools_app", "mcp_app", "teams_app", "sandbox_app", "runtime_app", "config_app", "console_app")
DJANGO_ADMIN_VIEWS = {"changelist", "add", "history", "delete", "change"}


# --- what the URL conf and the admin registry serve ----------------------------------------------------------------
def _walk(resolver, prefix="", namespace=""):
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            if entry.app_name == "admin":  # admin.site.urls: covered from the admin registry below
                continue
            ns = f"{namespace}{entry.namespace}:" if entry.namespace else namespace
            yield from _walk(entry, prefix + str(entry.pattern), ns)
        else:
            yield prefix + str(entry.pattern), entry, f"{namespace}{entry.name}" if entry.name else None


def _url(name: str, pattern: URLPattern, *, prefix="") -> str:
    """A URL of `pattern` with every path parameter filled by a syntactically valid dummy."""
    converters = getattr(pattern.pattern, "converters", {})
    names = list(converters) or list(pattern.pattern.regex.groupindex)
    choices = []
    for param in names:
        kind = type(converters.get(param)).__name__
        choices.append([DUMMY] if kind == "UUIDConverter" else ["1"] if kind == "IntConverter" else ["1", "x", DUMMY])
    for values in itertools.product(*choices):
        try:
            return reverse(name, kwargs=dict(zip(names, values)))
        except NoReverseMatch:
            continue
    raise AssertionError(f"no dummy URL for {prefix}{pattern.pattern}")


def url_conf_views():
    """(url, view class or None, callback, label) for every route of the URL conf but the admin site's and the
    excluded ones."""
    found = []
    for route, pattern, name in _walk(get_resolver()):
        if route in EXCLUDED_PATHS:
            continue
        assert name, f"{route} has no URL name"
        found.append((_url(name, pattern, prefix=route), getattr(pattern.callback, "cls", None), pattern.callback, route))
    return found


def _admin_urls(model_admin):
    for pattern in model_admin.get_urls():
        yield pattern, (pattern.name.rsplit("_", 1)[-1] if pattern.name else None)


def admin_views():
    """(url, model admin, pattern name, callback) for every view of every registered ModelAdmin."""
    found = []
    for model, model_admin in admin.site._registry.items():
        for pattern, kind in _admin_urls(model_admin):
            if pattern.name is None:  # the pre-1.9 `<id>/` redirect to `<id>/change/` (tested below)
                continue
            found.append((_url(f"admin:{pattern.name}", pattern), model_admin, pattern.name, pattern.callback))
    return found


def staff_reachable(view_class) -> bool:
    view = view_class()
    for method in API_METHODS:
        if hasattr(view_class, method):
            view.request = type("R", (), {"method": method.upper()})()
            if any(isinstance(p, (IsStaff, IsAgentOrStaff)) for p in view.get_permissions()):
                return True
    return False


def implemented(view_class) -> list[str]:
    return [m.upper() for m in API_METHODS if hasattr(view_class, m)]


ALL_API = [(url, cls, route) for url, cls, _, route in url_conf_views() if cls is not None and issubclass(cls, APIView)]
API = [(url, cls, route) for url, cls, route in ALL_API if staff_reachable(cls)]  # agent-only ones: see below
PAGES = [(url, callback, route) for url, cls, callback, route in url_conf_views() if cls is None]


def _client(user) -> Client:
    client = Client()  # CSRF checks off, as a browser with its token: the refusals below are the permission's
    client.force_login(user)
    return client


def _send(client, method: str, url: str, body=None):
    return client.generic(method, url, json.dumps(body if body is not None else {}), content_type="application/json")


@pytest.fixture
def nobody():
    """An active staff account with no permission at all (the admin and the console refuse it)."""
    return _client(make_person(username="nobody"))


# --- the matrix ----------------------------------------------------------------------------------------------------
def test_the_matrix_covers_the_api_the_pages_and_the_admin():
    routes = {route for _, _, route in API} | {route for _, _, route in PAGES}
    for expected in ("api/v1/invocations", "api/v1/tools/execute", "api/v1/approvals/<uuid:pk>/decision",
                     "api/v1/custom-tools/", "api/v1/mcp/launchers", "api/v1/config/export", "admin/config/",
                     "admin/console/audit/", "admin/console/playground/", "teams/<int:team_id>/board/"):
        assert expected in routes
    names = {name for _, _, name, _ in admin_views()}
    assert {"tools_app_approvalrequest_decide", "tools_app_customtool_try", "mcp_app_mcplauncher_add",
            "tools_app_toolinvocation_changelist"} <= names


@pytest.mark.parametrize("url, view_class, route", API, ids=[route for _, _, route in API])
def test_a_staff_account_without_permissions_is_refused_every_api_method(nobody, url, view_class, route):
    for method in [*implemented(view_class), "OPTIONS"] + (["HEAD"] if hasattr(view_class, "get") else []):
        response = _send(nobody, method, url)
        assert response.status_code == 403, (method, url, response.content[:300])
        if method != "HEAD":
            error = response.json()["error"]
            assert error["code"] == "permission_denied", (method, url, error)


@pytest.mark.parametrize("url, callback, route", PAGES, ids=[route for _, _, route in PAGES])
def test_a_staff_account_without_permissions_is_refused_every_page(nobody, url, callback, route):
    for method in PAGE_METHODS:
        response = _send(nobody, method, url)
        assert response.status_code == 403, (method, url, response.status_code)


def test_pages_send_someone_not_logged_in_to_the_admin_login():
    anonymous = Client()
    for url, _, _ in PAGES:
        response = anonymous.get(url)
        assert response.status_code == 302 and "/admin/login/" in response["Location"], url


@pytest.mark.parametrize("url, model_admin, name, callback", admin_views(), ids=[v[2] for v in admin_views()])
def test_a_staff_account_without_permissions_is_refused_every_admin_view(nobody, url, model_admin, name, callback):
    for method in ("GET", "POST"):
        response = nobody.generic(method, url)
        assert response.status_code == 403, (method, url, response.status_code)


def test_the_old_admin_object_url_only_redirects_to_the_refused_change_page(nobody):
    response = nobody.get(f"/admin/tools_app/agent/{DUMMY}/")
    assert response.status_code == 302 and response["Location"].endswith(f"/{DUMMY}/change/")
    assert nobody.get(response["Location"]).status_code == 403


def test_history_pages_do_not_tell_a_person_without_permission_whether_an_object_exists(nobody):
    from tests.factories import make_agent

    agent = make_agent()
    assert nobody.get(f"/admin/tools_app/agent/{agent.pk}/history/").status_code == 403
    assert nobody.get("/admin/tools_app/agent/999999/history/").status_code == 403


# --- structure: nothing reachable by people without a declaration ---------------------------------------------------
def test_every_staff_api_view_declares_permissions_for_every_method_it_implements():
    problems = []
    for url, view_class, route in API:
        spec = getattr(view_class, "staff_permissions", None)
        try:
            checked = authz.spec_check(spec, route)
        except Exception as exc:  # noqa: BLE001 - reported below
            problems.append(str(exc))
            continue
        problems += [f"{route}: {m} not declared" for m in implemented(view_class) if m not in checked]
        problems += [f"{route}: {m} declared but not implemented" for m in checked if m not in implemented(view_class)]
    assert not problems


def test_only_the_agents_own_endpoint_is_closed_to_staff_altogether(nobody):
    assert [route for _, cls, route in ALL_API if not staff_reachable(cls)] == ["api/v1/agents/me"]
    refused = nobody.get("/api/v1/agents/me")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied"


def test_every_page_is_wrapped_by_the_permission_layer():
    assert [route for _, callback, route in PAGES if not getattr(callback, "person_permissions", None)] == []


def test_every_custom_admin_view_of_ours_is_wrapped_by_the_permission_layer():
    unwrapped = [name for _, model_admin, name, callback in admin_views()
                 if type(model_admin).__module__.split(".")[0] in OUR_APPS
                 and name.rsplit("_", 1)[-1] not in DJANGO_ADMIN_VIEWS
                 and not getattr(callback, "person_permissions", None)]
    assert unwrapped == []


def test_every_admin_action_declares_its_permissions():
    problems = []
    for model, model_admin in admin.site._registry.items():
        for func, name, _ in model_admin._get_base_actions():
            allowed = getattr(func, "allowed_permissions", None)
            if not allowed:
                problems.append(f"{model.__name__}.{name}: no permissions=")
            problems += [f"{model.__name__}.{name}: no has_{p}_permission" for p in allowed or ()
                         if not hasattr(model_admin, f"has_{p}_permission")]
    assert problems == []


def test_every_declared_permission_exists():
    declared = set()
    for _, view_class, _ in API:
        for permissions in (getattr(view_class, "staff_permissions", None) or {}).values():
            declared.update(permissions)
    for _, callback, _ in PAGES:
        for permissions in callback.person_permissions.values():
            declared.update(permissions)
    for _, _, _, callback in admin_views():
        for permissions in (getattr(callback, "person_permissions", None) or {}).values():
            declared.update(permissions)
    rows = {f"{p.content_type.app_label}.{p.codename}" for p in Permission.objects.select_related("content_type")}
    assert declared and declared <= rows, declared - rows


# --- the declared permissions are enough ----------------------------------------------------------------------------
QUERY = {("api/v1/config/import", "POST"): "?dry_run=1"}  # applying also needs apply_configuration (tested below)


@pytest.mark.parametrize("url, view_class, route", API, ids=[route for _, _, route in API])
def test_holding_exactly_the_declared_permissions_is_enough_for_each_api_method(url, view_class, route):
    for method, permissions in view_class.staff_permissions.items():
        client = _client(make_person(*permissions))
        response = _send(client, method, url + QUERY.get((route, method), ""))
        assert response.status_code != 403, (method, url, permissions, response.content[:300])
        # …and one permission short is refused, naming what is missing
        refused = _send(_client(make_person(*permissions[:-1])), method, url)
        assert refused.status_code == 403 and permissions[-1] in refused.json()["error"]["message"]


@pytest.mark.parametrize("url, callback, route", PAGES, ids=[route for _, _, route in PAGES])
def test_holding_exactly_the_declared_permissions_is_enough_for_each_page(url, callback, route):
    for method, permissions in callback.person_permissions.items():
        for sent in (["GET", "POST"] if method == authz.EVERY_METHOD else [method]):
            response = _send(_client(make_person(*permissions)), sent, url)
            assert response.status_code != 403, (sent, url, permissions)


def test_holding_exactly_the_declared_permissions_is_enough_for_each_custom_admin_view():
    checked = 0
    for url, _, name, callback in admin_views():
        for method, permissions in (getattr(callback, "person_permissions", None) or {}).items():
            for sent in (["GET", "POST"] if method == authz.EVERY_METHOD else [method]):
                response = _client(make_person(*permissions)).generic(sent, url)
                assert response.status_code != 403, (sent, name, permissions)
                checked += 1
    assert checked >= 10
