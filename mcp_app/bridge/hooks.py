"""Where the connection manager reports to (the lead's DB-writing listeners register here at app start).

Listeners are called from a worker thread (never inside the bridge's event loop, so Django ORM calls are fine);
an exception in one is logged and never breaks the connection.

- `health_listeners`: `(server_id, {"ok", "state", "error", "attempts", "next_attempt_at"})` on every health
  change of a connection (state is connected | degraded | disconnected | cooldown).
- `listing_listeners`: `(config, [ToolDefinition, ...])` after every (re)connect's tools/list and after the
  server announced `notifications/tools/list_changed` (the bridge re-lists first).
"""
from __future__ import annotations

from typing import Any, Callable

health_listeners: list[Callable[[int, dict[str, Any]], None]] = []
listing_listeners: list[Callable[[Any, list[Any]], None]] = []
