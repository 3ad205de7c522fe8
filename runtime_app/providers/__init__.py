"""LLM providers behind one call, `chat(config, request) -> ChatReply`, whatever the wire protocol (config.kind:
openai | anthropic). Failures that may pass (rate limits, server errors, timeouts, lost connections) are retried
with backoff; every failure reaches the caller as a short ProviderError with a code, never with the API key."""
from __future__ import annotations

import dataclasses
import logging
import random
import time

from runtime_app.providers import anthropic, openai
from runtime_app.providers.base import (ChatMessage, ChatReply, ChatRequest, ProviderConfig, ProviderError,
                                        ToolCallRequest, ToolSpec, Usage)

__all__ = ["chat", "retry_delay", "ChatMessage", "ChatReply", "ChatRequest", "ProviderConfig", "ProviderError",
           "ToolCallRequest", "ToolSpec", "Usage"]

logger = logging.getLogger("goclaw.runtime.providers")
PROTOCOLS = {"openai": openai.chat, "anthropic": anthropic.chat}


def chat(config: ProviderConfig, request: ChatRequest) -> ChatReply:
    """The model's reply to `request`. Retries a retryable failure up to config.max_retries times (never one
    whose text already reached request.on_text: it would be shown twice); a set request.cancel ends the
    request or the wait between attempts at once (ProviderError cancelled)."""
    protocol = PROTOCOLS.get(config.kind)
    if protocol is None:
        raise ProviderError("bad_request", f"unknown provider kind {config.kind[:20]!r}")
    attempt = 0
    while True:
        streamed = False
        attempt_request = request
        if request.on_text is not None:
            on_text = request.on_text

            def relay(text: str) -> None:
                nonlocal streamed
                streamed = True
                on_text(text)

            attempt_request = dataclasses.replace(request, on_text=relay)
        try:
            return protocol(config, attempt_request)
        except ProviderError as exc:
            if not exc.retryable or streamed or attempt >= max(0, config.max_retries):
                raise
            delay = retry_delay(config, attempt, exc.retry_after)
            logger.info("LLM provider %s: %s, attempt %d of %d again in %.2fs", config.name, exc.code, attempt + 2,
                        config.max_retries + 1, delay)
        except Exception:  # a bug here or in on_text: logged with its traceback, the caller gets a clean error
            logger.exception("LLM provider %s: unexpected failure", config.name)
            raise ProviderError("bad_response", "unexpected failure while handling the provider's reply") from None
        if request.cancel is not None:
            if request.cancel.wait(delay):
                raise ProviderError("cancelled", "cancelled")
        else:
            time.sleep(delay)
        attempt += 1


def retry_delay(config: ProviderConfig, attempt: int, retry_after: float | None = None) -> float:
    """Seconds before retry number `attempt + 1`: the server's retry-after when it gave one, else backoff_base
    doubled per attempt with jitter (50-100 %, so many clients refused at once do not return at once); never more
    than backoff_max."""
    if retry_after is not None:
        return max(0.0, min(retry_after, config.backoff_max))
    ceiling = min(config.backoff_max, config.backoff_base * (2 ** min(attempt, 30)))
    return max(0.0, ceiling * random.uniform(0.5, 1.0))
