"""TEAM.md: a generated context file for team leads (served by the context API of P10 with the stored files).
A lead reads, per team it leads, who its teammates are, how to run the board and the mailbox, and the board's
counts now. Members get no TEAM.md: their tool errors and the board itself tell them what they need."""
from __future__ import annotations

from typing import Any

TEAM_MD = "TEAM.md"
DESCRIPTION_MAX_CHARS = 600  # a long team description is cut: this text goes into a system prompt
MEMBERS_SHOWN = 30

_HOW_TO = """\
How to run the board (tool team_tasks; tasks are T-001, T-002, …):
- create {subject, description} leaves the task open for any member to claim; add assignee (a member's key) to \
give it to one member, who claims it. You never claim tasks yourself.
- blocked_by ["T-001", …] holds a task until those complete; it then returns to pending by itself.
- Members report progress and submit work with review; you (or a reviewer) approve, or reject with text saying \
what to fix.
- list / get / search to follow the work; assign, cancel, retry, update to steer. A member's blocker comment fails \
its task (and tells you, when the team escalates blockers).
- Mailbox (tool team_message): send {to, text}, broadcast {text} to every teammate, read for your unread messages."""


def team_md(agent: Any, user_id: str) -> str:
    """TEAM.md for `agent`: one section per active team it leads, then how to use the board; "" for anyone else
    (one query for a non-lead, three for a lead whatever the number of teams)."""
    from django.db.models import Count

    from teams_app.choices import TeamStatus
    from teams_app.models import Team, TeamMember, TeamTask

    teams = list(Team.objects.filter(lead=agent, status=TeamStatus.ACTIVE).order_by("name"))
    if not teams:
        return ""
    members: dict[int, list[tuple[str, str]]] = {team.pk: [] for team in teams}
    for team_id, key, role in (TeamMember.objects.filter(team__in=teams).exclude(agent=agent)
                               .order_by("team_id", "role", "agent__key")
                               .values_list("team_id", "agent__key", "role")):
        members[team_id].append((key, role))
    counts: dict[int, dict[str, int]] = {team.pk: {} for team in teams}
    for row in (TeamTask.objects.filter(team__in=teams).values("team_id", "status").annotate(n=Count("id"))
                .order_by()):
        counts[row["team_id"]][row["status"]] = row["n"]
    several = len(teams) > 1
    lines = [f"# {TEAM_MD}", ""]
    lines.append(f"You lead {len(teams)} teams; pass team (its name) to team_tasks and team_message." if several
                 else f"You lead the team {teams[0].name}.")
    for team in teams:
        lines += ["", f"## Team {team.name}"]
        description = " ".join(team.description.split())
        if description:
            if len(description) > DESCRIPTION_MAX_CHARS:
                description = description[:DESCRIPTION_MAX_CHARS - 1] + "…"
            lines.append(description)
        shown = members[team.pk][:MEMBERS_SHOWN]
        if shown:
            more = len(members[team.pk]) - len(shown)
            lines.append("Teammates: " + ", ".join(f"{key} ({role})" for key, role in shown)
                         + (f", and {more} more" if more > 0 else ""))
        else:
            lines.append("Teammates: none yet (a person adds them).")
        lines.append(f"Board now: {_board_counts(counts[team.pk])}.")
    lines += ["", _HOW_TO]
    return "\n".join(lines) + "\n"


def _board_counts(counts: dict[str, int]) -> str:
    from teams_app.choices import TaskStatus

    parts = [f"{counts[status]} {status}" for status in TaskStatus.values if counts.get(status)]
    return ", ".join(parts) if parts else "no tasks yet"


def register() -> None:
    """Called from TeamsAppConfig.ready(): TEAM.md joins every agent's context (non-empty for leads only)."""
    from tools_app.selectors_context import context_file_provider_register

    context_file_provider_register(TEAM_MD, team_md)
