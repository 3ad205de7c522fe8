"""DNS-rebinding protection for every port that serves `/mcp` (the MCP port's ASGI app and the main port's proxy):
the MCP specification says servers MUST validate `Origin`. A page on a hostile site whose name was rebound to this
machine sends its own origin (and Host); it is refused before anything else runs. A request without `Origin` (every
non-browser client) passes, as the specification allows. The MCP port also checks `Host` against ALLOWED_HOSTS, as
Django does on the main port.

Allowed origins: http(s) origins on a host of ALLOWED_HOSTS (any port; `*` is not taken as "every origin"), the
origin of GOCLAW_PUBLIC_URL, and GOCLAW_MCP_ALLOWED_ORIGINS (exact)."""
from __future__ import annotations

from functools import lru_cache
from urllib.parse import urlsplit

from django.conf import settings
from django.http.request import split_domain_port, validate_host

_DEFAULT_PORTS = {"http": "80", "https": "443"}


def _origin_parts(origin: str) -> tuple[str, str, str] | None:
    """(scheme, host, port) of a serialized origin `scheme://host[:port]`, host lowercased and port explicit; None for
    anything else (a path, user info, `null`, another scheme…)."""
    scheme, sep, netloc = origin.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in _DEFAULT_PORTS or not netloc or any(c in netloc for c in "/?#@\\ \t\r\n"):
        return None
    host, port = split_domain_port(netloc)  # Django's Host grammar, lowercased; host "" when malformed
    if not host:
        return None
    return scheme, host, port or _DEFAULT_PORTS[scheme]


def _allowed_hosts() -> list[str]:
    """ALLOWED_HOSTS as Django applies it (with DEBUG and no list: the local names)."""
    hosts = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not hosts:
        hosts = [".localhost", "127.0.0.1", "[::1]"]
    return hosts


@lru_cache(maxsize=8)
def _policy(allowed_hosts: tuple[str, ...], explicit: tuple[str, ...], public_url: str):
    origin_hosts = [host for host in allowed_hosts if host != "*"]
    exact = {parts for parts in map(_origin_parts, explicit) if parts is not None}
    if public_url:
        split = urlsplit(public_url)
        parts = _origin_parts(f"{split.scheme}://{split.netloc}")
        if parts is not None:
            exact.add(parts)
    return origin_hosts, frozenset(exact)


def origin_allowed(origin: str | None) -> bool:
    """True for a request without Origin, or whose Origin is one of the allowed origins (module doc)."""
    if origin is None:
        return True
    parts = _origin_parts(origin.strip())
    if parts is None:
        return False
    origin_hosts, exact = _policy(tuple(_allowed_hosts()), tuple(getattr(settings, "MCP_ALLOWED_ORIGINS", ())),
                                  getattr(settings, "PUBLIC_URL", "") or "")
    return parts in exact or validate_host(parts[1], origin_hosts)


def host_allowed(host: str | None) -> bool:
    """The Host header names this server (ALLOWED_HOSTS, as Django's get_host checks it)."""
    if not host:
        return False
    domain, _port = split_domain_port(host)
    return bool(domain) and validate_host(domain, _allowed_hosts())
