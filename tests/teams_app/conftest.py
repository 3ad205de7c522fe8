"""Team fixtures every teams_app test may reuse: a team `board` led by `lead`, with two members (`worker`,
`worker2`), a `reviewer`, an `outsider` agent in no team, and the matching actors."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from teams_app.actors import Actor


@pytest.fixture
def crew(db):
    """A team with a lead, two members and a reviewer (plus an agent outside it), and their actors."""
    from teams_app.services.teams import team_create
    from tests.factories import make_agent

    lead, worker, worker2, reviewer, outsider = (make_agent() for _ in range(5))
    team = team_create(actor=Actor.system("test"), name=f"crew-{lead.key}", lead=lead,
                       members=[(worker, "member"), (worker2, "member"), (reviewer, "reviewer")])
    return SimpleNamespace(
        team=team, lead=lead, worker=worker, worker2=worker2, reviewer=reviewer, outsider=outsider,
        as_lead=Actor.for_agent(lead), as_worker=Actor.for_agent(worker), as_worker2=Actor.for_agent(worker2),
        as_reviewer=Actor.for_agent(reviewer), as_outsider=Actor.for_agent(outsider),
        person=Actor("user", "staff-person"), system=Actor.system("test"))


@pytest.fixture
def team(crew):
    return crew.team


@pytest.fixture
def make_task(crew):
    """Create a task on the crew's board as the lead: make_task("subject", assignee=…, blocked_by=[…], …)."""
    from teams_app.services.tasks import task_create

    def make(subject: str = "Write the report", **kwargs):
        kwargs.setdefault("actor", crew.as_lead)
        return task_create(team=crew.team, subject=subject, **kwargs)

    return make
