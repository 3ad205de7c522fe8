"""Where an MCP server URL may point: the rule of goclaw.outbound (one guard for every outbound request: loopback,
private, link-local, CGNAT, reserved and cloud metadata addresses refused unless the server allows private networks)
plus the MCP rule that credentials belong in the server's headers, not its URL. Checked when a server is saved, on
every address its name resolves to then (early feedback); the enforcement is at dial time: the bridge's HTTP
clients are goclaw.outbound clients, which check the address they actually connect to."""
from __future__ import annotations

from urllib.parse import urlsplit

from goclaw import outbound

HINT = "allow private network for this server to use it"


def target(*, allow_private: bool) -> outbound.Target:
    """The outbound target of an MCP server (its refusals say which flag to set)."""
    return outbound.Target(allow_private=allow_private, hint=HINT)


def url_problem(url: str, *, allow_private: bool, resolve: bool = True) -> str | None:
    """None when goclaw may connect to `url`; else the reason. With `resolve` (and private networks not allowed),
    every address the host name has now is checked; a name that does not resolve is refused (it cannot be)."""
    if problem := outbound.url_syntax_problem(url):
        return problem
    parts = urlsplit(url)
    if parts.username or parts.password:
        return "put credentials in the server's headers, not in the URL"
    return outbound.url_problem(url, target=target(allow_private=allow_private), resolve=resolve and not allow_private)
