"""Memory documents and their index (docs/memory.md): store a document and index it, delete it, re-index it,
back-fill missing vectors; and the reads the router and tools share. Indexing is two steps: one short transaction replaces the document's chunks (vectors reused from
the embedding cache), then the new texts are embedded *outside* any transaction and written back by a second short
one. A failed embedder leaves chunks without vectors (still found by full-text search) for the back-fill task."""
from __future__ import annotations

import hashlib
import logging
import re
import time
from dataclasses import dataclass
from typing import Iterable

from django.conf import settings
from django.db import connection, transaction

from goclaw.errors import NotFound, ValidationError
from goclaw.events import agent_group, publish
from tools_app.memory.chunking import MAX_CHARS, OVERLAP_CHARS, chunk_text
from tools_app.memory.embedders import Embedder, EmbeddingError, get_embedder
from tools_app.models import Agent
from tools_app.models.memory import MEMORY_PATH_MAX, EmbeddingCache, MemoryChunk, MemoryDocument

logger = logging.getLogger("goclaw.memory")

MAX_CONTENT_BYTES = 5 * 1024 * 1024  # write_file's limit
EMBED_BATCH = 64
_SEGMENT_RE = re.compile(r"^[^\x00-\x1f\x7f/\\]+$")


class MemoryPathInvalid(ValidationError):
    code = "memory_path_invalid"


class MemoryDocumentNotFound(NotFound):
    code = "memory_document_not_found"


# --- paths and scopes ------------------------------------------------------------------------------------------------
def is_memory_path(rel: str) -> bool:
    """Whether a clean workspace-relative path is memory: MEMORY.md, memory.md or anything below memory/."""
    return rel in ("MEMORY.md", "memory.md") or (rel.startswith("memory/") and len(rel) > len("memory/"))


def memory_path_clean(path: str) -> str:
    """`path` as stored (leading "./" dropped), or MemoryPathInvalid: a relative, `..`-free memory path."""
    if not isinstance(path, str):
        raise MemoryPathInvalid("a memory path must be a string")
    rel = path[2:] if path.startswith("./") else path
    if not rel or len(rel) > MEMORY_PATH_MAX:
        raise MemoryPathInvalid(f"a memory path has 1 to {MEMORY_PATH_MAX} characters")
    parts = rel.split("/")
    if any(part in ("", ".", "..") or not _SEGMENT_RE.match(part) for part in parts):
        raise MemoryPathInvalid(f"not a clean relative path: {rel[:100]!r}")
    if not is_memory_path(rel):
        raise MemoryPathInvalid("memory paths are MEMORY.md, memory.md and memory/<name>")
    return rel


def scope_user(user_id: str | None) -> str | None:
    """The stored user_id of a caller: None (shared) for an empty one."""
    return user_id or None


def memory_document_get(*, agent: Agent, user_id: str | None, path: str, fallback: bool = True) -> MemoryDocument | None:
    """The document a user reads at `path`: their own, else (with `fallback`) the shared one."""
    user = scope_user(user_id)
    rows = list(MemoryDocument.objects.filter(agent=agent, path=path, user_id=user)) if user else []
    if not rows and (fallback or user is None):
        rows = list(MemoryDocument.objects.filter(agent=agent, path=path, user_id__isnull=True))
    return rows[0] if rows else None


def memory_documents_visible(*, agent: Agent, user_id: str | None, prefix: str = ""):
    """The documents a user sees: their own and the shared ones their own do not hide (same path), by path."""
    user = scope_user(user_id)
    rows = MemoryDocument.objects.filter(agent=agent)
    rows = rows.filter(user_id__isnull=True) if user is None else rows.filter(user_id__in=[user]) | rows.filter(user_id__isnull=True)
    if prefix:
        rows = rows.filter(path__startswith=prefix)
    seen: dict[str, MemoryDocument] = {}
    for row in rows.defer("content").order_by("path", "user_id"):
        if row.path not in seen or row.user_id is not None:
            seen[row.path] = row
    return [seen[path] for path in sorted(seen)]


# --- writes --------------------------------------------------------------------------------------------------------
@dataclass
class MemoryWrite:
    """What a write did: the document, whether it is new, its chunk count and how many have a vector now."""

    document: MemoryDocument
    created: bool
    chunks: int
    embedded: int
    embedding_error: str = ""


def _chunk_settings() -> tuple[int, int]:
    return (int(getattr(settings, "MEMORY_CHUNK_MAX_CHARS", MAX_CHARS)),
            int(getattr(settings, "MEMORY_CHUNK_OVERLAP_CHARS", OVERLAP_CHARS)))


def _cached_vectors(hashes: Iterable[str], model_id: str) -> dict[str, list[float]]:
    hashes = list(set(hashes))
    if not hashes or not model_id:
        return {}
    return {row.text_hash: row.embedding for row in EmbeddingCache.objects.filter(model=model_id, text_hash__in=hashes)}


def _lock_document_key(agent_id: int, user_id: str | None, path: str) -> None:
    """Serialise writers of one (agent, scope, path) for the transaction: the second waits and then updates."""
    key = hashlib.sha256(f"memory\x00{agent_id}\x00{user_id or ''}\x00{path}".encode()).digest()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [int.from_bytes(key[:8], "big", signed=True)])


@transaction.atomic
def _document_store(*, agent: Agent, user_id: str | None, path: str, content: str, reindex: bool,
                    model_id: str) -> tuple[MemoryDocument, bool, bool]:
    """Upsert the document and, if its text changed (or `reindex`), replace its chunks in this transaction.
    Returns (document, created, chunks replaced)."""
    _lock_document_key(agent.pk, user_id, path)
    digest = hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()
    document = MemoryDocument.objects.filter(agent=agent, user_id=user_id, path=path).first() if user_id else \
        MemoryDocument.objects.filter(agent=agent, user_id__isnull=True, path=path).first()
    created = document is None
    if created:
        document = MemoryDocument.objects.create(agent=agent, user_id=user_id, path=path, content=content,
                                                 content_hash=digest)
    elif document.content_hash != digest or document.content != content:
        document.content, document.content_hash = content, digest
        document.save(update_fields=["content", "content_hash", "updated_at"])
    elif not reindex:
        return document, False, False
    MemoryChunk.objects.filter(document=document).delete()
    if path.endswith(".md"):
        max_chars, overlap = _chunk_settings()
        chunks = chunk_text(content, max_chars, overlap)
        cached = _cached_vectors((c.text_hash for c in chunks), model_id)
        MemoryChunk.objects.bulk_create([
            MemoryChunk(document=document, agent=agent, user_id=user_id, path=path, start_line=c.start_line,
                        end_line=c.end_line, text=c.text, text_hash=c.text_hash, embedding=cached.get(c.text_hash),
                        embedding_model=model_id if c.text_hash in cached else "")
            for c in chunks], batch_size=500)
    publish("memory_document.written", {"agent": agent.key, "path": path, "shared": user_id is None,
                                        "created": created}, [agent_group(agent.key)])
    return document, created, True


def memory_document_write(*, agent: Agent, user_id: str | None, path: str, content: str,
                          embed: bool = True) -> MemoryWrite:
    """Store `content` at `path` for the user (shared when user_id is empty) and index it. An orchestrator: call it
    outside a transaction; the embedding runs between its two short transactions. A failed embedding is reported in
    the result, never raised: the chunks stay searchable by text and the back-fill task retries."""
    path = memory_path_clean(path)
    if not isinstance(content, str):
        raise ValidationError("content must be a string", code="invalid_request")
    if "\x00" in content:
        raise ValidationError("memory documents are text: a NUL character is not allowed", code="memory_not_text")
    if len(content.encode("utf-8", "surrogatepass")) > MAX_CONTENT_BYTES:
        raise ValidationError(f"a memory document holds at most {MAX_CONTENT_BYTES} bytes", code="memory_too_large")
    user = scope_user(user_id)
    embedder, problem = _embedder_or_problem()
    document, created, _ = _document_store(agent=agent, user_id=user, path=path, content=content, reindex=False,
                                           model_id=embedder.model_id if embedder else "")
    embedded, error = (memory_document_embed(document=document, embedder=embedder) if embed and embedder
                       else (0, problem))
    return _result(document, created, embedded, error)


def memory_document_reindex(*, document: MemoryDocument) -> MemoryWrite:
    """Chunk and embed a document again (after a chunking or embedder change); an orchestrator like the write."""
    embedder, problem = _embedder_or_problem()
    document, _, _ = _document_store(agent=document.agent, user_id=document.user_id, path=document.path,
                                     content=document.content, reindex=True,
                                     model_id=embedder.model_id if embedder else "")
    embedded, error = memory_document_embed(document=document, embedder=embedder) if embedder else (0, problem)
    return _result(document, False, embedded, error)


def _result(document: MemoryDocument, created: bool, embedded: int, error: str) -> MemoryWrite:
    total = MemoryChunk.objects.filter(document=document).count()
    with_vector = MemoryChunk.objects.filter(document=document, embedding__isnull=False).count()
    return MemoryWrite(document=document, created=created, chunks=total, embedded=with_vector, embedding_error=error)


@transaction.atomic
def memory_document_delete(*, agent: Agent, user_id: str | None, path: str) -> None:
    """Delete exactly the user's document (the shared one when user_id is empty); its chunks go with it."""
    path = memory_path_clean(path)
    user = scope_user(user_id)
    rows = MemoryDocument.objects.filter(agent=agent, path=path)
    rows = rows.filter(user_id=user) if user else rows.filter(user_id__isnull=True)
    if not rows.delete()[0]:
        raise MemoryDocumentNotFound(f"no memory document {path}")
    publish("memory_document.deleted", {"agent": agent.key, "path": path, "shared": user is None},
            [agent_group(agent.key)])


# --- embedding -------------------------------------------------------------------------------------------------------
def _embedder_or_problem() -> tuple[Embedder | None, str]:
    try:
        return get_embedder(), ""
    except EmbeddingError as exc:
        logger.warning("memory embedder unavailable: %s", exc)
        return None, str(exc)


def memory_document_embed(*, document: MemoryDocument, embedder: Embedder | None = None) -> tuple[int, str]:
    """Embed the document's chunks that lack a vector of the current model. Returns (vectors written, error)."""
    chunks = MemoryChunk.objects.filter(document=document).exclude(embedding_model=(embedder or get_embedder()).model_id)
    return memory_chunks_embed(chunks=list(chunks.only("id", "text", "text_hash")), embedder=embedder)


def memory_chunks_embed(*, chunks: list[MemoryChunk], embedder: Embedder | None = None) -> tuple[int, str]:
    """Embed `chunks` outside any transaction (identical texts once, cached vectors reused), then write the vectors
    in one short transaction. A chunk rewritten meanwhile (text hash changed, row gone) is left alone."""
    if not chunks:
        return 0, ""
    embedder = embedder or get_embedder()
    model_id = embedder.model_id
    vectors = _cached_vectors((c.text_hash for c in chunks), model_id)
    missing: dict[str, str] = {}
    for chunk in chunks:
        if chunk.text_hash not in vectors:
            missing.setdefault(chunk.text_hash, chunk.text)
    error = ""
    fresh: dict[str, list[float]] = {}
    if missing:
        hashes = list(missing)
        try:
            for start in range(0, len(hashes), EMBED_BATCH):
                batch = hashes[start:start + EMBED_BATCH]
                for digest, vector in zip(batch, embedder.embed([missing[h] for h in batch])):
                    fresh[digest] = vector
        except EmbeddingError as exc:
            error = str(exc)
            logger.warning("memory embedding failed for %d chunk(s): %s (the back-fill task retries)",
                           len(missing), exc)
        vectors.update(fresh)
    return _vectors_store(chunks, vectors, fresh, model_id), error


@transaction.atomic
def _vectors_store(chunks: list[MemoryChunk], vectors: dict[str, list[float]], fresh: dict[str, list[float]],
                   model_id: str) -> int:
    if fresh:
        EmbeddingCache.objects.bulk_create([EmbeddingCache(text_hash=h, model=model_id, embedding=v)
                                            for h, v in fresh.items()], ignore_conflicts=True, batch_size=500)
    written = 0
    for chunk in chunks:
        vector = vectors.get(chunk.text_hash)
        if vector is None:
            continue
        written += MemoryChunk.objects.filter(pk=chunk.pk, text_hash=chunk.text_hash).exclude(
            embedding_model=model_id).update(embedding=vector, embedding_model=model_id)
    return written


def memory_embeddings_backfill(*, limit: int = 2000, budget_seconds: float = 45.0) -> dict[str, int | str]:
    """Give vectors of the current model to chunks that have none (an earlier failure) or another model's (the
    embedder was switched: this is the re-embedding job). Batches of EMBED_BATCH; stops at the first failure, after
    `limit` chunks or once `budget_seconds` have passed (the schedule runs it every minute: runs never overlap)."""
    deadline = time.monotonic() + budget_seconds
    try:
        embedder = get_embedder()
    except EmbeddingError as exc:
        return {"embedded": 0, "remaining": _missing_count(""), "error": str(exc)}
    model_id = embedder.model_id
    embedded, error = 0, ""
    while embedded < limit and time.monotonic() < deadline:
        batch = list(MemoryChunk.objects.exclude(embedding_model=model_id).order_by("id")
                     .only("id", "text", "text_hash")[:EMBED_BATCH])
        if not batch:
            break
        written, error = memory_chunks_embed(chunks=batch, embedder=embedder)
        embedded += written
        if error or not written:
            break
    return {"embedded": embedded, "remaining": _missing_count(model_id), "error": error}


def _missing_count(model_id: str) -> int:
    return MemoryChunk.objects.exclude(embedding_model=model_id).count() if model_id else \
        MemoryChunk.objects.filter(embedding__isnull=True).count()
