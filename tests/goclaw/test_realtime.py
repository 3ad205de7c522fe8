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


@pytest.mark.django_db
@pytest.mark.parametrize("group", ["approvals", "invocations", "agent.build-bot_2"])
def test_staff_may_join_the_groups_tools_app_opened_holding_their_view_permissions(group):
    from tests.factories import make_person

    needed = realtime.websocket_staff_group_permissions(group)
    assert needed and all(".view_" in p for p in needed)
    assert realtime.websocket_staff_may_join(group, make_person(*needed))
    assert not realtime.websocket_staff_may_join(group, make_person())  # staff without the permissions
    assert not realtime.websocket_staff_may_join(group, None)


@pytest.mark.django_db
@pytest.mark.parametrize("group", ["principal.token.1", "principal.user.1", "agent.Bot", "agent.", "approvals\n",
                                   "approvals.x", "xapprovals", "secrets", ""])
def test_staff_may_not_join_a_group_no_app_opened(group, django_user_model):
    assert realtime.websocket_staff_group_permissions(group) is None
    superuser = django_user_model.objects.create_superuser("root", password="pw-root-12345")
    assert not realtime.websocket_staff_may_join(group, superuser)


def test_a_group_rule_without_a_permission_is_a_configuration_error():
    with pytest.raises(TypeError):
        realtime.websocket_staff_group_register(r"open-to-all")  # noqa: the keyword is required
    with pytest.raises(ImproperlyConfigured):
        realtime.websocket_staff_group_register(r"open-to-all", permission=())
    assert realtime.websocket_staff_group_permissions("open-to-all") is None


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
