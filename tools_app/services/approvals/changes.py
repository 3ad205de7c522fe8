"""Review / audit modes: file writes held as pending changes, their exact arguments sealed until a person decides."""
from __future__ import annotations

import logging
import uuid

from django.db import transaction
from django.utils import timezone

from goclaw import crypto, events
from goclaw.db import pg_json, pg_text
from goclaw.errors import Conflict, NotFound
from tools_app.base import Tool, ToolContext
from tools_app.choices import PendingChangeStatus
from tools_app.models import Agent, PendingChange
from tools_app.labels import echo
from tools_app.security.scrub import default_scrubber
from tools_app.services.approvals.decision import arguments_hash
from tools_app.services.approvals.identity import identity_store
from tools_app.services.approvals.requests import approval_summary
from tools_app.services.audit import audit_actor, audit_event_record

logger = logging.getLogger("goclaw.approvals")


# --- review / audit: held file changes ---------------------------------------------------------------
def _change_payload(change: PendingChange) -> dict:
    return {"id": str(change.id), "agent": change.agent.key, "tool": change.tool_name, "path": change.path,
            "summary": change.summary, "status": change.status, "session_key": change.session_key}


def pending_change_seal_context(change_id) -> str:
    """Associated data of a held change's sealed arguments: they open only for this purpose and this row."""
    return f"tools_app.pendingchange.arguments:{change_id}"


@transaction.atomic
def pending_change_create(*, agent: Agent, tool: Tool, args: dict, ctx: ToolContext, call_context: dict | None = None) -> PendingChange:
    """Hold a write_file/edit call. The exact arguments (file content may hold credentials) are kept only sealed
    (AES-256-GCM, bound to this row) to apply it on accept; `arguments`, `path` and `summary` are scrubbed copies."""
    summary, _ = approval_summary(tool, args, ctx.workspace.root if ctx.workspace is not None else None)
    display, _ = default_scrubber.scrub_data(args)
    change_id = uuid.uuid4()
    identity, stored_context = identity_store(ctx, call_context or {}, change_id)
    change = PendingChange.objects.create(
        id=change_id, agent=agent, **identity, call_context=pg_json(stored_context), tool_name=tool.name,
        path=echo(str(args.get("path", "")), 4096), arguments=pg_json(display),
        sealed_arguments=crypto.encrypt_json(args, associated_data=pending_change_seal_context(change_id)),
        args_hash=arguments_hash(tool.name, args), summary=pg_text(summary),
    )
    events.publish("pending_change.created", _change_payload(change), ["approvals", events.agent_group(agent.key)])
    return change


@transaction.atomic
def pending_change_claim(*, change_id, accept: bool, actor) -> PendingChange:
    """The pending→accepted/rejected UPDATE that decides a held change exactly once (Conflict for the losers). A
    rejected change's sealed arguments are erased at once."""
    status = PendingChangeStatus.ACCEPTED if accept else PendingChangeStatus.REJECTED
    claim = {"status": status, "decided_at": timezone.now(), "decided_by": actor if getattr(actor, "pk", None) else None}
    if not accept:
        claim["sealed_arguments"] = ""
    claimed = PendingChange.objects.filter(pk=change_id, status=PendingChangeStatus.PENDING).update(**claim)
    change = PendingChange.objects.select_related("agent").filter(pk=change_id).first()
    if change is None:
        raise NotFound("no such pending change", code="pending_change_not_found")
    if not claimed:
        raise Conflict(f"this change is already {change.status}", code="pending_change_already_decided",
                       details={"status": change.status})
    audit_event_record(kind="pending_change.decided", actor=audit_actor(actor), target=str(change.pk), details={
        "agent": change.agent.key, "tool": change.tool_name, "path": change.path, "accept": accept,
        "args_hash": change.args_hash})
    return change


def pending_change_open(change: PendingChange) -> dict:
    """The exact arguments of a held change (DecryptionError when the key changed)."""
    return crypto.decrypt_json(change.sealed_arguments, associated_data=pending_change_seal_context(change.pk))


def pending_change_finish(change: PendingChange, *, status: str, result: str, invocation_id=None) -> PendingChange:
    """Record how an accepted change went (applied, or failed with the message) and erase its sealed arguments:
    only the scrubbed copy and the audit row remain."""
    change.status, change.result, change.invocation_id, change.sealed_arguments = status, result[:10000], invocation_id, ""
    PendingChange.objects.filter(pk=change.pk).update(status=status, result=change.result, invocation_id=invocation_id,
                                                      sealed_arguments="")
    return change


@transaction.atomic
def pending_change_publish_resolved(change: PendingChange) -> None:
    events.publish("pending_change.resolved", _change_payload(change), ["approvals", events.agent_group(change.agent.key)])


def pending_change_ids_for_session(*, agent: Agent, session_key: str) -> list:
    """The pending changes of one agent session, oldest first."""
    return list(PendingChange.objects.filter(agent=agent, session_key=session_key, status=PendingChangeStatus.PENDING)
                .order_by("created_at").values_list("pk", flat=True))
