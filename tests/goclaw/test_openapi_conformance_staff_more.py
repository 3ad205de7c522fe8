"""The other half of the staff operations of test_openapi_conformance.py (same fixtures, checks and settings), in a
file of its own so that another test worker runs it."""
from __future__ import annotations

import pytest
import schemathesis

from tests.goclaw.test_openapi_conformance import (  # noqa: F401 - fixtures used by name
    CHECKS, CSRF, FUZZ_SETTINGS, _node_id_for_schemathesis, fuzz_agent, keep_test_transaction, staff_part,
    staff_schema, staff_user)

pytestmark = [pytest.mark.django_db, pytest.mark.slow]  # slow: spread through the run (tests/conftest.py)

staff_api_more = schemathesis.pytest.from_fixture("staff_schema").include(staff_part(1))


@staff_api_more.parametrize()
@FUZZ_SETTINGS
def test_the_api_conforms_to_its_schema_for_staff_other_operations(case):
    case.call_and_validate(checks=CHECKS, headers={"X-CSRFToken": CSRF}, cookies={"csrftoken": CSRF})
