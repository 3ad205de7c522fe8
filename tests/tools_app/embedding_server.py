"""A local server speaking the OpenAI embeddings protocol, for tests: `POST /v1/embeddings` with
`{"model", "input": str | [str], "dimensions"?}` answers `{"object": "list", "data": [{"object": "embedding",
"index", "embedding"}], "model", "usage"}`. Its vectors are deterministic bags of hashed words (texts sharing words
are close). `POST /control {"fail": true|false}` makes it answer 500 (or recover); `GET /stats` counts requests and
inputs. With `--api-key K` it answers 401 unless `Authorization: Bearer K`.

Run: `python embedding_server.py --port 0 [--api-key K] [--fail]`; it prints `PORT <n>` once listening."""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEFAULT_DIMENSIONS = 384
WORD_RE = re.compile(r"\w+")


def embed(text: str, dimensions: int) -> list[float]:
    vector = [0.0] * dimensions
    for word in WORD_RE.findall(text.lower()) or [""]:
        digest = hashlib.sha256(word.encode()).digest()
        index = int.from_bytes(digest[:4], "big") % dimensions
        vector[index] += 1.0 if digest[4] % 2 else -1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


class State:
    def __init__(self, api_key: str, fail: bool) -> None:
        self.api_key, self.fail = api_key, fail
        self.requests = 0
        self.inputs = 0
        self.lock = threading.Lock()


def handler_for(state: State):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # quiet
            pass

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> dict:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"{}")

        def do_GET(self) -> None:
            if self.path == "/stats":
                with state.lock:
                    return self._send(200, {"requests": state.requests, "inputs": state.inputs, "fail": state.fail})
            self._send(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            if self.path == "/control":
                body = self._body()
                with state.lock:
                    state.fail = bool(body.get("fail"))
                return self._send(200, {"fail": state.fail})
            if self.path != "/v1/embeddings":
                return self._send(404, {"error": {"message": "not found"}})
            if state.api_key and self.headers.get("Authorization") != f"Bearer {state.api_key}":
                return self._send(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
            body = self._body()
            texts = body.get("input")
            texts = [texts] if isinstance(texts, str) else texts
            with state.lock:
                state.requests += 1
                failing = state.fail
                if not failing and isinstance(texts, list):
                    state.inputs += len(texts)
            if failing:
                return self._send(500, {"error": {"message": "the embeddings backend is down", "type": "server_error"}})
            if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                return self._send(400, {"error": {"message": "input must be a string or a list of strings"}})
            dimensions = int(body.get("dimensions") or DEFAULT_DIMENSIONS)
            self._send(200, {
                "object": "list",
                "data": [{"object": "embedding", "index": i, "embedding": embed(t, dimensions)} for i, t in enumerate(texts)],
                "model": body.get("model", ""),
                "usage": {"prompt_tokens": sum(len(t.split()) for t in texts), "total_tokens": sum(len(t.split()) for t in texts)},
            })

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--api-key", default="")
    parser.add_argument("--fail", action="store_true")
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler_for(State(args.api_key, args.fail)))
    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
