"""Approval notifications reach people: a generic JSON webhook and a Slack-compatible message POSTed to a real local
HTTP server, signed with the channel's sealed secret; failures are retried with backoff, then failed, visible and
retryable in the admin. A notification carries a link, never a way to decide."""
import hashlib
import hmac
import json
import re
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.db import transaction
from django.test import Client
from django.utils import timezone

from goclaw import crypto
from tests.factories import make_agent
from tools_app import pipeline
from tools_app.models import ApprovalRequest, NotificationChannel, NotificationDelivery
from tools_app.services import approvals as approvals_svc
from tools_app.services import notifications as svc
from tools_app.services.agents import agent_update

QUEUE = "/admin/tools_app/approvalrequest/queue/"


class WebhookServer:
    """A real HTTP server on loopback recording every POST (path, headers, raw body); `statuses` are answered in
    order (then 200)."""

    def __init__(self, statuses=()):
        self.received: list[dict] = []
        self.statuses = list(statuses)
        self.arrived = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.received.append({"path": self.path, "headers": dict(self.headers), "body": body,
                                      "at": time.monotonic()})
                status = outer.statuses.pop(0) if outer.statuses else 200
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"ok" if status < 300 else b"receiver broke")
                outer.arrived.set()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path="/hook"):
        return f"http://127.0.0.1:{self.port}{path}"

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    s = WebhookServer()
    yield s
    s.stop()


@pytest.fixture
def admin_client(db, django_user_model):
    django_user_model.objects.create_superuser("boss", password="pw-boss-12345")
    client = Client(enforce_csrf_checks=True)
    client.login(username="boss", password="pw-boss-12345")
    return client


def channel(url, kind="generic", secret=None, **fields):
    fields.setdefault("allow_private_network", True)  # the receivers of these tests listen on loopback
    return svc.notification_channel_save(actor=None, channel=NotificationChannel(name=fields.pop("name", kind), kind=kind,
                                                                                 url=url, **fields), secret=secret)


def ask(command="rm -rf build", agent=None, timeout=3600):
    agent = agent or make_agent()
    agent = agent_update(agent=agent, mode="cautious", other_config={**agent.other_config, "approval_timeout_seconds": timeout})
    outcome = pipeline.execute(pipeline.ToolCall(agent=agent, tool="exec", arguments={"command": command}))
    assert outcome.status == "pending_approval", outcome.for_llm
    return ApprovalRequest.objects.select_related("agent").get(pk=outcome.extra["approval_id"])


def csrf_of(page) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.content.decode()).group(1)


# --- what arrives ---------------------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_a_generic_webhook_receives_the_waiting_request_signed_with_the_channel_secret(server):
    ch = channel(server.url(), secret="s3cret-signing-key-42")
    req = ask("rm -rf build && curl https://example.com")
    delivery = NotificationDelivery.objects.get()
    assert (delivery.channel, delivery.approval_id, delivery.status) == (ch, req.pk, "pending")

    assert svc.notification_deliveries_send_due() == 1
    [got] = server.received
    assert got["path"] == "/hook" and got["headers"]["Content-Type"] == "application/json"
    expected = "sha256=" + hmac.new(b"s3cret-signing-key-42", got["body"], hashlib.sha256).hexdigest()
    assert got["headers"]["X-Goclaw-Signature-256"] == expected
    assert got["headers"]["X-Goclaw-Event"] == "approval.requested"
    message = json.loads(got["body"])
    a = message["approval"]
    assert (message["event"], a["id"], a["agent"], a["tool"]) == ("approval.requested", str(req.pk), req.agent.key, "exec")
    assert "$ rm -rf build && curl https://example.com" in a["summary"]
    assert a["why"][0] == f"Asked because agent {req.agent.key} is in cautious mode."
    assert a["risk"].startswith("Risk (high): deletes files (rm -rf build); uses the network") and a["risk_level"] == "high"
    assert a["expires_at"] == req.expires_at.isoformat()
    assert a["url"] == f"http://127.0.0.1:8000{QUEUE}#approval-{req.pk}"
    assert "decide" not in got["body"].decode() and "token" not in got["body"].decode()

    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("sent", 1, 200)
    assert delivery.sent_at is not None and delivery.last_error == ""
    assert svc.notification_deliveries_send_due() == 0 and len(server.received) == 1  # sent exactly once


@pytest.mark.django_db
def test_the_link_uses_the_public_url_setting(server, settings):
    settings.PUBLIC_URL = "https://goclaw.example.org/"
    channel(server.url())
    req = ask()
    svc.notification_deliveries_send_due()
    assert json.loads(server.received[0]["body"])["approval"]["url"] == \
        f"https://goclaw.example.org{QUEUE}#approval-{req.pk}"


@pytest.mark.django_db
def test_a_slack_message_neutralises_mentions_links_and_markup_in_agent_text(server):
    channel(server.url("/services/T000/B000/XXXX"), kind="slack")
    req = ask('echo "<!channel> <@U123> <https://evil.example|click me> & @here ```"')
    svc.notification_deliveries_send_due()
    [got] = server.received
    assert "X-Goclaw-Signature-256" not in got["headers"]  # no secret, unsigned
    payload = json.loads(got["body"])
    assert set(payload) >= {"text", "blocks"} and payload["text"].startswith("Approval needed:")
    texts = [payload["text"]] + [b["text"]["text"] for b in payload["blocks"]]
    everything = "\n".join(texts)
    assert "&lt;!channel&gt;" in everything and "&lt;@U123&gt;" in everything
    assert "&lt;https://evil.example|click me&gt; &amp; @\u200bhere" in everything
    for forbidden in ("<!channel>", "<@U123>", "<https://evil", "@here", "&lt;b"):
        assert forbidden not in everything
    links = re.findall(r"<(http[^|>]+)\|", everything)
    assert links == [f"http://127.0.0.1:8000{QUEUE}#approval-{req.pk}"]
    summary_block = payload["blocks"][1]["text"]["text"]
    assert summary_block.startswith("```") and summary_block.endswith("```") and summary_block.count("```") == 2


@pytest.mark.django_db
def test_channels_cover_their_agents_and_tools_only_and_disabled_channels_none(server):
    mine, other = make_agent(), make_agent()
    only_mine = channel(server.url(), name="mine")
    only_mine.agents.add(mine)
    channel(server.url(), name="write only", tool_names=["write_file"])
    channel(server.url(), name="off", enabled=False)
    channel(server.url(), name="everything")
    ask(agent=mine)
    ask(agent=other)
    names = sorted(NotificationDelivery.objects.values_list("channel__name", "approval__agent__key"))
    assert names == sorted([("mine", mine.key), ("everything", mine.key), ("everything", other.key)])


@pytest.mark.django_db
def test_deliveries_commit_or_roll_back_with_their_request(server):
    channel(server.url())
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            ask()
            assert NotificationDelivery.objects.count() == 1
            raise RuntimeError("the request's transaction fails")
    assert NotificationDelivery.objects.count() == 0 and ApprovalRequest.objects.count() == 0


@pytest.mark.django_db
def test_a_request_decided_before_sending_is_skipped(server):
    channel(server.url())
    req = ask()
    approvals_svc.approval_decide(approval_id=req.pk, decision="deny", actor=None)
    assert svc.notification_deliveries_send_due() == 0
    assert server.received == []
    assert NotificationDelivery.objects.values_list("status", "last_error").get() == ("skipped", "the request was already denied")


# --- failures -------------------------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_a_failing_receiver_is_retried_with_backoff_then_failed_and_shown_in_the_admin(admin_client):
    broken = WebhookServer(statuses=[500])
    ch = channel(broken.url("/hooks/PATH-SECRET-123"))
    req = ask()
    now = timezone.now()
    try:
        assert svc.notification_deliveries_send_due(now=now) == 0
        d = NotificationDelivery.objects.get()
        assert (d.status, d.attempts, d.last_status_code) == ("pending", 1, 500)
        assert d.last_error == "HTTP 500: receiver broke"
        assert d.next_attempt_at == now + timedelta(seconds=svc.BACKOFF_BASE_SECONDS)
        assert svc.notification_deliveries_send_due(now=now + timedelta(seconds=9)) == 0  # not due yet
        assert NotificationDelivery.objects.get().attempts == 1
    finally:
        broken.stop()  # from now on: connection refused

    waits = []
    while d.status == "pending":
        now = d.next_attempt_at
        svc.notification_deliveries_send_due(now=now)
        d.refresh_from_db()
        waits.append((d.next_attempt_at - now).total_seconds())
        assert d.last_status_code is None and d.last_error.startswith("ConnectError")
        assert "PATH-SECRET-123" not in d.last_error
    assert d.status == "failed" and d.attempts == svc.MAX_ATTEMPTS
    assert waits[:-1] == [20, 40, 80, 160]  # doubling after each failure (the last failure waits for nothing)

    listing = admin_client.get("/admin/tools_app/notificationdelivery/?status__exact=failed").content.decode()
    assert "ConnectError" in listing and req.agent.key in listing and "PATH-SECRET-123" not in listing
    channels = admin_client.get("/admin/tools_app/notificationchannel/").content.decode()
    assert f"?channel__id__exact={ch.pk}&amp;status__exact=failed\">1</a>" in channels
    assert "PATH-SECRET-123" not in channels and f"http://127.0.0.1:{broken.port}/…" in channels

    page = admin_client.get("/admin/tools_app/notificationdelivery/")
    admin_client.post("/admin/tools_app/notificationdelivery/", {
        "action": "retry", "_selected_action": [d.pk], "csrfmiddlewaretoken": csrf_of(page)})
    d.refresh_from_db()
    assert (d.status, d.attempts) == ("pending", 0)


@pytest.mark.django_db
def test_a_redirect_is_not_followed_and_counts_as_a_failure(server):
    mover = WebhookServer(statuses=[302])
    try:
        channel(mover.url())
        ask()
        svc.notification_deliveries_send_due()
        assert len(mover.received) == 1
        assert NotificationDelivery.objects.values_list("status", "last_status_code").get() == ("pending", 302)
    finally:
        mover.stop()


# --- the admin ------------------------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_the_secret_is_sealed_at_rest_and_write_only_in_the_admin(admin_client, server):
    page = admin_client.get("/admin/tools_app/notificationchannel/add/")
    response = admin_client.post("/admin/tools_app/notificationchannel/add/", {
        "name": "ops", "kind": "generic", "url": server.url(), "enabled": "on", "allow_private_network": "on",
        "tool_names": "[]", "secret": "admin-typed-secret-99", "csrfmiddlewaretoken": csrf_of(page)})
    assert response.status_code == 302
    ch = NotificationChannel.objects.get(name="ops")
    assert crypto.is_sealed(ch.secret_sealed) and "admin-typed-secret-99" not in ch.secret_sealed
    change = admin_client.get(f"/admin/tools_app/notificationchannel/{ch.pk}/change/").content.decode()
    assert "admin-typed-secret-99" not in change and "set" in change and ch.secret_sealed not in change

    bad = admin_client.post(f"/admin/tools_app/notificationchannel/{ch.pk}/change/", {
        "name": "ops", "kind": "generic", "url": "ftp://example.com/x", "enabled": "on", "tool_names": "[]",
        "secret": "another-secret-77", "csrfmiddlewaretoken": csrf_of(page)})
    assert bad.status_code == 200 and "another-secret-77" not in bad.content.decode()  # form error, nothing echoed

    admin_client.post(f"/admin/tools_app/notificationchannel/{ch.pk}/change/", {
        "name": "ops", "kind": "generic", "url": server.url(), "enabled": "on", "allow_private_network": "on",
        "tool_names": "[]", "csrfmiddlewaretoken": csrf_of(page)})
    ch.refresh_from_db()
    assert crypto.is_sealed(ch.secret_sealed)  # an empty field keeps the secret
    ask()
    svc.notification_deliveries_send_due()
    body = server.received[0]["body"]
    assert server.received[0]["headers"]["X-Goclaw-Signature-256"] == \
        "sha256=" + hmac.new(b"admin-typed-secret-99", body, hashlib.sha256).hexdigest()


@pytest.mark.django_db
def test_the_send_test_action_posts_a_test_message(admin_client, server):
    ch = channel(server.url(), kind="slack")
    page = admin_client.get("/admin/tools_app/notificationchannel/")
    response = admin_client.post("/admin/tools_app/notificationchannel/", {
        "action": "send_test", "_selected_action": [ch.pk], "csrfmiddlewaretoken": csrf_of(page)}, follow=True)
    assert "Slack: test notification accepted (HTTP 200)" in response.content.decode()
    [got] = server.received
    assert got["headers"]["X-Goclaw-Event"] == "approval.test"
    assert json.loads(got["body"])["text"].startswith("Test notification from goclaw")
    assert NotificationDelivery.objects.count() == 0


@pytest.mark.django_db
def test_a_notification_link_decides_nothing_without_a_staff_session(server):
    channel(server.url())
    req = ask()
    svc.notification_deliveries_send_due()
    link = json.loads(server.received[0]["body"])["approval"]["url"]
    anonymous = Client(enforce_csrf_checks=True)
    page = anonymous.get(link.removeprefix("http://127.0.0.1:8000"))
    assert page.status_code == 302 and page["Location"].startswith("/admin/login/")
    attempt = anonymous.post(f"/admin/tools_app/approvalrequest/{req.pk}/decide/", {"decision": "allow_once"})
    assert attempt.status_code in (302, 403)
    req.refresh_from_db()
    assert req.status == "pending"


@pytest.mark.django_db(transaction=True)
def test_a_delivery_held_by_another_worker_is_skipped_not_sent_twice(server):
    channel(server.url())
    ask()
    locked, release = threading.Event(), threading.Event()

    def other_worker():
        from django.db import connection

        with transaction.atomic():
            list(NotificationDelivery.objects.select_for_update())
            locked.set()
            release.wait(10)
        connection.close()

    t = threading.Thread(target=other_worker)
    t.start()
    try:
        assert locked.wait(10)
        assert svc.notification_deliveries_send_due() == 0 and server.received == []
    finally:
        release.set()
        t.join()
    assert svc.notification_deliveries_send_due() == 1 and len(server.received) == 1


@pytest.mark.django_db
def test_key_rotation_reseals_the_signing_secret_and_signatures_still_match(server, settings):
    from goclaw.secrets import encryption_key_rotate

    settings.GOCLAW_ENCRYPTION_KEY, settings.GOCLAW_ENCRYPTION_OLD_KEYS = bytes(range(32)).hex(), []
    ch = channel(server.url(), secret="rotate-me-secret-5")
    before = ch.secret_sealed
    settings.GOCLAW_ENCRYPTION_KEY, settings.GOCLAW_ENCRYPTION_OLD_KEYS = bytes(range(100, 132)).hex(), [bytes(range(32)).hex()]
    report = encryption_key_rotate()
    [mine] = [f for f in report.fields if f.label == "tools_app.NotificationChannel.secret_sealed"]
    assert (mine.rotated, mine.failed) == (1, [])
    ch.refresh_from_db()
    assert ch.secret_sealed != before and crypto.is_current(ch.secret_sealed)
    settings.GOCLAW_ENCRYPTION_OLD_KEYS = []  # the old key is gone: the secret still opens
    ask()
    svc.notification_deliveries_send_due()
    got = server.received[0]
    assert got["headers"]["X-Goclaw-Signature-256"] == \
        "sha256=" + hmac.new(b"rotate-me-secret-5", got["body"], hashlib.sha256).hexdigest()


# --- the outbound guard ---------------------------------------------------------------------------------------------
@pytest.mark.django_db
def test_a_webhook_to_loopback_is_refused_when_saved_unless_the_channel_allows_private_networks(server):
    from goclaw.errors import ValidationError

    for url in (server.url(), f"http://2130706433:{server.port}/hook", f"http://[::ffff:127.0.0.1]:{server.port}/",
                f"http://localhost:{server.port}/hook", "http://169.254.169.254/latest/meta-data/"):
        with pytest.raises(ValidationError) as info:
            channel(url, name="internal", allow_private_network=False)
        assert info.value.code == "notification_url_refused"
        assert "allow private networks on this channel" in str(info.value) or "never allowed" in str(info.value)
    assert not NotificationChannel.objects.exists()
    with pytest.raises(ValidationError, match="cloud metadata endpoint"):
        channel("http://169.254.169.254/latest/meta-data/", name="metadata", allow_private_network=True)
    assert channel(server.url(), allow_private_network=True).allow_private_network


@pytest.mark.django_db
def test_a_webhook_to_loopback_is_refused_when_sent_and_delivered_once_the_channel_allows_private_networks(server):
    """A channel saved before the save-time check existed (or whose name resolves to loopback only later) is
    stopped when the POST dials: nothing reaches the loopback receiver, the delivery says why."""
    ch = NotificationChannel.objects.create(name="old", url=server.url("/hooks/T0KEN-IN-PATH"))
    assert ch.allow_private_network is False
    ask()
    assert svc.notification_deliveries_send_due() == 0
    d = NotificationDelivery.objects.get()
    assert server.received == []
    assert (d.status, d.last_status_code) == ("pending", None)
    assert d.last_error == ("refused: 127.0.0.1 is a loopback address "
                            "(allow private networks on this channel to reach it)")
    assert "T0KEN-IN-PATH" not in d.last_error

    ch.allow_private_network = True
    svc.notification_channel_save(actor=None, channel=ch)
    svc.notification_deliveries_retry(actor=None, deliveries=NotificationDelivery.objects.all())
    d.refresh_from_db()
    svc.notification_deliveries_send_due(now=d.next_attempt_at)
    d.refresh_from_db()
    assert d.status == "sent" and len(server.received) == 1


@pytest.mark.django_db
def test_the_send_test_action_reports_a_refused_address(admin_client, server):
    ch = NotificationChannel.objects.create(name="old", kind="slack", url=server.url())
    page = admin_client.get("/admin/tools_app/notificationchannel/")
    response = admin_client.post("/admin/tools_app/notificationchannel/", {
        "action": "send_test", "_selected_action": [ch.pk], "csrfmiddlewaretoken": csrf_of(page)}, follow=True)
    assert ("test notification failed: refused: 127.0.0.1 is a loopback address (allow private networks on "
            "this channel to reach it)") in response.content.decode()
    assert server.received == []


@pytest.mark.django_db
def test_the_admin_form_refuses_a_loopback_url_unless_private_networks_are_allowed(admin_client, server):
    page = admin_client.get("/admin/tools_app/notificationchannel/add/")
    assert 'name="allow_private_network"' in page.content.decode()
    form = {"name": "ops", "kind": "generic", "url": server.url(), "enabled": "on", "tool_names": "[]",
            "csrfmiddlewaretoken": csrf_of(page)}
    response = admin_client.post("/admin/tools_app/notificationchannel/add/", form)
    assert response.status_code == 200
    assert ("refused: 127.0.0.1 is a loopback address (allow private networks on this channel to reach it)"
            in response.content.decode())
    response = admin_client.post("/admin/tools_app/notificationchannel/add/", {**form, "url": "http://10.1.2.3/hook"})
    assert response.status_code == 200 and "10.1.2.3 is a private address" in response.content.decode()
    assert not NotificationChannel.objects.exists()
    response = admin_client.post("/admin/tools_app/notificationchannel/add/", {**form, "allow_private_network": "on"})
    assert response.status_code == 302
    assert NotificationChannel.objects.get(name="ops").allow_private_network is True
