"""The network rule enforced on the address actually dialled. `netcheck.url_problem` checks a server URL when it is
saved and before each connection, but the HTTP client resolves the name again when it opens a socket: a name that
answers with a public address first and a loopback one next (DNS rebinding) would pass the check and reach goclaw's
own network. So the HTTP clients of servers without `allow_private_network` dial through this backend: it resolves
the name itself, refuses the connection if any address is loopback / private / link-local / reserved, and connects
to the address it checked. TLS still verifies the original host name (httpcore passes it separately)."""
from __future__ import annotations

import ipaddress
import socket
from typing import Any

import anyio
import httpcore2
import httpx2
from httpcore2._backends.auto import AutoBackend

from mcp_app.netcheck import address_problem


class CheckedNetworkBackend(AutoBackend):
    """Connects only to addresses that pass the server's network rule (checked at dial time)."""

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options: Any = None) -> Any:
        try:
            infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise httpcore2.ConnectError(f"{host} does not resolve ({exc})") from None
        addresses = [info[4][0].split("%")[0] for info in infos]
        if not addresses:
            raise httpcore2.ConnectError(f"{host} does not resolve")
        for address in addresses:
            why = address_problem(ipaddress.ip_address(address))
            if why:
                raise httpcore2.ConnectError(f"refused: {host} resolves to {why} ({address}); allow private network "
                                             "for this server to use it")
        return await super().connect_tcp(addresses[0], port, timeout=timeout, local_address=local_address,
                                         socket_options=socket_options)


def checked_transport(*, allow_private: bool) -> httpx2.AsyncHTTPTransport:
    """An HTTP transport without proxies from the environment; without `allow_private`, dialling through
    `CheckedNetworkBackend` (fail closed: a client whose pool cannot take the backend is refused)."""
    transport = httpx2.AsyncHTTPTransport(trust_env=False)
    if not allow_private:
        pool = transport._pool  # httpcore2.AsyncConnectionPool: the backend it dials with is a constructor argument
        if not hasattr(pool, "_network_backend"):
            raise RuntimeError("this httpcore2 version does not let goclaw check the addresses it dials")
        pool._network_backend = CheckedNetworkBackend()
    return transport
