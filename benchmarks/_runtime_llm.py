"""The local LLM server of bench_runtime.py, in a process of its own so that answering hundreds of streamed requests
does not share the runner's GIL. Prints its URL, then answers commands on stdin: `stats` prints (and resets) the
requests received and the most in flight at once; end of input stops it.

The reply depends on the request: the agent's model name `bench-t<N>-d<MS>` says how many tool calls (`datetime`) the
session makes before its final text and how long each answer takes (on top of the server's zero latency)."""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.runtime_app.llm_server import LLMServer, Reply, call, text  # noqa: E402

MODEL_RE = re.compile(r"bench-t(\d+)-d(\d+)")


def respond(body: dict) -> Reply:
    """`datetime` until the conversation holds N tool results, then the final text; each after the model's delay."""
    match = MODEL_RE.fullmatch(str(body.get("model", "")))
    tools, delay_ms = (int(match[1]), int(match[2])) if match else (0, 0)
    done = sum(1 for m in body.get("messages") or () if isinstance(m, dict) and m.get("role") == "tool")
    reply = call("datetime", timezone="UTC") if done < tools else text("done")
    reply.delay = delay_ms / 1000
    return reply


def main() -> None:
    server = LLMServer(latency=0.0)
    server.responder = respond
    server.start()
    print(server.url, flush=True)
    for line in sys.stdin:
        if line.strip() == "stats":
            stats = {"requests": len(server.requests), "max_in_flight": server.max_in_flight}
            server.requests.clear()  # bodies grow with every turn: keep none between rounds
            server.max_in_flight = server.in_flight
            print(json.dumps(stats), flush=True)
    server.stop()


if __name__ == "__main__":
    main()
