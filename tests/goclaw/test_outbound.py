"""The outbound guard (goclaw/outbound.py): every outbound request of goclaw dials through it. Real local HTTP(S)
servers started here are the targets; a loopback server reached means the guard let the request through. Names are
resolved by a resolver the test passes to the guard (its `Target.resolver`), never by real DNS."""
from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx2
import pytest

from goclaw import outbound
from goclaw.outbound import Target

HINT = "allow private networks on this test target to reach it"


class LocalServer:
    """A real HTTP server on a loopback address; records what reached it. `redirect_to` answers 302 to it."""

    def __init__(self, host: str = "127.0.0.1", *, redirect_to: str | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        self.requests: list[dict] = []
        self.sni: list[str | None] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                owner.requests.append({"path": self.path, "host": self.headers.get("Host"),
                                       "via_proxy": self.path.startswith("http")})
                if redirect_to:
                    self.send_response(302)
                    self.send_header("Location", redirect_to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                body = b"reached " + self.headers.get("Host", "").encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        if tls is not None:
            tls.sni_callback = lambda sock, name, ctx: self.sni.append(name)
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.host, self.port = host, self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, host: str | None = None, path: str = "/", scheme: str = "http") -> str:
        return f"{scheme}://{host or self.host}:{self.port}{path}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    running = LocalServer()
    yield running
    running.stop()


def get(target: Target, url: str, **kwargs) -> httpx2.Response:
    with outbound.client(target, timeout=5, **kwargs) as client:
        return client.get(url)


def refused(target: Target, url: str, **kwargs) -> str:
    """The refusal message of a request the guard must stop (fails the test if it was sent)."""
    with pytest.raises(httpx2.ConnectError) as info:
        get(target, url, **kwargs)
    why = outbound.refusal_of(info.value)
    assert why is not None, f"not refused by the guard: {info.value}"
    return str(why)


class Resolver:
    """A name service the test controls: `answers[name]` is a list of answers, one per lookup (the last repeats)."""

    def __init__(self, **answers: list[list[str]]) -> None:
        self.answers = {name.replace("_", "-") + ".invalid": list(a) for name, a in answers.items()}
        self.calls: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        answers = self.answers[host]
        return answers.pop(0) if len(answers) > 1 else answers[0]


# --- loopback at dial time ------------------------------------------------------------------------------------------
def test_a_request_to_loopback_is_refused_at_dial_time_and_sent_when_the_target_allows_private_networks(server):
    message = refused(Target(hint=HINT), server.url())
    assert message == f"refused: 127.0.0.1 is a loopback address ({HINT})"
    assert server.requests == []

    assert get(Target(allow_private=True), server.url()).text == f"reached 127.0.0.1:{server.port}"
    assert len(server.requests) == 1


def test_the_async_client_is_guarded_the_same_way(server):
    async def fetch(target: Target) -> str:
        async with outbound.async_client(target, timeout=5) as client:
            return (await client.get(server.url())).text

    with pytest.raises(httpx2.ConnectError) as info:
        asyncio.run(fetch(Target(hint=HINT)))
    assert "127.0.0.1 is a loopback address" in str(outbound.refusal_of(info.value))
    assert server.requests == []
    assert asyncio.run(fetch(Target(allow_private=True))) == f"reached 127.0.0.1:{server.port}"


def test_a_name_that_resolves_to_loopback_is_refused_when_dialled_not_only_when_spelled_as_an_address(server):
    names = Resolver(internal=[["127.0.0.1"]])
    message = refused(Target(hint=HINT, resolver=names), server.url("internal.invalid"))
    assert message == f"refused: internal.invalid resolves to 127.0.0.1, a loopback address ({HINT})"
    assert server.requests == []


@pytest.mark.parametrize("host", ["2130706433", "0x7f000001", "0x7f.1", "0x7f.0.0.1", "127.1", "127.0.1",
                                  "017700000001", "127.0.0.1.", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]",
                                  "[0:0:0:0:0:ffff:7f00:1]"])
def test_loopback_in_every_spelling_the_resolver_accepts_is_refused_and_really_is_loopback(server, host):
    assert "a loopback address" in refused(Target(), server.url(host))
    assert server.requests == []
    # the same spelling, allowed, reaches the loopback server: it really meant loopback
    assert get(Target(allow_private=True), server.url(host)).status_code == 200


@pytest.mark.parametrize("host", ["0", "0.0.0.0", "[::]", "LOCALHOST", "localhost.", "api.localhost"])
def test_the_unspecified_address_and_loopback_names_are_refused(server, host):
    refused(Target(), server.url(host))
    assert server.requests == []


@pytest.mark.parametrize("host", ["0177.0.0.1", "127.000.000.001", "0251.0376.0251.0376", "0x7F.0x00.0x00.0x01"])
def test_octal_and_zero_padded_forms_are_judged_as_the_resolver_reads_them(host):
    """httpx2 itself refuses some of these URLs; any client that passes them on meets the guard's reading."""
    with pytest.raises(outbound.OutboundRefused):
        outbound.checked_addresses(host, 80, Target())


# --- the rule ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("address,why", [
    ("10.1.2.3", "a private address"), ("172.16.0.1", "a private address"), ("192.168.1.1", "a private address"),
    ("100.64.0.1", "a carrier-grade NAT address"), ("100.127.255.254", "a carrier-grade NAT address"),
    ("169.254.1.1", "a link-local address"), ("0.0.0.0", "an unspecified"), ("0.1.2.3", "an unspecified"),
    ("224.0.0.1", "a multicast address"), ("255.255.255.255", "the broadcast address"),
    ("240.0.0.1", "a reserved address"), ("192.0.2.10", "a documentation address"),
    ("198.51.100.1", "a documentation address"), ("203.0.113.9", "a documentation address"),
    ("198.18.0.1", "a benchmarking address"), ("192.0.0.8", "an IETF protocol address"),
    ("::1", "a loopback address"), ("::", "the unspecified address"), ("fe80::1", "a link-local address"),
    ("fc00::1", "a unique local"), ("fd12:3456::1", "a unique local"), ("fec0::1", "a site-local address"),
    ("ff02::1", "a multicast address"), ("2001:db8::1", "a documentation address"), ("100::1", "a discard-only"),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"), ("::127.0.0.1", "a reserved address"),
    ("::ffff:10.0.0.1", "a private address (10.0.0.1, embedded)"),
    ("64:ff9b::7f00:1", "a loopback address (127.0.0.1, embedded)"),
    ("64:ff9b::a00:1", "a private address (10.0.0.1, embedded)"),
    ("2002:c0a8:0101::1", "a private address (192.168.1.1, embedded)"),
    ("2002:7f00:1::", "a loopback address (127.0.0.1, embedded)"),
    ("64:ff9b:1::a00:1", "a local NAT64 address"),
])
def test_private_reserved_and_special_addresses_are_refused_with_the_reason(address, why):
    problem = outbound.address_problem(ipaddress.ip_address(address))
    assert problem is not None and why in problem, (address, problem)
    assert outbound.address_problem(ipaddress.ip_address(address), allow_private=True) is None


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "93.184.215.14", "2606:4700:4700::1111",
                                     "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:0808:0808::1", "100.63.255.255",
                                     "100.128.0.1", "172.32.0.1", "11.0.0.1"])
def test_public_addresses_pass(address):
    assert outbound.address_problem(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize("url", ["http://169.254.169.254/latest/meta-data/", "http://[::ffff:169.254.169.254]/",
                                 "http://[::ffff:a9fe:a9fe]/", "http://2852039166/", "http://0xa9fea9fe/",
                                 "http://0xa9.0xfe.0xa9.0xfe/", "http://169.254.43518/", "http://[fd00:ec2::254]/",
                                 "http://[64:ff9b::a9fe:a9fe]/", "http://169.254.170.2/v2/credentials",
                                 "http://100.100.100.200/latest/", "http://168.63.129.16/", "http://metadata/",
                                 "http://metadata.google.internal/computeMetadata/v1/", "http://METADATA.GOOG./"])
def test_cloud_metadata_is_refused_even_for_targets_that_allow_private_networks(url):
    message = refused(Target(allow_private=True), url)
    assert "metadata" in message or "credentials" in message or "Azure" in message or "pod identity" in message
    assert message.endswith("(never allowed)")


def test_a_name_that_resolves_to_the_metadata_address_is_refused_even_when_private_networks_are_allowed():
    names = Resolver(meta_alias=[["169.254.169.254"]])
    assert "169.254.169.254, the cloud metadata endpoint" in refused(Target(allow_private=True, resolver=names),
                                                                     "http://meta-alias.invalid/")


def test_every_address_a_name_resolves_to_is_checked_not_only_the_first():
    names = Resolver(mixed=[["93.184.215.14", "2606:4700::1", "127.0.0.1"]])
    with pytest.raises(outbound.OutboundRefused, match="mixed.invalid resolves to 127.0.0.1, a loopback address"):
        outbound.checked_addresses("mixed.invalid", 80, Target(resolver=names))


def test_a_name_that_does_not_resolve_is_a_connection_error_not_a_refusal():
    with pytest.raises(httpx2.ConnectError) as info:
        get(Target(), "http://nothing-here.invalid/")
    assert outbound.refusal_of(info.value) is None and "does not resolve" in str(info.value)


# --- DNS rebinding: one lookup, and the connection goes to the address that was checked -------------------------
def test_the_connection_goes_to_the_address_the_guard_checked_without_a_second_lookup(server):
    """The name answers 127.0.0.1 (where the server listens) on the first lookup and 127.0.0.2 (where nothing
    listens) on every later one, as a rebinding name would. The request reaches the server: the guard connected to
    the address of its one lookup (a client resolving again, or through the system resolver, would fail)."""
    names = Resolver(rebind=[["127.0.0.1"], ["127.0.0.2"]])
    response = get(Target(allow_private=True, resolver=names), server.url("rebind.invalid"))
    assert response.text == f"reached rebind.invalid:{server.port}"
    assert names.calls == ["rebind.invalid"]


def test_a_rebinding_name_is_refused_at_the_lookup_the_connection_uses(server):
    """First lookup (a save-time check, say) public, then loopback: the dial checks its own lookup."""
    names = Resolver(rebind=[["93.184.215.14"], ["127.0.0.1"]])
    assert outbound.url_problem(server.url("rebind.invalid"), target=Target(resolver=names), resolve=True) is None
    assert "resolves to 127.0.0.1, a loopback address" in refused(Target(resolver=names), server.url("rebind.invalid"))
    assert server.requests == []


# --- redirects ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("location", ["http://169.254.169.254/latest/meta-data/iam/", "http://[fd00:ec2::254]/",
                                      "http://metadata.google.internal/"])
def test_every_redirect_hop_is_checked_when_redirects_are_followed(location):
    mover = LocalServer(redirect_to=location)
    try:
        message = refused(Target(allow_private=True), mover.url(), follow_redirects=True)
        assert "metadata" in message
        assert len(mover.requests) == 1
    finally:
        mover.stop()


def test_redirects_are_not_followed_unless_the_caller_asks(server):
    mover = LocalServer(redirect_to=server.url())
    try:
        response = get(Target(allow_private=True), mover.url())
        assert response.status_code == 302 and server.requests == []
    finally:
        mover.stop()


# --- proxies --------------------------------------------------------------------------------------------------------
def test_proxy_variables_of_the_environment_cannot_route_around_the_guard(server, monkeypatch):
    proxy = LocalServer()
    try:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
            monkeypatch.setenv(name, proxy.url())
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        refused(Target(), server.url())
        assert get(Target(allow_private=True), server.url()).status_code == 200
        assert proxy.requests == [] and len(server.requests) == 1
    finally:
        proxy.stop()


def test_a_client_cannot_be_given_its_own_transport_or_proxy():
    for option in ({"proxy": "http://127.0.0.1:9"}, {"transport": httpx2.HTTPTransport()}, {"trust_env": True},
                   {"mounts": {}}):
        with pytest.raises(TypeError):
            outbound.client(Target(), **option)


# --- TLS keeps the host name ----------------------------------------------------------------------------------------
def _certificate(name: str):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def test_tls_sends_the_host_name_and_verifies_the_certificate_against_it_while_dialling_the_checked_address(tmp_path):
    cert_pem, key_pem = _certificate("tls-host.invalid")
    (tmp_path / "cert.pem").write_bytes(cert_pem)
    (tmp_path / "key.pem").write_bytes(key_pem)
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    tls_server = LocalServer(tls=server_tls)
    try:
        names = Resolver(tls_host=[["127.0.0.1"]], other_host=[["127.0.0.1"]])
        target = Target(allow_private=True, resolver=names)
        trust = ssl.create_default_context(cadata=cert_pem.decode())
        url = tls_server.url("tls-host.invalid", scheme="https")
        assert get(target, url, verify=trust).text == f"reached tls-host.invalid:{tls_server.port}"
        assert tls_server.sni == ["tls-host.invalid"]
        # the same address under a name the certificate does not carry: verification fails
        with pytest.raises(httpx2.ConnectError, match="CERTIFICATE_VERIFY_FAILED|match"):
            get(target, tls_server.url("other-host.invalid", scheme="https"), verify=ssl.create_default_context(
                cadata=cert_pem.decode()))
        assert len(tls_server.requests) == 1
    finally:
        tls_server.stop()


# --- save-time feedback ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("url,expected", [
    ("http://127.0.0.1:8080/hook", "127.0.0.1 is a loopback address"),
    ("http://2130706433/hook", "2130706433 resolves to 127.0.0.1, a loopback address"),
    ("https://0x7f.1/", "loopback"), ("http://[::1]/", "loopback"), ("http://[::ffff:10.1.1.1]/", "private"),
    ("http://10.0.0.5/", "a private address"), ("http://localhost:11434/", "a loopback name"),
    ("http://169.254.169.254/", "metadata"), ("ftp://example.com/", "http or https"),
    ("http:///nohost", "no host"), ("http://exa mple.com/", "whitespace"),
])
def test_a_url_is_judged_when_saved_without_asking_dns(url, expected):
    problem = outbound.url_problem(url, target=Target())
    assert problem is not None and expected in problem, problem


def test_a_url_with_a_name_is_not_resolved_at_save_time_unless_asked():
    names = Resolver(anything=[["127.0.0.1"]])
    assert outbound.url_problem("https://anything.invalid/hook", target=Target(resolver=names)) is None
    assert names.calls == []
    assert "loopback" in outbound.url_problem("https://anything.invalid/hook", target=Target(resolver=names),
                                              resolve=True)
    assert outbound.url_problem("http://10.0.0.5/", target=Target(allow_private=True)) is None
