"""The caller identity of a held call: labels in the columns, the real values sealed when they differ, so the call
resumes exactly as it was asked."""
from __future__ import annotations

import logging


from goclaw import crypto
from goclaw.db import pg_text
from tools_app.calls import CallContext, Grant, ToolCall
from tools_app.base import ToolContext
from tools_app.labels import labels_of

logger = logging.getLogger("goclaw.approvals")


# Caller-chosen ids that may look like anything (a credential included): stored as labels, sealed when they differ.
IDENTITY_FIELDS = ("user_id", "session_key", "channel", "chat_id")


def call_context_of(call: ToolCall) -> dict:
    """The rest of the call's context (what else decided its catalog), stored so a resumed call is checked in the
    same context; the identity fields go through `identity_store`."""
    stored = call.context.stored()
    return {name: value for name, value in stored.items() if name not in IDENTITY_FIELDS and name != "request_id"}


def identity_seal_context(row_id) -> str:
    """Associated data of a held call's sealed identity: it opens only for this row (key rotation rebuilds it too)."""
    return f"goclaw:call-identity:{row_id}"


def identity_store(ctx: ToolContext, call_context: dict, row_id) -> tuple[dict, dict]:
    """(columns, call_context) to store for a held call: the scrubbed labels of the caller-chosen ids (user,
    session, channel, chat), and — only when a label differs from the real value (an id that looks like a
    credential) — the real values sealed (AES-256-GCM, bound to the row) so the call resumes exactly."""
    labels = labels_of(ctx)
    real = {name: getattr(ctx.call, name) for name in IDENTITY_FIELDS}
    shown = {name: getattr(labels, name) for name in IDENTITY_FIELDS}
    context = {**call_context, "chat_id": shown["chat_id"]}
    if real != shown:
        context["sealed_identity"] = crypto.encrypt_json(real, associated_data=identity_seal_context(row_id))
    columns = {"user_id": pg_text(shown["user_id"][:255]), "session_key": pg_text(shown["session_key"][:255]),
               "channel": pg_text(shown["channel"][:64])}
    return columns, context


def call_identity(row) -> dict:
    """The real user id, session key, channel and chat id of a held call (unsealed when they were sealed)."""
    context = row.call_context or {}
    if context.get("sealed_identity"):
        return crypto.decrypt_json(context["sealed_identity"], associated_data=identity_seal_context(row.pk))
    return {"user_id": row.user_id, "session_key": row.session_key, "channel": row.channel,
            "chat_id": context.get("chat_id", "")}


def held_call(row, arguments: dict, grant: Grant) -> ToolCall:
    """The call a held row (approval request, pending change) stands for, in its original context, carrying the
    person's decision."""
    context = {**(row.call_context or {}), **call_identity(row)}
    context.pop("sealed_identity", None)
    return ToolCall(row.agent, row.tool_name, arguments, context=CallContext.from_stored(context), grant=grant)
