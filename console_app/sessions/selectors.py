"""Reads the session pages need beyond runtime_app.selectors: a session's sub-sessions as a tree, the approval
requests its tool results name, where its messages end."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from django.db.models import Max

from goclaw.errors import Conflict
from runtime_app.models import Session, SessionMessage
from tools_app.models import ApprovalRequest

TREE_MAX_LEVELS = 8  # subagent depth is capped far lower (max_spawn_depth); this only bounds the queries
TREE_MAX_NODES = 500


@dataclass
class SessionNode:
    """One sub-session in the tree and its own sub-sessions."""

    session: Session
    children: list["SessionNode"] = field(default_factory=list)


def session_tree(session: Session) -> tuple[list[SessionNode], bool]:
    """The sub-sessions of `session`, recursively, oldest first at each level (one query per level), and whether
    the tree was cut (more than TREE_MAX_NODES sessions or TREE_MAX_LEVELS levels)."""
    roots: list[SessionNode] = []
    children_of: dict[Any, list[SessionNode]] = {session.pk: roots}
    level, remaining = [session.pk], TREE_MAX_NODES
    for _ in range(TREE_MAX_LEVELS):
        if not level or remaining <= 0:
            break
        rows = list(Session.objects.filter(parent_id__in=level)
                    .only("id", "key", "parent_id", "label", "status", "depth", "iterations", "created_at")
                    .order_by("created_at", "id")[: remaining + 1])
        level = []
        for row in rows[:remaining]:
            if row.pk in children_of:  # a parent chain is acyclic by construction; never loop if it were not
                continue
            node = SessionNode(row)
            children_of[row.parent_id].append(node)
            children_of[row.pk] = node.children
            level.append(row.pk)
        remaining -= len(rows)
    if remaining < 0:
        return roots, True
    return roots, bool(level) and Session.objects.filter(parent_id__in=level).exists()


def approvals_by_id(ids: Iterable[Any]) -> dict[Any, ApprovalRequest]:
    """Status and decision of the approval requests named by a page of tool results (one query)."""
    wanted = {i for i in ids if i}
    if not wanted:
        return {}
    rows = ApprovalRequest.objects.filter(pk__in=wanted).only("id", "status", "decision", "decided_at")
    return {row.pk: row for row in rows}


def session_pending_approval(session: Session) -> ApprovalRequest | None:
    """The approval request a parked session waits on (whatever its status now), or None."""
    if not session.waiting_approval_id:
        return None
    return ApprovalRequest.objects.filter(pk=session.waiting_approval_id).first()


def session_waiting_approval_get(session: Session, approval_id: Any) -> ApprovalRequest:
    """The approval request `session` waits on now, if that is `approval_id`: a decision made from a session's page
    only ever decides the call that page showed (Conflict if the session moved on meanwhile)."""
    if session.waiting_approval_id is None or str(session.waiting_approval_id) != str(approval_id):
        raise Conflict("this session no longer waits for that approval request", code="approval_not_waiting")
    return ApprovalRequest.objects.get(pk=session.waiting_approval_id)


def session_last_seq(session: Session) -> int:
    """The number of the session's last message (0 when it has none)."""
    return SessionMessage.objects.filter(session=session).aggregate(m=Max("seq"))["m"] or 0
