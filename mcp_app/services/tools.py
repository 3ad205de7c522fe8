"""Tool-definition pinning (docs/mcp.md, "Pinning"): every listing of a server's tools is compared with the definitions
people (or the first listing) approved. A changed, flagged or new tool is hidden and its calls refused until a reviewer
approves it; this is the defence against "rug-pull" tool poisoning."""
from __future__ import annotations

import difflib
import json
import logging
import re
from typing import Any

from django.db import transaction
from django.utils import timezone

from goclaw.errors import Conflict
from goclaw.events import publish
from mcp_app.choices import ToolStatus
from mcp_app.config import ToolDefinition
from mcp_app.models import MCPServer, MCPTool
from mcp_app.scanner import description_flags
from tools_app.services.policy import actor_name as _user_name
from tools_app.toolsets import tools_changed

logger = logging.getLogger("goclaw.mcp")

EVENT_GROUPS = ["mcp"]
_SYNC_FIELDS = ["description", "input_schema", "definition_hash", "status", "approved_hash", "approved_definition",
                "flags", "present", "last_seen_at", "changed_at"]


class MCPToolNotReviewable(Conflict):
    code = "mcp_tool_not_reviewable"
    http_status = 409


def _actor_name(actor: Any) -> str:
    return actor if isinstance(actor, str) and actor else _user_name(actor)


def _pinned(definition: ToolDefinition, launch_hash: str) -> dict[str, Any]:
    """What approved_definition holds: the definition, plus the launch hash it was pinned with (for the diff)."""
    return {**definition.as_dict(), "launch_hash": launch_hash}


def _listed(tool: MCPTool) -> ToolDefinition:
    return ToolDefinition(name=tool.name, description=tool.description, input_schema=tool.input_schema)


def _event(event_type: str, server: MCPServer, tool: MCPTool, **extra: Any) -> None:
    publish(event_type, {"server": server.name, "server_id": server.pk, "tool": tool.name, "tool_id": tool.pk,
                         "status": tool.status, "present": tool.present,
                         "flags": [flag.get("rule") for flag in tool.flags],
                         "definition_hash": tool.definition_hash[:12], "approved_hash": tool.approved_hash[:12],
                         **extra}, groups=EVENT_GROUPS)


def _next_status(tool: MCPTool, new_hash: str, flags: list[dict]) -> str:
    """A known tool's status after a listing with `new_hash` (the rules of `server_tools_sync`)."""
    if tool.approved_hash and new_hash == tool.approved_hash:
        # The pinned definition again: usable without review, unless it was only trusted on first use (nobody
        # reviewed it) and the scanner now flags it.
        if flags and not tool.reviewed_by:
            return ToolStatus.QUARANTINED
        return ToolStatus.APPROVED
    if new_hash == tool.rejected_hash or (tool.status == ToolStatus.REJECTED and new_hash == tool.definition_hash):
        return ToolStatus.REJECTED  # the very definition a reviewer rejected (even after a detour)
    if tool.status == ToolStatus.PENDING and not flags:
        return ToolStatus.PENDING  # still new and unreviewed, whatever it says now
    return ToolStatus.QUARANTINED


# The MCP spec's tool-name rule (and our column): anything else is left out of the listing, never stored.
TOOL_NAME_RE = re.compile(r"[A-Za-z0-9._-]{1,128}")


@transaction.atomic
def server_tools_sync(*, server_id: int, definitions: list[ToolDefinition], launch_hash: str = "") -> dict[str, list[str]]:
    """Record one successful tools/list of a server and apply the pinning rules:
    - first listing: every tool is pinned and approved (trust on first use, reviewed_by ""), unless flagged;
    - a new tool later: pending when the server has `review_new_tools` (else approved and pinned), quarantined if
      flagged;
    - a known tool whose hash differs from its pin: quarantined (the pin and its definition are kept for the diff);
    - a quarantined (or rejected) tool listed again with its pinned hash: approved again without review, since it is
      the approved definition once more;
    - a rejected tool stays rejected while it lists the rejected definition; a new definition is quarantined;
    - tools missing from the listing are marked absent (status kept), and present again when they come back.
    Serialized per server by a row lock, so concurrent listings from several processes apply one after the other.
    Returns the tool names {"added", "changed", "removed", "quarantined", "pending"}."""
    server = MCPServer.objects.select_for_update().get(pk=server_id)
    first_listing = server.listed_at is None
    now = timezone.now()
    # Locking the tools too: a reviewer's approve (which locks the tool row) never interleaves with this sync.
    existing = {tool.name: tool for tool in MCPTool.objects.select_for_update().filter(server=server)}
    result: dict[str, list[str]] = {"added": [], "changed": [], "removed": [], "quarantined": [], "pending": []}
    usability_changed = False
    created, updated, announce = [], [], []
    listed: dict[str, ToolDefinition] = {}
    for definition in definitions:
        if not isinstance(definition.name, str) or not TOOL_NAME_RE.fullmatch(definition.name):
            logger.warning("MCP server %s lists a tool named %r, which is not a valid tool name; left out",
                           server.name, str(definition.name)[:80])
            continue
        if definition.name in listed:
            logger.warning("MCP server %s lists tool %s twice; the first definition counts", server.name,
                           definition.name)
            continue
        listed[definition.name] = definition

    for name in sorted(listed):
        definition = listed[name]
        new_hash = definition.pin_hash(launch_hash)
        flags = description_flags(definition)
        tool = existing.get(name)
        if tool is None:
            tool = MCPTool(server=server, name=name, description=definition.description,
                           input_schema=definition.input_schema, definition_hash=new_hash, flags=flags,
                           present=True, last_seen_at=now)
            if flags:
                tool.status = ToolStatus.QUARANTINED
            elif first_listing or not server.review_new_tools:
                tool.status, tool.approved_hash = ToolStatus.APPROVED, new_hash
                tool.approved_definition = _pinned(definition, launch_hash)
            else:
                tool.status = ToolStatus.PENDING
            created.append(tool)
            result["added"].append(name)
            usability_changed |= tool.usable
            if tool.status == ToolStatus.QUARANTINED:
                result["quarantined"].append(name)
            elif tool.status == ToolStatus.PENDING:
                result["pending"].append(name)
            continue

        was_usable, old_status, old_hash = tool.usable, tool.status, tool.definition_hash
        tool.status = _next_status(tool, new_hash, flags)
        if new_hash != old_hash:
            tool.changed_at = now
            result["changed"].append(name)
        if tool.status == ToolStatus.APPROVED and not tool.approved_definition:
            tool.approved_definition = _pinned(definition, launch_hash)
        tool.description, tool.input_schema, tool.definition_hash = (definition.description,
                                                                     definition.input_schema, new_hash)
        tool.flags, tool.present, tool.last_seen_at = flags, True, now
        updated.append(tool)
        usability_changed |= was_usable != tool.usable
        newly_held = tool.status in (ToolStatus.QUARANTINED, ToolStatus.PENDING) and tool.status != old_status
        if newly_held:
            result["quarantined" if tool.status == ToolStatus.QUARANTINED else "pending"].append(name)
        if newly_held or (tool.status in (ToolStatus.QUARANTINED, ToolStatus.PENDING) and new_hash != old_hash):
            announce.append(tool)  # a reviewer looking at this tool needs to know its definition moved

    for name in sorted(set(existing) - set(listed)):
        tool = existing[name]
        if tool.present:
            usability_changed |= tool.usable
            tool.present = False
            updated.append(tool)
            result["removed"].append(name)

    if created:
        MCPTool.objects.bulk_create(created)
        announce.extend(t for t in created if t.status != ToolStatus.APPROVED)
    if updated:
        MCPTool.objects.bulk_update(updated, _SYNC_FIELDS)
    server.listed_at = now
    server.save(update_fields=["listed_at"])
    if usability_changed:
        tools_changed()
    for tool in sorted(announce, key=lambda t: t.name):
        _event("mcp.tool_changed", server, tool)
    if result["quarantined"] or result["pending"]:
        logger.warning("MCP server %s: quarantined %s, pending review %s", server.name, result["quarantined"],
                       result["pending"])
    return result


def _launch_hash_of(tool: MCPTool) -> str | None:
    """The launch hash the tool's current listing was hashed with (the server's own command now, or the pinned
    one), or None when neither reproduces the listed hash."""
    from mcp_app.services.servers import server_launch_hash

    listed = _listed(tool)
    candidates = [server_launch_hash(tool.server), (tool.approved_definition or {}).get("launch_hash", ""), ""]
    return next((c for c in candidates if c is not None and listed.pin_hash(c) == tool.definition_hash), None)


@transaction.atomic
def mcp_tool_approve(*, actor, tool: MCPTool, expected_hash: str | None = None) -> MCPTool:
    """Pin the tool's current listed definition and make it usable. Not idempotent on purpose: approving a tool
    that is already approved with this definition raises MCPToolNotReviewable (of two racing reviewers, the second
    learns that the first did it). `expected_hash` (the definition_hash the reviewer looked at) refuses the approval
    when a newer listing arrived meanwhile."""
    locked = MCPTool.objects.select_for_update().select_related("server").get(pk=tool.pk)
    if expected_hash is not None and expected_hash != locked.definition_hash:
        raise MCPToolNotReviewable(f"{locked} changed again since it was shown; review the new definition",
                                   details={"definition_hash": locked.definition_hash})
    if locked.status == ToolStatus.APPROVED and locked.approved_hash == locked.definition_hash:
        raise MCPToolNotReviewable(f"{locked} is already approved with this definition")
    was_usable = locked.usable
    pinned = _listed(locked).as_dict()
    launch_hash = _launch_hash_of(locked)
    if launch_hash is not None:
        pinned["launch_hash"] = launch_hash
    locked.status, locked.approved_hash, locked.approved_definition = (ToolStatus.APPROVED, locked.definition_hash,
                                                                       pinned)
    locked.reviewed_by, locked.reviewed_at = _actor_name(actor), timezone.now()
    if locked.rejected_hash == locked.definition_hash:
        locked.rejected_hash = ""  # a person changed their mind: this definition is the approved one now
    locked.save(update_fields=["status", "approved_hash", "approved_definition", "reviewed_by", "reviewed_at",
                               "rejected_hash"])
    if was_usable != locked.usable:
        tools_changed()
    _event("mcp.tool_reviewed", locked.server, locked, decision="approve", reviewed_by=locked.reviewed_by)
    logger.info("MCP tool %s approved by %s (hash %s)", locked, locked.reviewed_by, locked.definition_hash[:12])
    _copy_into(tool, locked)
    return tool


@transaction.atomic
def mcp_tool_reject(*, actor, tool: MCPTool, note: str = "") -> MCPTool:
    """Hide the tool and refuse its calls while the server lists this definition (remembered as `rejected_hash`,
    also when it comes back after a detour; a different definition comes back quarantined). Rejecting the pinned definition itself drops
    the pin, so no later listing can bring it back without review."""
    locked = MCPTool.objects.select_for_update().select_related("server").get(pk=tool.pk)
    if locked.status == ToolStatus.REJECTED:
        raise MCPToolNotReviewable(f"{locked} is already rejected")
    was_usable = locked.usable
    fields = ["status", "reviewed_by", "reviewed_at", "rejected_hash"]
    locked.rejected_hash = locked.definition_hash
    if locked.approved_hash == locked.definition_hash:
        locked.approved_hash, locked.approved_definition = "", {}
        fields += ["approved_hash", "approved_definition"]
    locked.status, locked.reviewed_by, locked.reviewed_at = ToolStatus.REJECTED, _actor_name(actor), timezone.now()
    locked.save(update_fields=fields)
    if was_usable:
        tools_changed()
    _event("mcp.tool_reviewed", locked.server, locked, decision="reject", reviewed_by=locked.reviewed_by, note=note)
    logger.info("MCP tool %s rejected by %s (hash %s): %s", locked, locked.reviewed_by, locked.definition_hash[:12],
                note)
    _copy_into(tool, locked)
    return tool


def _copy_into(target: MCPTool, source: MCPTool) -> None:
    """The caller's instance reflects the saved row (they passed it in and keep using it)."""
    for field in ("status", "approved_hash", "approved_definition", "reviewed_by", "reviewed_at", "definition_hash",
                  "description", "input_schema", "flags", "present"):
        setattr(target, field, getattr(source, field))


def _unified(old: str, new: str, what: str) -> list[str]:
    return list(difflib.unified_diff(old.splitlines(), new.splitlines(), f"{what} (approved)", f"{what} (listed)",
                                     lineterm=""))


def _pretty(schema: Any) -> str:
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False)


def mcp_tool_diff(tool: MCPTool) -> dict[str, Any]:
    """What changed between the pinned definition and the current listing, for the reviewer: unified diffs of the
    description and of the (key-sorted) input schema, whether the launched command changed (None: unknown), the
    scanner's flags. Empty diffs when nothing is pinned yet (a new tool) or nothing changed."""
    pinned = tool.approved_definition or {}
    diff: dict[str, Any] = {"description": [], "input_schema": [], "launch_changed": False, "flags": tool.flags,
                            "approved_hash": tool.approved_hash, "definition_hash": tool.definition_hash}
    if not pinned or tool.approved_hash == tool.definition_hash:
        return diff
    diff["description"] = _unified(pinned.get("description", ""), tool.description, "description")
    diff["input_schema"] = _unified(_pretty(pinned.get("input_schema", {})), _pretty(tool.input_schema),
                                    "input_schema")
    same_text = (pinned.get("description", "") == tool.description
                 and _pretty(pinned.get("input_schema", {})) == _pretty(tool.input_schema))
    if same_text:
        diff["launch_changed"] = True  # the only other part of the hash
    elif "launch_hash" in pinned:
        diff["launch_changed"] = _listed(tool).pin_hash(pinned["launch_hash"]) != tool.definition_hash
    else:
        diff["launch_changed"] = None
    return diff


def mcp_tool_refusal(tool: MCPTool | None) -> str | None:
    """Why a call to this tool must be refused right now, in words for the model and the audit (None: usable).
    The bridge asks at call time, so a tool quarantined after the catalog was built is still refused."""
    if tool is None:
        return "the server does not offer this tool (it was never listed)"
    if not tool.present:
        return "the server no longer offers this tool"
    if tool.status == ToolStatus.REJECTED:
        return "rejected by a reviewer: this tool's definition was not accepted"
    if tool.status == ToolStatus.PENDING:
        return "a new tool waiting for review: a reviewer must approve it before it can be used"
    if tool.status == ToolStatus.QUARANTINED or tool.definition_hash != tool.approved_hash:
        if tool.approved_hash and tool.definition_hash != tool.approved_hash:
            return ("quarantined: its definition changed since it was approved; a reviewer must approve the new "
                    "definition")
        rules = ", ".join(sorted({flag.get("rule", "?") for flag in tool.flags})) or "unspecified"
        return (f"quarantined: its description contains content aimed at the model ({rules}); a reviewer must "
                "approve it")
    return None
