"""The OpenAPI schema is the truth: schemathesis fuzzes every operation in-process (the WSGI app, the real
database) against /api/schema/, once with an agent token and once with a staff session, and checks that the
server answers only what the schema documents and accepts exactly the inputs the schema allows.

The agent run adds schemathesis' coverage phase: every boundary and every invalid shape the schema defines for each
parameter and body field (agent input is the hostile surface). The staff runs fuzz without it (4 valid and 4 invalid
examples per operation): the coverage phase made them ~65% longer, the two longest tests of the suite, and people's
inputs have their own red-team tests (tests/config_app/test_config_redteam.py, tests/goclaw/test_permissions_*.py)."""
from __future__ import annotations

import zlib

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (content_type_conformance, ignored_auth, negative_data_rejection,
                                               positive_data_acceptance, response_headers_conformance,
                                               response_schema_conformance, status_code_conformance, unsupported_method)

pytestmark = [pytest.mark.django_db, pytest.mark.slow]  # slow: spread through the run (tests/conftest.py)

# The fuzzed agent may only run tools that read: `exec` and the writing file tools run in the sandbox, which is
# not what this test is about (and would make the run slow and machine-dependent).
SAFE_TOOLS = ["datetime", "read_file", "list_files", "workspace_dir"]
CSRF = "c" * 32  # a valid unmasked CSRF secret: staff POSTs send it as cookie and header, as a browser would

# positive_data_acceptance / negative_data_rejection are on: every parameter and body is validated by the view
# with the same serializer the schema is generated from, so "valid by the schema" and "accepted" coincide.
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_headers_conformance,
          response_schema_conformance, positive_data_acceptance, negative_data_rejection, ignored_auth, unsupported_method]
# Examples per operation and generation mode (positive and negative), the same for every operation and run
# (deterministic): 4 keeps each operation's valid and invalid shapes covered within the suite's 10-minute budget
# (the three fuzzing runs were ~13% of the suite's CPU at 6; the library's own generation is ~70% of that).
EXAMPLES = 4
BASE_CONFIG = {
    "seed": 20240601,
    "generation": {"max-examples": EXAMPLES, "deterministic": True, "mode": "all",
                   # PostgreSQL text cannot hold NUL: every string field rejects it (tests/tools_app/test_bad_input.py
                   # covers that); the schema does not add a no-NUL pattern to every string.
                   "allow-x00": False},
    "phases": {"stateful": {"enabled": False}},
}
STAFF_PHASES = {**BASE_CONFIG["phases"], "coverage": {"enabled": False}}  # see the module doc
# /healthz answers 503 whenever a dependency is down (on a test machine, e.g. the sandbox): its documented
# answer, not a server error. Everywhere else the database is up, so no 5xx is acceptable.
HEALTH = {"include-path": "/healthz", "checks": {"not_a_server_error": {"expected-statuses": ["2xx", "3xx", "4xx", "503"]}}}
FUZZ_SETTINGS = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                         suppress_health_check=list(HealthCheck))


def _security(operation) -> set[str]:
    return {name for requirement in operation.definition.raw.get("security", []) for name in requirement}


def _for_agents(ctx) -> bool:
    return "AgentToken" in _security(ctx.operation) or not _security(ctx.operation)  # with /healthz


def _for_staff(ctx) -> bool:
    return "cookieAuth" in _security(ctx.operation)


def staff_part(part: int):
    """Half of the staff operations (by a hash of the path): the staff run is split over two files so that two test
    workers share it (it is the longest test of the suite)."""
    return lambda ctx: _for_staff(ctx) and zlib.crc32(ctx.operation.path.encode()) % 2 == part


def _load_schema(*, scheme: str, credential: dict, seeded: dict, operations: list | None = None, phases: dict | None = None):
    """The live schema from /api/schema/ authenticated with `credential` for `scheme`, with seeded object ids
    mixed into detail paths and ?wait= kept short."""
    from goclaw.wsgi import application

    config = {**BASE_CONFIG, "auth": {"openapi": {scheme: credential}}, "operations": [HEALTH, *(operations or [])],
              **({"phases": phases} if phases else {})}
    schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application, config=schemathesis.Config.from_dict(config))

    @schema.hook
    def flatmap_path_parameters(ctx, path_parameters):
        # A random UUID only ever reaches the 404 branch; sometimes use an object that exists for this caller.
        known = seeded.get((ctx.operation.method.upper(), ctx.operation.path))
        if known is None or not isinstance(path_parameters, dict) or "id" not in path_parameters:
            return st.just(path_parameters)
        return st.sampled_from([path_parameters, {**path_parameters, "id": known}])

    @schema.hook
    def map_query(ctx, query):
        # ?wait= long-polls up to 60 s on a pending request; any valid wait behaves the same way for the schema.
        if ctx.operation.path == "/api/v1/approvals/{id}" and isinstance(query, dict):
            wait = query.get("wait")
            if isinstance(wait, int) and not isinstance(wait, bool) and 1 < wait <= 60:
                query["wait"] = 1
        return query

    return schema


def _seed(agent, staff) -> dict:
    """Real rows of `agent` for lists and detail pages: an invocation, a denied approval request (so ?wait= never
    waits) and a pending one to cancel."""
    from tools_app import pipeline
    from tools_app.services import approvals as svc
    from tools_app.services.agents import agent_update

    ran = pipeline.execute(pipeline.ToolCall(agent=agent, tool="datetime", arguments={}))
    agent_update(agent=agent, mode="manual")
    denied, pending = (pipeline.execute(pipeline.ToolCall(agent=agent, tool="datetime", arguments={"timezone": tz})).extra["approval_id"]
                       for tz in ("UTC", "Europe/Paris"))
    svc.approval_decide(approval_id=denied, decision="deny", actor=staff, note="seeded")
    agent_update(agent=agent, mode="autonomous")
    return {("GET", "/api/v1/invocations/{id}"): ran.invocation_id, ("GET", "/api/v1/approvals/{id}"): denied,
            ("POST", "/api/v1/approvals/{id}/cancel"): pending}


@pytest.fixture(autouse=True)
def _node_id_for_schemathesis(request):
    """schemathesis 4.32's pytest plugin reads and rewrites `node._nodeid` (to name each operation's subtest),
    an attribute pytest 9.2 no longer has; give it one."""
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid


@pytest.fixture
def keep_test_transaction(db):
    """Calling the WSGI app directly fires request_started/finished, whose close_old_connections would close the
    connection holding the test transaction (Django's test client disconnects it the same way)."""
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections

    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def fuzz_agent(keep_test_transaction):
    from tests.factories import make_agent
    from tools_app.models import ToolPolicy
    from tools_app.services.policy import tool_policy_save

    agent = make_agent()
    tool_policy_save(actor=None, policy=ToolPolicy(scope="agent", agent=agent, allow=SAFE_TOOLS))
    return agent


@pytest.fixture
def staff_user(keep_test_transaction):
    """A staff account holding every permission (the Administrators group), so each operation is fuzzed past the
    permission check (tests/goclaw/test_permissions_matrix.py covers the refusals)."""
    from tests.factories import make_administrator

    return make_administrator(username="fuzz-staff")


# MCP writes name servers and agents that must exist, and definitions the services check as a whole (launcher
# allowlist, reachable URL, one pending request per subject): a schema-valid body may get 400 / 404 / 409.
MCP_WRITES = {"checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", "400", "401", "403", "404", "409"]}},
              "include-path-regex": "^/api/v1/mcp/"}
# Team and link writes name agents that must exist and members with roles, and move tasks through a state machine
# (an illegal transition is a 409): a schema-valid body may get 400 / 404 / 409.
TEAMS_WRITES = {"checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", "400", "401", "403", "404", "409"]}},
                "include-path-regex": "^/api/v1/(teams|agent-links|delegations|routes)/"}


@pytest.fixture
def agent_schema(fuzz_agent, staff_user):
    from tools_app.services.agents import token_issue

    token = token_issue(agent=fuzz_agent, name="fuzz")[1]
    return _load_schema(scheme="AgentToken", credential={"bearer": token}, seeded=_seed(fuzz_agent, staff_user),
                        operations=[MCP_WRITES, TEAMS_WRITES])


@pytest.fixture
def staff_schema(fuzz_agent, staff_user):
    from django.test import Client

    client = Client()
    client.force_login(staff_user)
    # Staff must name the agent they act as, a rule per credential that a parameter schema cannot state: the
    # catalog, execute and session creation document it as a 400 (agent_required), so a schema-valid staff
    # request may get it.
    named_agent = {"checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", "400", "401", "403", "404", "409"]}},
                   "include-path": ["/api/v1/tools", "/api/v1/tools/execute", "/api/v1/sessions"]}
    # A custom tool's template may only name declared parameters, its agent must exist, its schema must be a valid
    # JSON Schema: rules across fields (and rows) that no request schema can state, answered 400 / 409.
    custom_tools = {"checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", "400", "401", "403", "404", "409"]}},
                    "include-path-regex": "^/api/v1/custom-tools/"}
    # A configuration document is checked as a whole against the database (references, services' rules): any
    # mapping fits the schema, most are answered 400 config_invalid (docs/config-as-code.md).
    config_import = {"checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", "400", "401", "403"]}},
                     "include-path": "/api/v1/config/import"}
    # An LLM provider's base URL must pass the outbound rule (no loopback / private address unless allowed, never
    # metadata) and its name be free and not in use by agents: rules no schema states, answered 400 / 409.
    providers = {"checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", "400", "401", "403", "404", "409"]}},
                 "include-path-regex": "^/api/v1/providers"}
    return _load_schema(scheme="cookieAuth", credential={"api_key": client.cookies["sessionid"].value},
                        seeded=_seed(fuzz_agent, staff_user), phases=STAFF_PHASES,
                        operations=[named_agent, custom_tools, MCP_WRITES, TEAMS_WRITES, config_import, providers])


# Each run covers the operations its credential is documented for; test_each_credential_is_refused_where_the_schema_
# does_not_list_it covers the others.
agent_api = schemathesis.pytest.from_fixture("agent_schema").include(_for_agents)
staff_api = schemathesis.pytest.from_fixture("staff_schema").include(staff_part(0))  # part 1: *_staff_more.py


@agent_api.parametrize()
@FUZZ_SETTINGS
def test_the_api_conforms_to_its_schema_for_an_agent(case):
    case.call_and_validate(checks=CHECKS)


@staff_api.parametrize()
@FUZZ_SETTINGS
def test_the_api_conforms_to_its_schema_for_staff(case):
    case.call_and_validate(checks=CHECKS, headers={"X-CSRFToken": CSRF}, cookies={"csrftoken": CSRF})


def test_each_credential_is_refused_where_the_schema_does_not_list_it(fuzz_agent, staff_user):
    """The other half of "security is exact": an agent token on a staff-only operation and a staff session on an
    agent-only one get the documented 403 envelope; no credentials get 401."""
    from django.test import Client
    from rest_framework.test import APIClient

    from tools_app.services.agents import token_issue

    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {token_issue(agent=fuzz_agent, name='probe')[1]}")
    staff = APIClient(enforce_csrf_checks=True)
    staff.force_login(staff_user)
    paths = Client().get("/api/schema/?format=json").json()["paths"]
    probed = set()
    for path, operations in paths.items():
        url = path.replace("{id}", "00000000-0000-0000-0000-000000000000")
        for method, operation in operations.items():
            schemes = {name for requirement in operation.get("security", []) for name in requirement}
            documented = set(operation["responses"])
            for scheme, client in (("AgentToken", agent), ("cookieAuth", staff), (None, APIClient())):
                if not schemes or scheme in schemes:
                    continue
                response = getattr(client, method)(url, data={}, format="json")
                expected = "401" if scheme is None else "403"
                assert str(response.status_code) == expected and expected in documented, (method, path, scheme, response.content)
                assert set(response.json()["error"]) == {"code", "message", "details"}
                probed.add((method, path, scheme))
    assert ("get", "/api/v1/tools/explain", "AgentToken") in probed and ("get", "/api/v1/agents/me", "cookieAuth") in probed
