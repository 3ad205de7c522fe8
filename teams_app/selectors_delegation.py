"""Reads for handoff routes, agent links and delegations (docs/delegation.md): which link governs a delegation,
whom an agent may delegate to (DELEGATION.md), the delegations an agent may see, and the one JSON shape of each."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from goclaw.errors import NotFound
from teams_app.choices import DelegationStatus, LinkDirection, TeamStatus
from teams_app.models import AgentLink, Delegation, HandoffRoute, Team
from tools_app.models import Agent

DELEGATION_FULL_LIST_MAX = 15  # DELEGATION.md lists every target up to this many, else only their keys
DEFAULT_MAX_DELEGATION_LOAD = 5
SEARCH_MAX_RESULTS = 20


# --- links ---------------------------------------------------------------------------------------------------------
def links_between(source: Agent, target: Agent) -> QuerySet[AgentLink]:
    """The links (enabled or not) that could let `source` delegate to (or hand off to) `target`: source → target
    in either direction, or target ↔ source when bidirectional (at most one of each); `governing_link` picks."""
    return AgentLink.objects.filter(Q(source=source, target=target)
                                    | Q(source=target, target=source, direction=LinkDirection.BIDIRECTIONAL))


def governing_link(links: Any, source: Agent) -> AgentLink | None:
    """Of `links_between` rows, the one that decides for `source`: the direct link when it exists, else the reverse
    bidirectional one; None when that link is disabled (a switched-off direct link is not bypassed by the other)."""
    links = list(links)
    link = next((row for row in links if row.source_id == source.pk), links[0] if links else None)
    return link if link is not None and link.enabled else None


def agent_link_for(source: Agent, target: Agent) -> AgentLink | None:
    """The enabled link governing `source` → `target` (the direct one when both exist), or None."""
    return governing_link(links_between(source, target), source)


def link_allows_user(link: AgentLink, user_id: str) -> bool:
    """Deny wins; an empty allow list allows everyone (including calls that name no user)."""
    deny = link.deny_user_ids or []
    allow = link.allow_user_ids or []
    if user_id and user_id in deny:
        return False
    return not allow or (bool(user_id) and user_id in allow)


def max_delegation_load(agent: Agent) -> int:
    """How many running delegations `agent` accepts at once from all sources (`max_delegation_load`, default 5)."""
    value = (agent.other_config or {}).get("max_delegation_load") if isinstance(agent.other_config, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return DEFAULT_MAX_DELEGATION_LOAD
    return value


def teams_led_by(agent: Agent) -> QuerySet[Team]:
    """The active teams `agent` leads (delegating to it puts the work on one of their boards)."""
    return Team.objects.filter(lead=agent, status=TeamStatus.ACTIVE).order_by("name")


@dataclass
class DelegationTarget:
    """One agent the caller may delegate to, through `link`, with the active teams it leads."""

    agent: Agent
    link: AgentLink
    teams: list[Team] = field(default_factory=list)


def delegation_targets(agent: Agent, user_id: str = "") -> list[DelegationTarget]:
    """Whom `agent` may delegate to for `user_id`: enabled links out, and enabled bidirectional links in, to
    enabled agents, whose user lists allow `user_id`; ordered by key (the direct link, even disabled, wins over a
    reverse one)."""
    links = (AgentLink.objects.filter(Q(source=agent) | Q(target=agent, direction=LinkDirection.BIDIRECTIONAL))
             .select_related("source", "target"))
    governing: dict[int, AgentLink] = {}
    for link in links:
        other_id = link.target_id if link.source_id == agent.pk else link.source_id
        if other_id in governing and governing[other_id].source_id == agent.pk:
            continue  # the direct link governs, even switched off
        governing[other_id] = link
    chosen: dict[int, DelegationTarget] = {}
    for other_id, link in governing.items():
        other = link.target if link.source_id == agent.pk else link.source
        if link.enabled and other.enabled and link_allows_user(link, user_id):
            chosen[other_id] = DelegationTarget(other, link)
    if chosen:
        for team in Team.objects.filter(lead_id__in=list(chosen), status=TeamStatus.ACTIVE).order_by("name"):
            chosen[team.lead_id].teams.append(team)
    return sorted(chosen.values(), key=lambda t: t.agent.key)


def delegation_targets_search(agent: Agent, user_id: str, query: str,
                              limit: int = SEARCH_MAX_RESULTS) -> list[DelegationTarget]:
    """The delegation targets whose key, display name or link description contain every word of `query`
    (case-insensitive; LIKE wildcards in the query are matched literally)."""
    words = [w for w in query.split() if w][:10]
    if not words:
        return []
    found = []
    for target in delegation_targets(agent, user_id):
        haystack = " ".join((target.agent.key, target.agent.display_name, target.link.description,
                             *(team.name for team in target.teams))).lower()
        if all(word.lower() in haystack for word in words):
            found.append(target)
    return found[:limit]


# --- delegations ---------------------------------------------------------------------------------------------------
def delegation_ref_parse(ref: Any) -> int | None:
    """"D-12", "d-12", "12" or 12 → 12; anything else → None."""
    if isinstance(ref, bool):
        return None
    if isinstance(ref, int):
        return ref if 0 < ref < 2**63 else None
    if not isinstance(ref, str):
        return None
    text = ref.strip()
    if text[:2].lower() == "d-":
        text = text[2:]
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        return None
    return int(text) or None


def delegations_for_agent(agent: Agent, *, status: str | None = None) -> QuerySet[Delegation]:
    """The delegations `agent` sent or received, newest first."""
    qs = (Delegation.objects.filter(Q(source=agent) | Q(target=agent))
          .select_related("source", "target", "task", "task__team"))
    return qs.filter(status=status) if status else qs


def delegation_list(*, status: str | None = None) -> QuerySet[Delegation]:
    """Every delegation (staff), newest first."""
    qs = Delegation.objects.select_related("source", "target", "task", "task__team")
    return qs.filter(status=status) if status else qs


def delegation_get_for_agent(agent: Agent, ref: Any) -> Delegation:
    """One delegation `agent` sent or received; any other (or a malformed id) is not found, never forbidden."""
    pk = delegation_ref_parse(ref)
    row = delegations_for_agent(agent).filter(pk=pk).first() if pk else None
    if row is None:
        shown = ref if isinstance(ref, (int, str)) else type(ref).__name__
        raise NotFound(f"You have no delegation {str(shown)[:40]!s}: `delegate` action list shows yours.",
                       code="delegation_not_found")
    return row


def delegation_identifier(delegation: Delegation) -> str:
    return f"D-{delegation.pk}"


def delegation_as_dict(delegation: Delegation) -> dict[str, Any]:
    """The one JSON shape of a delegation (API, tool, events)."""
    task = delegation.task
    return {
        "id": delegation_identifier(delegation),
        "source": delegation.source.key,
        "target": delegation.target.key,
        "link": delegation.link_id,
        "status": delegation.status,
        "request": delegation.request,
        "result": delegation.result,
        "user_id": delegation.user_id,
        "team": task.team_id if task else None,
        "task": task.identifier if task else None,
        "task_status": task.status if task else None,
        "created_at": delegation.created_at,
        "finished_at": delegation.finished_at,
    }


def running_delegation_counts(link: AgentLink, target: Agent) -> tuple[int, int]:
    """(running over `link`, running to `target` from every source)."""
    running = Delegation.objects.filter(status=DelegationStatus.RUNNING)
    return running.filter(link=link).count(), running.filter(target=target).count()


# --- links and routes as JSON --------------------------------------------------------------------------------------
def agent_link_list() -> QuerySet[AgentLink]:
    """Every agent link (staff), by source and target key."""
    return AgentLink.objects.select_related("source", "target")


def agent_link_as_dict(link: AgentLink) -> dict[str, Any]:
    """The one JSON shape of an agent link (agent keys, not ids)."""
    return {"id": link.pk, "source": link.source.key, "target": link.target.key, "direction": link.direction,
            "max_concurrent": link.max_concurrent, "allow_user_ids": list(link.allow_user_ids or []),
            "deny_user_ids": list(link.deny_user_ids or []), "description": link.description,
            "enabled": link.enabled, "created_at": link.created_at}


def handoff_route_active(channel: str, chat_id: str, now: datetime | None = None) -> HandoffRoute | None:
    """The unexpired route of one conversation, or None."""
    now = now or timezone.now()
    return (HandoffRoute.objects.select_related("target", "source")
            .filter(channel=channel, chat_id=chat_id)
            .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now)).first())


def handoff_route_list() -> QuerySet[HandoffRoute]:
    """Every stored route, newest first (expired ones included until purged)."""
    return HandoffRoute.objects.select_related("target", "source")


def handoff_route_as_dict(route: HandoffRoute) -> dict[str, Any]:
    """The one JSON shape of a handoff route."""
    return {"id": route.pk, "channel": route.channel, "chat_id": route.chat_id, "agent": route.target.key,
            "from_agent": route.source.key if route.source else None, "reason": route.reason,
            "created_by": route.created_by, "created_at": route.created_at, "expires_at": route.expires_at}


# --- DELEGATION.md -------------------------------------------------------------------------------------------------
def delegation_md(agent: Agent, user_id: str = "") -> str:
    """The generated DELEGATION.md: every target in full up to 15, else their keys and a search hint; "" when the
    agent may delegate to nobody."""
    targets = delegation_targets(agent, user_id)
    if not targets:
        return ""
    how = ('Delegate with the `delegate` tool: {"action": "delegate", "agent": "<key>", "task": "<what to do>"}. '
           'Follow it with {"action": "status", "id": "D-…"} or {"action": "list"}; the result comes back there.')
    lines = ["# Delegation", "", f"You can delegate work to {len(targets)} agent{'s' if len(targets) != 1 else ''}.",
             how, ""]
    if len(targets) > DELEGATION_FULL_LIST_MAX:
        lines.append("Agents: " + ", ".join(t.agent.key for t in targets))
        lines += ["", 'That is too many to describe here: find the right one with {"action": "search", '
                      '"query": "<what you need>"} of the `delegate` tool, which shows each one\'s description.']
        return "\n".join(lines) + "\n"
    for target in targets:
        lines.append(_target_line(target))
    return "\n".join(lines) + "\n"


def _target_line(target: DelegationTarget) -> str:
    name = target.agent.display_name or target.agent.key
    text = f"- **{target.agent.key}** ({name}), up to {target.link.max_concurrent} at once"
    if target.link.description:
        text += f": {' '.join(target.link.description.split())[:300]}"
    if target.teams:
        names = ", ".join(team.name for team in target.teams)
        text += f" (leads team {names}: the work becomes a task on its board"
        text += '; pass "team" to choose one)' if len(target.teams) > 1 else ")"
    return text


def delegation_target_line(target: DelegationTarget) -> str:
    """One target as DELEGATION.md and the `search` action describe it."""
    return _target_line(target)
