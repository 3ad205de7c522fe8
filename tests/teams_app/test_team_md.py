"""TEAM.md: generated for team leads only and served with the stored context files by GET /api/v1/agents/<key>/context
(what an agent loop puts in its system prompt)."""
from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from teams_app.actors import Actor
from teams_app.context import team_md
from teams_app.services.tasks import task_create
from teams_app.services.teams import team_create, team_update
from tests.factories import make_agent
from tools_app.services.agents import token_issue

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("counters_reread_only_after_a_change")]  # counts queries
SYSTEM = Actor.system("test")


def context_files(agent) -> dict[str, dict]:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_issue(agent=agent, name='test')[1]}")
    response = client.get(f"/api/v1/agents/{agent.key}/context")
    assert response.status_code == 200, response.content
    return {f["name"]: f for f in response.json()["files"]}


@pytest.fixture
def crew(db):
    lead, alice, rev = make_agent(), make_agent(), make_agent()
    team = team_create(actor=SYSTEM, name="crew", lead=lead, members=[(alice, "member"), (rev, "reviewer")],
                       description="Ship the documentation site")
    return team, lead, alice, rev


def test_the_lead_gets_team_md_with_teammates_roles_board_counts_and_how_to(crew):
    team, lead, alice, rev = crew
    task_create(actor=SYSTEM, team=team, subject="One")
    task_create(actor=SYSTEM, team=team, subject="Two")
    task_create(actor=SYSTEM, team=team, subject="Three", blocked_by=["T-001"])
    files = context_files(lead)
    assert files["TEAM.md"]["source"] == "generated"
    text = files["TEAM.md"]["content"]
    assert "crew" in text and "Ship the documentation site" in text
    assert f"{alice.key} (member)" in text and f"{rev.key} (reviewer)" in text
    assert f"{lead.key} (" not in text  # the lead is not its own teammate
    assert "2 pending" in text and "1 blocked" in text
    for words in ("create", "assignee", "claim", "blocked_by", "review", "approve", "reject", "team_message",
                  "broadcast"):
        assert words in text, words
    assert len(text) < 3000  # it goes into a system prompt


def test_members_reviewers_and_agents_in_no_team_get_no_team_md(crew):
    _, _, alice, rev = crew
    assert "TEAM.md" not in context_files(alice)
    assert "TEAM.md" not in context_files(rev)
    assert "TEAM.md" not in context_files(make_agent())


def test_an_archived_team_drops_out_of_its_leads_team_md(crew):
    team, lead, _, _ = crew
    team_update(actor=SYSTEM, team=team, status="archived")
    assert "TEAM.md" not in context_files(lead)


def test_a_lead_of_two_teams_sees_both_and_is_told_to_name_the_team(crew):
    _, lead, _, _ = crew
    team_create(actor=SYSTEM, name="ops", lead=lead, members=[(make_agent(), "member")], description="Keep it up")
    text = context_files(lead)["TEAM.md"]["content"]
    assert "## Team crew" in text and "## Team ops" in text and "Keep it up" in text
    assert "pass team" in text


def test_team_md_follows_the_board_and_costs_one_query_for_a_non_lead(crew, django_assert_num_queries):
    team, lead, alice, _ = crew
    assert "no tasks yet" in team_md(lead, "")
    task_create(actor=SYSTEM, team=team, subject="New")
    assert "1 pending" in team_md(lead, "")
    with django_assert_num_queries(1):
        assert team_md(alice, "") == ""
    with django_assert_num_queries(3):
        assert team_md(lead, "u-1")
