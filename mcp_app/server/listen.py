"""`subscriptions/listen` (2026-07-28): the stateless era's change notifications. A listen request's response is
the stream: it is acknowledged with what will be delivered, then carries `notifications/tools/list_changed` (and the
prompts / resources kinds the content watches add) whenever what this caller sees changes.

The SDK's own ListenHandler fans one in-process event bus out to every stream; goclaw's catalogs are per agent and
user and change in any process (a policy edited in the admin, a skill added by another replica), so each stream
instead polls the fingerprints of what its caller sees, through the same generation-keyed memo the session era's
watcher uses (a check costs no query while nothing moved). A stream ends when the token it was opened with stops
granting access, like the session era's GET stream.

What can be watched is data: `WATCHES` (one entry per event kind) and `RESOURCE_WATCH` (per subscribed URI)."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

import anyio
from mcp.shared.subscriptions import (PromptsListChanged, ResourcesListChanged, ResourceUpdated, ServerEvent,
                                      ToolsListChanged, event_to_notification)
from mcp_types import (SubscriptionFilter, SubscriptionsAcknowledgedNotification,
                       SubscriptionsAcknowledgedNotificationParams, SubscriptionsListenRequestParams,
                       SubscriptionsListenResult)

from goclaw.errors import ApplicationError
from mcp_app.server import services
from mcp_app.server.context import call_context
from mcp_app.server.handlers import caller_of, catalog_fingerprint, in_thread, session_context
from tools_app.services.agents import token_active

logger = logging.getLogger("goclaw.mcp.server")
SUBSCRIPTION_ID_META_KEY = "io.modelcontextprotocol/subscriptionId"
WATCH_SECONDS = 1.0
MAX_RESOURCE_SUBSCRIPTIONS = 100  # URIs one stream may watch


def tools_fingerprint(caller: services.Caller) -> str:
    """What the caller's tools/list would answer, as a digest."""
    return catalog_fingerprint(caller.agent, call_context(session_context(caller)))


@dataclass(frozen=True)
class Watch:
    """One kind of change a listen stream can ask for: whether its filter asks, and the digest that moves."""

    wanted: Callable[[SubscriptionFilter], bool]
    fingerprint: Callable[[services.Caller], str]
    event: ServerEvent


WATCHES: list[Watch] = [Watch(lambda f: bool(f.tools_list_changed), tools_fingerprint, ToolsListChanged())]
# Per subscribed resource URI: (caller, uri) -> digest of what resources/read would answer. Set by the content module.
RESOURCE_WATCH: list[Callable[[services.Caller, str], str]] = []


def watch_register(*, prompts: Callable | None = None, resources: Callable | None = None,
                   resource: Callable | None = None) -> None:
    """Add the content watches (prompts list, resources list, one resource) the server offers."""
    if prompts is not None:
        WATCHES.append(Watch(lambda f: bool(f.prompts_list_changed), prompts, PromptsListChanged()))
    if resources is not None:
        WATCHES.append(Watch(lambda f: bool(f.resources_list_changed), resources, ResourcesListChanged()))
    if resource is not None:
        RESOURCE_WATCH[:] = [resource]


def honored(requested: SubscriptionFilter) -> SubscriptionFilter:
    """What this server delivers of what was asked (the acknowledgement): the kinds it watches, bounded URIs."""
    kinds = {watch.event.__class__: watch.wanted(requested) for watch in WATCHES}
    uris = list(dict.fromkeys(requested.resource_subscriptions or ()))[:MAX_RESOURCE_SUBSCRIPTIONS] if RESOURCE_WATCH else []
    return SubscriptionFilter(tools_list_changed=True if kinds.get(ToolsListChanged) else None,
                              prompts_list_changed=True if kinds.get(PromptsListChanged) else None,
                              resources_list_changed=True if kinds.get(ResourcesListChanged) else None,
                              resource_subscriptions=uris or None)


def _digests(caller: services.Caller, watches: list[Watch], uris: list[str]) -> dict[Any, str | None]:
    """The current digest of every watched thing (None when it cannot be computed: an invalid context)."""
    def digest(compute, *args):
        try:
            return compute(caller, *args)
        except ApplicationError:
            return None

    found: dict[Any, str | None] = {id(watch): digest(watch.fingerprint) for watch in watches}
    for uri in uris:
        found[uri] = digest(RESOURCE_WATCH[0], uri)
    return found


def _still_allowed(caller: services.Caller) -> bool:
    return token_active(caller.token.pk) is not None


async def listen(ctx, params: SubscriptionsListenRequestParams) -> SubscriptionsListenResult:
    """Serve one listen stream until the client disconnects or its token stops granting access."""
    caller = caller_of(ctx)
    subscription_id = ctx.request_id
    meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription_id}
    accepted = honored(params.notifications)
    watches = [watch for watch in WATCHES if watch.wanted(accepted)]
    uris = list(accepted.resource_subscriptions or ())
    seen = await in_thread(_digests, caller, watches, uris)
    await ctx.session.send_notification(SubscriptionsAcknowledgedNotification(
        params=SubscriptionsAcknowledgedNotificationParams(notifications=accepted, _meta=meta)),
        related_request_id=subscription_id)
    while True:
        await anyio.sleep(WATCH_SECONDS)
        try:
            if not await in_thread(_still_allowed, caller):
                break
            now = await in_thread(_digests, caller, watches, uris)
        except Exception:  # the database is unavailable: end the stream, the client listens again
            logger.exception("MCP listen check failed")
            break
        events = [watch.event for watch in watches if now[id(watch)] != seen[id(watch)]]
        events += [ResourceUpdated(uri=uri) for uri in uris if now[uri] != seen[uri]]
        seen = now
        for event in events:
            await ctx.session.send_notification(event_to_notification(event, meta), related_request_id=subscription_id)
    return SubscriptionsListenResult(_meta=meta)
