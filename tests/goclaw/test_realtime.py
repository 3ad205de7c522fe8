"""goclaw imports no app: what apps contribute from AppConfig.ready() (schedules, WebSocket tokens and groups)
reaches the platform, and the platform fails closed where nothing was contributed."""
from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from goclaw import realtime


@pytest.mark.django_db
def test_the_schedules_apps_register_are_created_next_to_goclaws_own():
    from django_q.models import Schedule

    from goclaw.services import SCHEDULES, schedules_ensure

    Schedule.objects.all().delete()
    schedules_ensure()
    rows = {s.name: (s.func, s.cron) for s in Schedule.objects.all()}
    expected = {
        "goclaw heartbeat": ("goclaw.tasks.heartbeat", "* * * * * */30"),
        "tools rate-limit cleanup": ("tools_app.tasks.cleanup_rate_limits", "*/10 * * * *"),
        "tools approvals expiry sweep": ("tools_app.tasks.sweep_expired_approvals", "* * * * * */30"),
        "mcp health sweep": ("mcp_app.tasks.health_sweep", "* * * * * */30"),
    }
    assert expected.items() <= rows.items()
    assert set(rows) == {"goclaw heartbeat", *SCHEDULES}  # every registered schedule, nothing else


@pytest.mark.parametrize("group", ["approvals", "invocations", "agent.build-bot_2"])
def test_staff_may_join_the_groups_tools_app_opened(group):
    assert realtime.websocket_staff_may_join(group)


@pytest.mark.parametrize("group", ["principal.token.1", "principal.user.1", "agent.Bot", "agent.", "approvals\n",
                                   "approvals.x", "xapprovals", "secrets", ""])
def test_staff_may_not_join_a_group_no_app_opened(group):
    assert not realtime.websocket_staff_may_join(group)


def test_a_second_different_token_authenticator_is_refused():
    from tools_app.services.agents import token_active, token_authenticate

    realtime.websocket_authenticator_register(authenticate=token_authenticate, active=token_active)  # the same: fine
    with pytest.raises(ImproperlyConfigured, match="already registered"):
        realtime.websocket_authenticator_register(authenticate=lambda raw: object(), active=token_active)
    assert realtime.websocket_token_authenticate("not-a-token") is None  # the first one still answers


def test_without_a_registered_authenticator_no_token_is_accepted(monkeypatch):
    monkeypatch.setattr(realtime, "_authenticator", None)
    assert realtime.websocket_token_authenticate("gclw_anything_at-all") is None
    assert realtime.websocket_token_active(1) is None
