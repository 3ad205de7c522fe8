"""From a token's revocation to its open WebSocket's 4401 close frame, in-process through the configured channel
layer (PostgreSQL or Redis, as deployed; events delivered as in production). The contract: p99 <= 1000 ms.
tests/goclaw/test_websocket_revocation.py checks that the close happens; this measures how fast."""
from __future__ import annotations

import asyncio
import time

from _common import django_setup, summary_ms, write_result

WARMUP, N = 3, 30
TARGET_P99_MS = 1000.0


async def _measure(agent, n: int) -> list[float]:
    """Revoke n fresh tokens, each with one open socket; the first WARMUP samples are dropped."""
    from channels.db import database_sync_to_async
    from channels.testing import WebsocketCommunicator

    from goclaw.asgi import application
    from tools_app.services.agents import token_issue, token_revoke

    samples = []
    for _ in range(n):
        token, plain = await database_sync_to_async(token_issue)(agent=agent, name="bench-revocation")
        socket = WebsocketCommunicator(application, f"/ws/events/?token={plain}")
        connected, code = await socket.connect(timeout=10)
        assert connected, code
        await socket.receive_json_from(timeout=10)  # welcome: the socket has joined its groups
        started = time.perf_counter()
        await database_sync_to_async(token_revoke)(token=token)
        closed = await socket.receive_output(timeout=30)
        samples.append(time.perf_counter() - started)
        assert closed == {"type": "websocket.close", "code": 4401}, closed
        await socket.wait(timeout=10)
    return samples[WARMUP:]


async def _run(agent) -> list[float]:
    """One event loop for every socket, as in one daphne process (the PostgreSQL layer listens once per loop)."""
    try:
        return await _measure(agent, WARMUP + N)
    finally:
        import channels_postgres.db

        if getattr(channels_postgres.db, "connection_pool", None) is not None:
            await channels_postgres.db.connection_pool.close()
            channels_postgres.db.connection_pool = None


def main() -> None:
    django_setup()
    from django.conf import settings

    from tools_app.models import Agent
    from tools_app.services.agents import agent_create

    agent = Agent.objects.filter(key="bench-revocation").first() or agent_create(key="bench-revocation")
    samples = asyncio.run(_run(agent))
    result = summary_ms(samples)
    write_result("revocation", {"path": "token_revoke -> after commit -> channel layer -> consumer -> close 4401",
                                "channel_layer": settings.CHANNEL_LAYERS["default"]["BACKEND"],
                                "events_delivery": settings.EVENTS_DELIVERY, "target_p99_ms": TARGET_P99_MS,
                                "meets_target": result["p99_ms"] <= TARGET_P99_MS, **result})


if __name__ == "__main__":
    main()
