"""The one guard every outbound HTTP request of goclaw goes through (MCP servers, approval webhooks, embedding
providers, and every later provider or fetch tool). A URL is typed by a person or an agent but fetched by goclaw
from inside its own network, so the guard refuses loopback, private, link-local, CGNAT, multicast, reserved and
documentation addresses unless the target explicitly allows private networks, and cloud metadata endpoints always.

It is enforced at dial time, on what is actually dialled: the network backend under the HTTP client resolves the
host once, checks EVERY address it got (a name answering one public and one loopback address is refused), and
connects to the checked address itself (no second lookup, so DNS rebinding between check and connect gains
nothing). TLS still sends SNI for, and verifies the certificate against, the host name of the URL. Redirects,
when a caller follows them, dial through the same backend, so every hop is checked. Clients are built without
proxies from the environment (a proxy would dial for us, unchecked). `url_problem` gives early feedback when a URL
is saved; it is a courtesy, the dial-time check is the enforcement.

Use `client(target)` / `async_client(target)` (httpx2, the HTTP client the MCP SDK takes) for every request."""
from __future__ import annotations

import ipaddress
import socket
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence
from urllib.parse import urlsplit

import anyio
import httpcore2
import httpx2
from httpcore2._backends.auto import AutoBackend
from httpcore2._backends.sync import SyncBackend
from httpx2._config import DEFAULT_LIMITS

# What callers need of the HTTP client, so that none imports it directly (.importlinter keeps it so).
HTTPError, Timeout, Response = httpx2.HTTPError, httpx2.Timeout, httpx2.Response

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]

# --- the rule, as data ---------------------------------------------------------------------------------------------
# Refused unless the target allows private networks. The most specific match names the reason.
PRIVATE_NETWORKS: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", "an unspecified ('this host') address"),
    ("10.0.0.0/8", "a private address"),
    ("100.64.0.0/10", "a carrier-grade NAT address"),
    ("127.0.0.0/8", "a loopback address"),
    ("169.254.0.0/16", "a link-local address (cloud metadata lives there)"),
    ("172.16.0.0/12", "a private address"),
    ("192.0.0.0/24", "an IETF protocol address"),
    ("192.0.2.0/24", "a documentation address"),
    ("192.88.99.0/24", "a 6to4 relay address"),
    ("192.168.0.0/16", "a private address"),
    ("198.18.0.0/15", "a benchmarking address"),
    ("198.51.100.0/24", "a documentation address"),
    ("203.0.113.0/24", "a documentation address"),
    ("224.0.0.0/4", "a multicast address"),
    ("240.0.0.0/4", "a reserved address"),
    ("255.255.255.255/32", "the broadcast address"),
    ("::/128", "the unspecified address"),
    ("::1/128", "a loopback address"),
    ("::/8", "a reserved address (IPv4-compatible or translated)"),
    ("64:ff9b:1::/48", "a local NAT64 address"),
    ("100::/64", "a discard-only address"),
    ("2001::/23", "an IETF protocol address (Teredo, benchmarking, ORCHID)"),
    ("2001:db8::/32", "a documentation address"),
    ("3fff::/20", "a documentation address"),
    ("5f00::/16", "a segment-routing address"),
    ("fc00::/7", "a unique local (private) address"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local address"),
    ("ff00::/8", "a multicast address"),
)
# IPv6 forms that carry an IPv4 address the packets really go to: that address is judged instead.
EMBEDDED_IPV4: tuple[tuple[str, Callable[[ipaddress.IPv6Address], ipaddress.IPv4Address | None]], ...] = (
    ("::ffff:0:0/96", lambda a: a.ipv4_mapped),  # IPv4-mapped
    ("64:ff9b::/96", lambda a: ipaddress.IPv4Address(int(a) & 0xFFFFFFFF)),  # NAT64 well-known prefix
    ("2002::/16", lambda a: a.sixtofour),  # 6to4
)
# Cloud metadata and credential endpoints: refused even for targets that allow private networks (no webhook, MCP
# server or embedding provider is ever one, and reaching one hands out the host's cloud credentials).
METADATA_NETWORKS: tuple[tuple[str, str], ...] = (
    ("169.254.169.254/32", "the cloud metadata endpoint"),
    ("169.254.170.2/32", "the container credentials endpoint (ECS)"),
    ("169.254.170.23/32", "the pod identity endpoint (EKS)"),
    ("100.100.100.200/32", "the cloud metadata endpoint (Alibaba)"),
    ("168.63.129.16/32", "the cloud host endpoint (Azure WireServer)"),
    ("192.0.0.192/32", "the cloud metadata endpoint (Oracle)"),
    ("fd00:ec2::254/128", "the cloud metadata endpoint (AWS IPv6)"),
    ("fd00:ec2::23/128", "the pod identity endpoint (EKS IPv6)"),
)
METADATA_NAMES = frozenset({"metadata", "metadata.google.internal", "metadata.goog", "instance-data",
                            "instance-data.ec2.internal", "metadata.azure.internal"})
METADATA_NAME = "a cloud metadata name"
LOOPBACK_NAMES = ("localhost",)  # and every name under it (RFC 6761): resolved to loopback without asking DNS


def _networks(rows):
    return tuple((ipaddress.ip_network(net), why) for net, why in rows)


_PRIVATE = _networks(PRIVATE_NETWORKS)
_METADATA = _networks(METADATA_NETWORKS)
_EMBEDDED = tuple((ipaddress.ip_network(net), extract) for net, extract in EMBEDDED_IPV4)
DEFAULT_HINT = "allow private networks for this target to reach it"


class OutboundRefused(httpcore2.ConnectError):
    """A request goclaw refused to send: where it would go is not allowed for this target. A ConnectError, so
    HTTP clients report it like any other failed connection (httpx2.ConnectError, its cause is this)."""


@dataclass(frozen=True)
class Target:
    """Where a request may go. `allow_private` lets it reach loopback and private networks (never cloud metadata);
    `hint` ends a refusal's message with what a person can change; `resolver` (host, port) -> addresses replaces
    the system resolver (tests, or a pinned resolver)."""

    allow_private: bool = False
    hint: str = DEFAULT_HINT
    resolver: Resolver | None = None


def _most_specific(address: IPAddress, table) -> str | None:
    found = [(net.prefixlen, why) for net, why in table if address.version == net.version and address in net]
    return max(found)[1] if found else None


def address_problem(address: IPAddress, *, allow_private: bool = False) -> str | None:
    """Why goclaw may not connect to `address` (e.g. "a loopback address"), or None."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id:
            address = ipaddress.IPv6Address(address.compressed.split("%")[0])
        for net, extract in _EMBEDDED:
            if address in net and (inner := extract(address)) is not None:
                why = address_problem(inner, allow_private=allow_private)
                return f"{why} ({inner}, embedded)" if why else None
    why = _most_specific(address, _METADATA)
    if why or allow_private:
        return why
    why = _most_specific(address, _PRIVATE)
    if why is None and not address.is_global:  # the IANA special-purpose registries, for anything the table misses
        why = "a special-purpose address"
    return why


def _normalized_host(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host.rstrip(".")


def numeric_addresses(host: str) -> list[IPAddress] | None:
    """The address a numeric host means, in every notation the C resolver accepts (2130706433, 0x7f.1, 0177.0.0.1,
    127.1, ::ffff:7f00:1, …), without asking DNS; None for a name."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except (OSError, UnicodeError, ValueError):
        return None
    return _unique(info[4][0] for info in infos)


def _unique(addresses: Iterable[str]) -> list[IPAddress]:
    out: list[IPAddress] = []
    for text in addresses:
        address = ipaddress.ip_address(str(text).split("%")[0])
        if address not in out:
            out.append(address)
    return out


def system_resolver(host: str, port: int) -> list[str]:
    """Every address the system resolver gives for `host` (in its order)."""
    return [info[4][0] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)]


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        return None


def _refusal(host: str, address: IPAddress | None, why: str, target: Target) -> OutboundRefused:
    where = (f"{host} is {why}" if address is None or _literal(host) == address
             else f"{host} resolves to {address}, {why}")
    metadata = address is not None and address_problem(address, allow_private=True) is not None
    advice = "never allowed" if metadata or why == METADATA_NAME else target.hint
    return OutboundRefused(f"refused: {where} ({advice})")


def _name_problem(host: str, target: Target) -> str | None:
    if host in METADATA_NAMES:
        return METADATA_NAME
    if not target.allow_private and any(host == n or host.endswith("." + n) for n in LOOPBACK_NAMES):
        return "a loopback name"
    return None


def checked_addresses(host: str, port: int, target: Target) -> list[IPAddress]:
    """Resolve `host` once and return its addresses if every one of them is allowed for `target`; else raise
    OutboundRefused naming the first address refused and why (a name that does not resolve: ConnectError)."""
    name = _normalized_host(host)
    addresses = numeric_addresses(name)
    if addresses is None:
        if why := _name_problem(name, target):
            raise _refusal(name, None, why, target)
        try:
            addresses = _unique((target.resolver or system_resolver)(name, port))
        except (OSError, UnicodeError, ValueError) as exc:  # not a refusal: the name is simply not there
            raise httpcore2.ConnectError(f"{name} does not resolve ({exc})") from None
        if not addresses:
            raise httpcore2.ConnectError(f"{name} does not resolve")
    for address in addresses:
        if why := address_problem(address, allow_private=target.allow_private):
            raise _refusal(name, address, why, target)
    return addresses


def refusal_of(exc: BaseException | None) -> OutboundRefused | None:
    """The guard's refusal behind an HTTP client error (httpx2 re-raises it as ConnectError from it), or None."""
    seen = 0
    while exc is not None and seen < 10:
        if isinstance(exc, OutboundRefused):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


# --- the network backends: resolve + check + connect to the checked address ----------------------------------------
class GuardedBackend(SyncBackend):
    """httpcore2's socket backend dialling only checked addresses (tried in the resolver's order)."""

    def __init__(self, target: Target) -> None:
        self.target = target

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> Any:
        failure: Exception | None = None
        for address in checked_addresses(host, port, self.target):
            try:
                return super().connect_tcp(str(address), port, timeout=timeout, local_address=local_address,
                                           socket_options=socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
        raise OutboundRefused("refused: outbound requests do not use unix sockets")


class AsyncGuardedBackend(AutoBackend):
    """The async (asyncio or trio) backend dialling only checked addresses; the lookup runs in a worker thread."""

    def __init__(self, target: Target) -> None:
        self.target = target

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options: Any = None) -> Any:
        if numeric_addresses(_normalized_host(host)) is not None:
            addresses = checked_addresses(host, port, self.target)
        else:
            # a cancelled request does not wait for the lookup (the thread finishes on its own, its answer unused)
            addresses = await anyio.to_thread.run_sync(checked_addresses, host, port, self.target,
                                                       abandon_on_cancel=True)
        failure: Exception | None = None
        for address in addresses:
            try:
                return await super().connect_tcp(str(address), port, timeout=timeout, local_address=local_address,
                                                 socket_options=socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
        raise OutboundRefused("refused: outbound requests do not use unix sockets")


def _pool_options(limits: httpx2.Limits, http2: bool, retries: int) -> dict[str, Any]:
    return {"max_connections": limits.max_connections, "max_keepalive_connections": limits.max_keepalive_connections,
            "keepalive_expiry": limits.keepalive_expiry, "http1": True, "http2": http2, "retries": retries}


_default_ssl_context: Any = None
_ssl_context_lock = threading.Lock()


def _ssl_context(verify: Any) -> Any:
    """The TLS context for `verify`: the default one (system CAs, verification on) is built once per process and
    shared (building one costs ~25 ms of CPU; a context is safe to share between connections and threads)."""
    global _default_ssl_context
    if verify is not True:
        return httpx2.create_ssl_context(verify=verify)
    if _default_ssl_context is None:
        with _ssl_context_lock:
            if _default_ssl_context is None:
                _default_ssl_context = httpx2.create_ssl_context(verify=True)
    return _default_ssl_context


class GuardedTransport(httpx2.HTTPTransport):
    """httpx2's transport whose connection pool dials through GuardedBackend (no proxy: it would dial for us)."""

    def __init__(self, target: Target, *, verify: Any = True, limits: httpx2.Limits = DEFAULT_LIMITS,
                 http2: bool = False, retries: int = 0) -> None:
        ssl_context = _ssl_context(verify)
        super().__init__(verify=ssl_context, limits=limits, http2=http2, retries=retries)
        self._pool = httpcore2.ConnectionPool(ssl_context=ssl_context, network_backend=GuardedBackend(target),
                                              **_pool_options(limits, http2, retries))


class AsyncGuardedTransport(httpx2.AsyncHTTPTransport):
    """The async transport, dialling through AsyncGuardedBackend."""

    def __init__(self, target: Target, *, verify: Any = True, limits: httpx2.Limits = DEFAULT_LIMITS,
                 http2: bool = False, retries: int = 0) -> None:
        ssl_context = _ssl_context(verify)
        super().__init__(verify=ssl_context, limits=limits, http2=http2, retries=retries)
        self._pool = httpcore2.AsyncConnectionPool(ssl_context=ssl_context, network_backend=AsyncGuardedBackend(target),
                                                   **_pool_options(limits, http2, retries))


_FORBIDDEN = ("transport", "mounts", "proxy", "trust_env", "app")


def _client_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    if bad := [name for name in _FORBIDDEN if name in kwargs]:
        raise TypeError(f"the outbound guard builds the transport itself; {', '.join(bad)} may not be given")
    kwargs.setdefault("follow_redirects", False)
    return {**kwargs, "trust_env": False}


def client(target: Target, *, verify: Any = True, **kwargs: Any) -> httpx2.Client:
    """An httpx2.Client every request of which goes through the guard for `target` (redirects not followed unless
    `follow_redirects=True`; each hop is then checked)."""
    return httpx2.Client(transport=GuardedTransport(target, verify=verify), **_client_options(kwargs))


def async_client(target: Target, *, verify: Any = True, **kwargs: Any) -> httpx2.AsyncClient:
    """The async client, for asyncio code and the MCP SDK's HTTP transports."""
    return httpx2.AsyncClient(transport=AsyncGuardedTransport(target, verify=verify), **_client_options(kwargs))


# --- early feedback when a URL is saved ----------------------------------------------------------------------------
def url_syntax_problem(url: str) -> str | None:
    """What is wrong with the URL itself (scheme, host, whitespace), without resolving it."""
    if any(ch in url for ch in "\r\n\t\x00 "):
        return "the URL contains whitespace or control characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        return f"not a valid URL: {exc}"
    if parts.scheme.lower() not in ("http", "https"):
        return "the URL must use http or https"
    if not parts.hostname:
        return "the URL has no host"
    return None


def url_problem(url: str, *, target: Target = Target(), resolve: bool = False) -> str | None:
    """None when `url` may be saved for `target`; else why not. Without `resolve`, literal addresses (in any
    notation) and reserved names are judged; with it, every address the name has now (a name that does not
    resolve is refused). Either way the request itself is checked again when it dials."""
    if problem := url_syntax_problem(url):
        return problem
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        if resolve or numeric_addresses(_normalized_host(host)) is not None:
            checked_addresses(host, parts.port or (443 if parts.scheme.lower() == "https" else 80), target)
        elif why := _name_problem(_normalized_host(host), target):
            raise _refusal(_normalized_host(host), None, why, target)
    except OutboundRefused as exc:
        return str(exc).removeprefix("refused: ")
    except httpcore2.ConnectError as exc:
        return str(exc)
    return None
