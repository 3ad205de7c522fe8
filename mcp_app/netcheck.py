"""Where an MCP server URL may point. A server URL is typed by a person but reached by goclaw itself, from inside
its own network: loopback, private, link-local (cloud metadata), multicast and reserved addresses are refused unless
the server is explicitly allowed them (`allow_private_network`). Checked when a server is saved and again every
time a connection is opened, on every address the name resolves to (fail closed)."""
from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

ALLOWED_SCHEMES = ("http", "https")


def address_problem(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    if isinstance(address, ipaddress.IPv6Address):
        mapped = address.ipv4_mapped or address.sixtofour
        if mapped is not None:
            return address_problem(mapped)
        if address.teredo is not None:
            return "a Teredo address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address (cloud metadata lives there)"
    if address.is_private or address.is_reserved or address.is_unspecified or address.is_multicast:
        return "a private or reserved address"
    if isinstance(address, ipaddress.IPv4Address) and address in ipaddress.ip_network("100.64.0.0/10"):
        return "a carrier-grade NAT address"
    return None


def url_syntax_problem(url: str) -> str | None:
    """What is wrong with the URL itself (scheme, host, embedded credentials), without resolving it."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        return f"not a valid URL: {exc}"
    if parts.scheme not in ALLOWED_SCHEMES:
        return "the URL must use http or https"
    if not parts.hostname:
        return "the URL has no host"
    if parts.username or parts.password:
        return "put credentials in the server's headers, not in the URL"
    if any(ch in url for ch in "\r\n\t\x00 "):
        return "the URL contains whitespace or control characters"
    return None


def url_problem(url: str, *, allow_private: bool, resolve: bool = True) -> str | None:
    """None when goclaw may connect to `url`; else the reason. With `resolve`, every address the host name has now
    is checked (a name that does not resolve is refused: it cannot be checked)."""
    problem = url_syntax_problem(url)
    if problem or allow_private:
        return problem
    host = urlsplit(url).hostname or ""
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        if host.rstrip(".").lower() == "localhost" or host.lower().endswith(".localhost"):
            return f"{host} is a loopback name; allow private network for this server to use it"
        if not resolve:
            return None
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            return f"{host} does not resolve ({exc})"
        addresses = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
    for address in addresses:
        why = address_problem(address)
        if why:
            return f"{host} is {why} ({address}); allow private network for this server to use it"
    return None
