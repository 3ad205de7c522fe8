"""Approval notifications (docs/approval-notifications.md): deliveries are created with the approval request (same
transaction), sent by the worker outside any transaction (claimed with SKIP LOCKED), retried with capped exponential
backoff, then failed. Messages tell and link; they carry no action: deciding needs a staff session in the queue."""
from __future__ import annotations

import hashlib
import hmac
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, QuerySet
from django.urls import reverse
from django.utils import timezone

from goclaw import crypto
from goclaw.errors import ValidationError
from tools_app.choices import ApprovalStatus
from tools_app.models import ApprovalRequest
from tools_app.models.notifications import DeliveryStatus, NotificationChannel, NotificationDelivery, NotificationKind
from tools_app.security.scrub import default_scrubber

logger = logging.getLogger("goclaw.notifications")

MAX_ATTEMPTS = 6
BACKOFF_BASE_SECONDS = 10  # 10, 20, 40, 80, 160 s between the six attempts (capped below)
BACKOFF_CAP_SECONDS = 600
LEASE_SECONDS = 60  # a claimed row is not claimed again this long (a worker that died mid-send is retried after it)
CONNECT_TIMEOUT, TOTAL_TIMEOUT = 3.0, 5.0
SIGNATURE_HEADER = "X-Goclaw-Signature-256"
QUEUE_URL_NAME = "admin:tools_app_approvalrequest_queue"
TASK = "tools_app.tasks.send_approval_notifications"


def secret_seal_context(pk: Any) -> str:
    """The associated data a channel's signing secret is sealed with: it binds the ciphertext to this row and field."""
    return f"tools_app.NotificationChannel:{pk}:secret"


# --- channels ------------------------------------------------------------------------------------------------------
@transaction.atomic
def notification_channel_save(*, actor, channel: NotificationChannel, secret: str | None = None,
                              clear_secret: bool = False) -> NotificationChannel:
    """Create or update a channel. `secret` (write-only) replaces the signing secret, sealed to the row;
    `clear_secret` removes it. Only http(s) URLs; tool names as a list of strings."""
    if not channel.url.lower().startswith(("http://", "https://")):
        raise ValidationError("the webhook URL must start with http:// or https://", code="notification_bad_url")
    if problem := channel_url_problem(channel.url, allow_private_network=channel.allow_private_network):
        raise ValidationError(f"the webhook URL is refused: {problem}", code="notification_url_refused")
    names = channel.tool_names or []
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ValidationError("tool names must be a list of tool names", code="notification_bad_tools")
    channel.full_clean(exclude=["agents", "secret_sealed"], validate_unique=True)
    channel.save()
    if clear_secret or secret:
        channel.secret_sealed = (crypto.encrypt_bytes(secret.encode(), associated_data=secret_seal_context(channel.pk))
                                 if secret else "")
        channel.save(update_fields=["secret_sealed"])
    logger.info("notification channel %s saved by %s", channel.name, getattr(actor, "pk", None))
    return channel


@transaction.atomic
def notification_channel_delete(*, actor, channels: QuerySet) -> int:
    """Delete channels with their deliveries (the approval requests stay)."""
    names = list(channels.values_list("name", flat=True))
    channels.delete()
    logger.info("notification channels %s deleted by %s", names, getattr(actor, "pk", None))
    return len(names)


PRIVATE_NETWORK_HINT = "allow private networks on this channel to reach it"


def _target(*, allow_private_network: bool):
    from goclaw import outbound  # the HTTP client loads on the first send, not at startup

    return outbound.Target(allow_private=allow_private_network, hint=PRIVATE_NETWORK_HINT)


def channel_url_problem(url: str, *, allow_private_network: bool) -> str | None:
    """Early feedback when a channel is saved: a literal loopback / private / metadata address (in any notation) or
    a loopback name is refused unless the channel allows private networks. The send itself is checked at dial time
    by goclaw.outbound on the address actually connected to (a name that resolves to one is refused then)."""
    from goclaw import outbound

    return outbound.url_problem(url, target=_target(allow_private_network=allow_private_network))


def _secret(channel: NotificationChannel) -> bytes | None:
    if not channel.secret_sealed:
        return None
    return crypto.decrypt_bytes(channel.secret_sealed, associated_data=secret_seal_context(channel.pk))


def _covers(channel: NotificationChannel, agent_ids: set[int], req: ApprovalRequest) -> bool:
    return (not agent_ids or req.agent_id in agent_ids) and (not channel.tool_names or req.tool_name in channel.tool_names)


# --- deliveries: created with the request ------------------------------------------------------------------------
def notification_deliveries_create(req: ApprovalRequest) -> int:
    """One pending delivery per enabled channel covering this request, in the caller's transaction (the request and
    its notifications commit together); an immediate send is queued after commit. Returns how many."""
    channels = list(NotificationChannel.objects.filter(enabled=True).prefetch_related("agents"))
    rows = [NotificationDelivery(channel=c, approval=req, next_attempt_at=req.requested_at) for c in channels
            if _covers(c, {a.pk for a in c.agents.all()}, req)]
    if rows:
        NotificationDelivery.objects.bulk_create(rows)
        transaction.on_commit(_enqueue_send)
    return len(rows)


def _enqueue_send() -> None:
    """Ask the worker to send now (people hear within a second or two); the 15 s schedule catches what this misses."""
    try:
        from django_q.tasks import async_task

        async_task(TASK)
    except Exception:
        logger.exception("could not queue the approval notification send; the schedule will send it")


@transaction.atomic
def notification_deliveries_retry(*, actor, deliveries: QuerySet) -> int:
    """Send failed (or skipped) deliveries again from the first attempt; pending and sent ones are left alone."""
    count = deliveries.filter(status__in=[DeliveryStatus.FAILED, DeliveryStatus.SKIPPED]).update(
        status=DeliveryStatus.PENDING, attempts=0, next_attempt_at=timezone.now())
    if count:
        logger.info("%s notification deliveries retried by %s", count, getattr(actor, "pk", None))
        transaction.on_commit(_enqueue_send)
    return count


# --- the message ---------------------------------------------------------------------------------------------------
def public_base_url() -> str:
    """Where people reach the admin: GOCLAW_PUBLIC_URL when set, else the web server's own host and port."""
    base = getattr(settings, "PUBLIC_URL", "") or f"http://{settings.HOST}:{settings.PORT}"
    return base.rstrip("/")


def approval_link(approval_id: Any) -> str:
    """The request's row in the live queue (staff login required; the queue is where decisions are taken)."""
    return f"{public_base_url()}{reverse(QUEUE_URL_NAME)}#approval-{approval_id}"


def _why_lines(details: dict, reason: str) -> list[str]:
    why = details.get("why") if isinstance(details.get("why"), dict) else {}
    lines = [str(x) for x in why.get("lines", []) if isinstance(x, str)]
    return lines or ([reason] if reason else [])


def _risk_line(details: dict) -> str:
    risk = details.get("risk") if isinstance(details.get("risk"), dict) else {}
    line = risk.get("line")
    return line if isinstance(line, str) else ""


def approval_message(req: ApprovalRequest, *, test: bool = False) -> dict:
    """What every channel says about one request: agent, tool, summary (scrubbed at creation), why, risk, expiry and
    the link. Scrubbed once more as a whole: nothing sealed or secret may leave in a notification."""
    details = req.details if isinstance(req.details, dict) else {}
    message = {
        "event": "approval.test" if test else "approval.requested",
        "approval": {
            "id": str(req.id), "agent": req.agent.key, "tool": req.tool_name, "summary": req.summary[:3000],
            "reason": req.reason, "why": _why_lines(details, req.reason), "risk": _risk_line(details),
            "risk_level": (details.get("risk") or {}).get("level", "") if isinstance(details.get("risk"), dict) else "",
            "requested_at": req.requested_at.isoformat(), "expires_at": req.expires_at.isoformat(),
            "url": approval_link(req.id),
        },
        "sent_at": timezone.now().isoformat(),
    }
    return default_scrubber.scrub_data(message)[0]


_MENTIONS = ("@channel", "@here", "@everyone")


def slack_escape(text: str) -> str:
    """Agent text made inert in Slack mrkdwn: & < > escaped (so no <!channel>, <@U…> or <url|label> survives) and
    bare @channel/@here/@everyone broken with a zero-width space."""
    text = str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    for mention in _MENTIONS:
        text = text.replace(mention, "@\u200b" + mention[1:])
    return text


def _code_block(text: str, limit: int = 1500) -> str:
    text = text if len(text) <= limit else text[:limit] + "…"
    return "```" + slack_escape(text).replace("```", "`\u200b``") + "```"


def slack_payload(message: dict) -> dict:
    """A Slack incoming-webhook body: `text` (notifications, fallbacks) and `blocks`; every piece of agent text is
    escaped, the summary sits in a code block, the only link is the queue's."""
    a = message["approval"]
    title = ("Test notification from goclaw" if message["event"] == "approval.test"
             else f"Approval needed: {slack_escape(a['agent'])} wants to run {slack_escape(a['tool'])}")
    why = "\n".join("• " + slack_escape(line) for line in a["why"]) or "(no reason recorded)"
    fields = [f"*Why*\n{why}"]
    if a["risk"]:
        fields.append(f"*Risk*\n{slack_escape(a['risk'])}")
    fields.append(f"*Expires* {slack_escape(a['expires_at'])}")
    blocks = [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"*{title}*"}},
        {"type": "section", "text": {"type": "mrkdwn", "text": _code_block(a["summary"])}},
        {"type": "section", "text": {"type": "mrkdwn", "text": "\n".join(fields)[:2900]}},
        {"type": "section", "text": {"type": "mrkdwn",
                                     "text": f"<{slack_escape(a['url'])}|Open the approval queue> (staff sign-in required)"}},
    ]
    return {"text": f"{title}: {slack_escape(a['summary'].splitlines()[0][:200] if a['summary'] else '')}",
            "blocks": blocks, "unfurl_links": False, "unfurl_media": False}


def _body(channel: NotificationChannel, message: dict) -> bytes:
    payload = slack_payload(message) if channel.kind == NotificationKind.SLACK else message
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


def signature(secret: bytes, body: bytes) -> str:
    """The header value a receiver recomputes: sha256=<hex HMAC-SHA256 of the exact body bytes>."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


# --- sending -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SendResult:
    ok: bool
    status_code: int | None = None
    error: str = ""


def _short_error(channel: NotificationChannel, text: str) -> str:
    """An error people may read: the URL (often a credential) replaced, scrubbed, one line, short."""
    text = str(text).replace(channel.url, channel.url_origin)
    return default_scrubber.scrub(" ".join(text.split()))[0][:300]


def _post(channel: NotificationChannel, message: dict, *, delivery_id: Any = "") -> SendResult:
    """One POST through the outbound guard (the address dialled is checked against the channel's
    allow_private_network), short timeouts, no redirects followed, no proxies from the environment; 2xx is sent."""
    from goclaw import outbound

    try:
        secret = _secret(channel)
    except crypto.DecryptionError:
        return SendResult(False, None, "the signing secret cannot be decrypted; set it again")
    body = _body(channel, message)
    headers = {"Content-Type": "application/json", "User-Agent": "goclaw-notifications/1",
               "X-Goclaw-Event": message["event"], "X-Goclaw-Delivery": str(delivery_id)}
    if secret:
        headers[SIGNATURE_HEADER] = signature(secret, body)
    try:
        with outbound.client(_target(allow_private_network=channel.allow_private_network), follow_redirects=False,
                             timeout=outbound.Timeout(TOTAL_TIMEOUT, connect=CONNECT_TIMEOUT)) as client:
            response = client.post(channel.url, content=body, headers=headers)
    except outbound.HTTPError as exc:
        refused = outbound.refusal_of(exc)
        return SendResult(False, None, _short_error(channel, str(refused) if refused else f"{type(exc).__name__}: {exc}"))
    if 200 <= response.status_code < 300:
        return SendResult(True, response.status_code)
    return SendResult(False, response.status_code, _short_error(channel, f"HTTP {response.status_code}: {response.text[:200]}"))


def backoff(attempts: int) -> timedelta:
    """The wait after the `attempts`-th failed attempt: doubling from BACKOFF_BASE_SECONDS, capped."""
    return timedelta(seconds=min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2 ** max(0, attempts - 1)))


@transaction.atomic
def _claim_due(now: datetime, limit: int) -> list[int]:
    """Take up to `limit` due deliveries (rows other workers hold are skipped): count the attempt and lease them."""
    ids = list(NotificationDelivery.objects.select_for_update(skip_locked=True)
               .filter(status=DeliveryStatus.PENDING, next_attempt_at__lte=now)
               .order_by("next_attempt_at").values_list("pk", flat=True)[:limit])
    if ids:
        NotificationDelivery.objects.filter(pk__in=ids).update(
            attempts=F("attempts") + 1, next_attempt_at=now + timedelta(seconds=LEASE_SECONDS))
    return ids


def _finish(delivery: NotificationDelivery, **fields) -> bool:
    """Record one attempt's outcome, unless someone changed the row meanwhile (a retry, another worker)."""
    return bool(NotificationDelivery.objects.filter(pk=delivery.pk, status=DeliveryStatus.PENDING,
                                                    attempts=delivery.attempts).update(**fields))


def _send_one(delivery: NotificationDelivery, now: datetime) -> bool:
    req = delivery.approval
    if req.status != ApprovalStatus.PENDING or req.expires_at <= now:
        state = req.status if req.status != ApprovalStatus.PENDING else "expired"
        _finish(delivery, status=DeliveryStatus.SKIPPED, last_error=f"the request was already {state}")
        return False
    if not delivery.channel.enabled:
        _finish(delivery, status=DeliveryStatus.SKIPPED, last_error="the channel was disabled")
        return False
    if delivery.attempts > MAX_ATTEMPTS:  # its last attempt never reported back (the worker died)
        _finish(delivery, status=DeliveryStatus.FAILED, last_error=f"gave up after {MAX_ATTEMPTS} attempts")
        return False
    result = _post(delivery.channel, approval_message(req), delivery_id=delivery.pk)
    if result.ok:
        _finish(delivery, status=DeliveryStatus.SENT, sent_at=timezone.now(), last_status_code=result.status_code,
                last_error="")
        return True
    failed = delivery.attempts >= MAX_ATTEMPTS
    _finish(delivery, status=DeliveryStatus.FAILED if failed else DeliveryStatus.PENDING,
            next_attempt_at=now + backoff(delivery.attempts), last_status_code=result.status_code,
            last_error=result.error)
    logger.warning("approval notification %s on channel %s failed (attempt %s%s): %s", delivery.pk,
                   delivery.channel.name, delivery.attempts, ", giving up" if failed else "", result.error)
    return False


def notification_deliveries_send_due(*, now: datetime | None = None, limit: int = 50) -> int:
    """Send every due delivery (the worker: queued after each request and every 15 s). Claims in a short
    transaction, posts outside any, records each outcome with a conditional update. Returns how many were sent."""
    now = now or timezone.now()
    sent = 0
    while True:
        ids = _claim_due(now, limit)
        if not ids:
            return sent
        rows = NotificationDelivery.objects.select_related("channel", "approval", "approval__agent").filter(pk__in=ids)
        for delivery in rows:
            try:
                sent += _send_one(delivery, now)
            except Exception:  # one broken row must not stop the others; it is retried after its lease
                logger.exception("approval notification %s failed unexpectedly", delivery.pk)
        if len(ids) < limit:
            return sent


def notification_channel_test(*, channel: NotificationChannel) -> SendResult:
    """Post a sample message (marked as a test, about no real request) to check a channel's URL and signature."""
    from tools_app.models import Agent

    now = timezone.now()
    sample = ApprovalRequest(agent=Agent(key="example-agent"), tool_name="exec", summary="exec in /workspace:\n$ echo hello",
                             reason="test notification: nothing is waiting", requested_at=now,
                             expires_at=now + timedelta(minutes=2),
                             details={"why": {"lines": ["This is a test notification sent from the admin."]},
                                      "risk": {"line": "Risk (low): reads only", "level": "low"}})
    return _post(channel, approval_message(sample, test=True), delivery_id="test")
