"""The teams admin: every page renders, a team added or changed in the admin goes through the team services (the
lead's member row exists, teammates are set inline, a taken name or the lead as a teammate is a form error), the
archive / reactivate actions, and the task actions (cancel, retry, unblock) calling the services as the person and
reporting per task, an illegal one as an error message."""
from __future__ import annotations

import pytest
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME

from teams_app.actors import Actor
from teams_app.errors import TeamInvalid
from teams_app.models import Team, TeamEvent, TeamMember, TeamTask
from teams_app.services import mailbox
from teams_app.services import tasks as task_services
from teams_app.services.teams import team_create
from tests.factories import make_agent

pytestmark = pytest.mark.django_db

ADMIN = "/admin/teams_app"
PEOPLE = Actor.system("test set-up")
SETTINGS = {"blocker_escalation": "on", "lock_minutes": "60", "stale_after_minutes": "120",
            "review_stale_after_minutes": "240"}


def inline(rows: list[dict], initial: int = 0) -> dict:
    """The teammates inline's management form and rows."""
    data = {"members-TOTAL_FORMS": str(len(rows)), "members-INITIAL_FORMS": str(initial),
            "members-MIN_NUM_FORMS": "0", "members-MAX_NUM_FORMS": "1000"}
    for i, row in enumerate(rows):
        data.update({f"members-{i}-{key}": value for key, value in row.items()})
    return data


@pytest.fixture
def crew(db):
    return {name: make_agent(key=f"{name}-admin-bot") for name in ["lead", "worker", "reviewer", "spare"]}


@pytest.fixture
def team(crew):
    return team_create(actor=PEOPLE, name="alpha", lead=crew["lead"],
                       members=[(crew["worker"], "member"), (crew["reviewer"], "reviewer")])


def make_task(team, subject="Write the report", **fields):
    return task_services.task_create(actor=PEOPLE, team=team, subject=subject, **fields)


def test_every_board_page_renders(admin_client, crew, team):
    task = make_task(team, subject="<b>bold</b> plan")
    task_services.task_comment(actor=Actor.for_agent(crew["worker"]), task=task, content="first note")
    mailbox.message_send(actor=Actor.for_agent(crew["lead"]), team=team, to=crew["worker"], text="hello there")
    pages = {f"{ADMIN}/team/": ["alpha", "Open the live board"],
             f"{ADMIN}/team/add/": ["Board settings"],
             f"{ADMIN}/team/{team.pk}/change/": ["Open the live board", crew["worker"].key],
             f"{ADMIN}/teamtask/": ["T-001", "&lt;b&gt;bold&lt;/b&gt; plan"],
             f"{ADMIN}/teamtask/{task.pk}/change/": ["first note", "created", "&lt;b&gt;bold&lt;/b&gt; plan"],
             f"{ADMIN}/teamevent/": ["created"],
             f"{ADMIN}/teammessage/": ["hello there"]}
    for path, expected in pages.items():
        response = admin_client.get(path)
        assert response.status_code == 200, path
        html = response.content.decode()
        for text in expected:
            assert text in html, (path, text)
        assert "<b>bold</b>" not in html
    event = TeamEvent.objects.filter(team=team).first()
    assert admin_client.get(f"{ADMIN}/teamevent/{event.pk}/change/").status_code == 200
    assert f'href="/teams/{team.pk}/board/"' in admin_client.get(f"{ADMIN}/team/").content.decode()


def test_the_team_list_shows_open_task_counts(admin_client, team):
    make_task(team)
    make_task(team, subject="second")
    task_services.task_cancel(actor=PEOPLE, task=TeamTask.objects.get(team=team, number=2))
    html = admin_client.get(f"{ADMIN}/team/").content.decode()
    assert '<td class="field-open_tasks">1</td>' in html and '<td class="field-member_count">3</td>' in html


def test_adding_a_team_in_the_admin_creates_the_lead_member_row_and_the_teammates(admin_client, crew):
    response = admin_client.post(f"{ADMIN}/team/add/", {
        "name": "docs", "lead": crew["lead"].pk, "description": "the docs team", **SETTINGS,
        **inline([{"agent": crew["worker"].pk, "role": "member"}, {"agent": crew["reviewer"].pk, "role": "reviewer"}])})
    assert response.status_code == 302, response.content.decode()[:3000]
    team = Team.objects.get(name="docs")
    roles = dict(TeamMember.objects.filter(team=team).values_list("agent__key", "role"))
    assert roles == {crew["lead"].key: "lead", crew["worker"].key: "member", crew["reviewer"].key: "reviewer"}
    assert team.created_by == "user:admin" and team.lead == crew["lead"]


def test_a_taken_name_or_the_lead_as_a_teammate_is_a_form_error(admin_client, crew, team):
    taken = admin_client.post(f"{ADMIN}/team/add/", {"name": "ALPHA", "lead": crew["spare"].pk, **SETTINGS,
                                                     **inline([])})
    assert taken.status_code == 200 and "already exists" in taken.content.decode()
    lead_again = admin_client.post(f"{ADMIN}/team/add/", {
        "name": "beta", "lead": crew["spare"].pk, **SETTINGS, **inline([{"agent": crew["spare"].pk, "role": "member"}])})
    assert lead_again.status_code == 200 and "the team&#x27;s lead" in lead_again.content.decode()
    assert list(Team.objects.values_list("name", flat=True)) == ["alpha"]


def test_changing_a_team_goes_through_the_services(admin_client, crew, team):
    rows = list(TeamMember.objects.filter(team=team).exclude(role="lead").order_by("agent__key"))
    form = {"name": "alpha", "lead": crew["lead"].pk, "description": "", "status": "active", **SETTINGS,
            "lock_minutes": "15",
            **inline([*({"id": row.pk, "team": team.pk, "agent": row.agent_id, "role": row.role} for row in rows),
                      {"agent": crew["spare"].pk, "role": "reviewer"}], initial=len(rows))}
    reviewer_row = next(i for i, row in enumerate(rows) if row.agent_id == crew["reviewer"].pk)
    form[f"members-{reviewer_row}-DELETE"] = "on"
    response = admin_client.post(f"{ADMIN}/team/{team.pk}/change/", form)
    assert response.status_code == 302, response.content.decode()[:3000]
    team.refresh_from_db()
    assert team.lock_minutes == 15
    roles = dict(TeamMember.objects.filter(team=team).values_list("agent__key", "role"))
    assert roles == {crew["lead"].key: "lead", crew["worker"].key: "member", crew["spare"].key: "reviewer"}
    recorded = list(TeamEvent.objects.filter(team=team, event_type="updated").values_list("actor", "data"))
    assert ("user:admin", {"member": crew["spare"].key, "role": "reviewer"}) in recorded
    assert ("user:admin", {"removed": crew["reviewer"].key}) in recorded
    assert any(actor == "user:admin" and data.get("team", {}).get("lock_minutes") == 15 for actor, data in recorded)


def test_archive_and_reactivate_actions(admin_client, team):
    admin_client.post(f"{ADMIN}/team/", {"action": "archive_selected", ACTION_CHECKBOX_NAME: [team.pk]})
    assert Team.objects.get(pk=team.pk).status == "archived"
    with pytest.raises(TeamInvalid, match="archived"):
        make_task(Team.objects.get(pk=team.pk), subject="on an archived board")
    response = admin_client.post(f"{ADMIN}/team/", {"action": "reactivate_selected", ACTION_CHECKBOX_NAME: [team.pk]},
                                 follow=True)
    assert Team.objects.get(pk=team.pk).status == "active"
    assert "Reactivated 1 team(s)." in response.content.decode()


def test_task_actions_call_the_services_as_the_person_and_report_per_task(admin_client, team):
    first, second = make_task(team, subject="one"), make_task(team, subject="two")
    blocked = make_task(team, subject="three", blocked_by=["T-001"])
    response = admin_client.post(f"{ADMIN}/teamtask/", {"action": "cancel_selected",
                                                        ACTION_CHECKBOX_NAME: [first.pk, second.pk]}, follow=True)
    assert "Cancelled: alpha T-001, alpha T-002." in response.content.decode()
    assert set(TeamTask.objects.filter(pk__in=[first.pk, second.pk]).values_list("status", flat=True)) == {"cancelled"}
    assert TeamEvent.objects.filter(task=first, event_type="cancelled", actor="user:admin").exists()
    admin_client.post(f"{ADMIN}/teamtask/", {"action": "retry_selected", ACTION_CHECKBOX_NAME: [first.pk]})
    assert TeamTask.objects.get(pk=first.pk).status == "pending"
    assert TeamEvent.objects.filter(task=first, event_type="retried", actor="user:admin").exists()
    unblocked = admin_client.post(f"{ADMIN}/teamtask/", {"action": "unblock_selected",
                                                         ACTION_CHECKBOX_NAME: [blocked.pk, first.pk]}, follow=True)
    html = unblocked.content.decode()
    assert TeamTask.objects.get(pk=blocked.pk).status == "pending"
    assert TeamEvent.objects.filter(task=blocked, event_type="unblocked", actor="user:admin").exists()
    assert "Unblocked: alpha T-003." in html
    # a pending task cannot be unblocked: the service's sentence as an error message, never a 500
    assert '<li class="error">Alpha T-001: T-001 is pending; only blocked tasks can be unblocked.</li>' in html


def test_tasks_events_and_messages_are_read_only_in_the_admin(admin_client, team):
    task = make_task(team)
    assert admin_client.get(f"{ADMIN}/teamtask/add/").status_code == 403
    before = TeamTask.objects.values().get(pk=task.pk)
    edit = admin_client.post(f"{ADMIN}/teamtask/{task.pk}/change/", {"status": "completed", "subject": "changed"})
    assert edit.status_code == 403
    assert TeamTask.objects.values().get(pk=task.pk) == before
    assert admin_client.get(f"{ADMIN}/teamtask/{task.pk}/delete/").status_code == 403
    assert admin_client.get(f"{ADMIN}/teamevent/add/").status_code == 403
    assert admin_client.get(f"{ADMIN}/teammessage/add/").status_code == 403
    assert admin_client.get(f"{ADMIN}/team/{team.pk}/delete/").status_code == 403
