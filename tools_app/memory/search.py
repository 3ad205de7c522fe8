"""Hybrid memory search (docs/memory.md): PostgreSQL full-text rank and pgvector cosine similarity over the chunks a
user may see (their own and the shared ones, never another user's), merged with weights (vector 0.7 / text 0.3 by
default, the other side alone gets 1.0 when one side finds nothing), personal chunks ×1.2, a shared chunk hidden by
the user's own document of the same path, then min score, max results. Reads only."""
from __future__ import annotations

import logging
import re
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection, transaction

from tools_app.memory.embedders import Embedder, EmbeddingError, get_embedder
from tools_app.models import Agent
from tools_app.models.memory import MemoryChunk, MemoryDocument

logger = logging.getLogger("goclaw.memory")

DEFAULT_RESULTS = 6
MAX_RESULTS = 50
MAX_QUERY_CHARS = 2000
MAX_QUERY_TERMS = 24
_WORD_RE = re.compile(r"\w+", re.UNICODE)
# Words too common to say anything about a match (the "simple" text configuration keeps every word).
_STOPWORDS = frozenset("""a an and are as at be but by did do does for from had has have he her his how i if in is it
its me my no not of on or our she so that the their them then there these they this to was we were what when where
which who why will with you your""".split())
_TABLE = MemoryChunk._meta.db_table
_DOCUMENTS = MemoryDocument._meta.db_table


@dataclass
class MemoryHit:
    """One result: where it is, its text, and how it scored (each side in [0, 1]; `score` after weights and boost)."""

    path: str
    start_line: int
    end_line: int
    text: str
    score: float
    vector_score: float
    text_score: float
    scope: str  # "personal" | "shared"
    chunk_id: int = 0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("score", "vector_score", "text_score"):
            data[key] = round(data[key], 4)
        return data


@dataclass
class MemorySearch:
    """The results, and notes for the caller (e.g. vector search unavailable, so text only)."""

    hits: list[MemoryHit]
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"results": [h.as_dict() for h in self.hits], "count": len(self.hits), "notes": self.notes}


def query_terms(query: str) -> list[str]:
    """The distinct words of a query, lower-cased, without stop words (unless that leaves none)."""
    words = list(dict.fromkeys(w.lower() for w in _WORD_RE.findall(query)))
    kept = [w for w in words if w not in _STOPWORDS] or words
    return kept[:MAX_QUERY_TERMS]


def _weights(vector_weight: float | None, text_weight: float | None) -> tuple[float, float]:
    v = float(getattr(settings, "MEMORY_VECTOR_WEIGHT", 0.7) if vector_weight is None else vector_weight)
    t = float(getattr(settings, "MEMORY_TEXT_WEIGHT", 0.3) if text_weight is None else text_weight)
    return max(0.0, v), max(0.0, t)


# --- the query vector, cached per process (agents repeat queries) --------------------------------------------------
_query_cache: OrderedDict[tuple[str, str], list[float]] = OrderedDict()
_query_cache_lock = threading.Lock()
_QUERY_CACHE_SIZE = 256


def query_vector(embedder: Embedder, query: str) -> list[float]:
    key = (embedder.model_id, query)
    with _query_cache_lock:
        if key in _query_cache:
            _query_cache.move_to_end(key)
            return _query_cache[key]
    vector = embedder.embed_one(query)
    with _query_cache_lock:
        _query_cache[key] = vector
        while len(_query_cache) > _QUERY_CACHE_SIZE:
            _query_cache.popitem(last=False)
    return vector


# --- the two sides ------------------------------------------------------------------------------------------------------
def _scope_sql(agent_id: int, user: str | None, path_prefix: str) -> tuple[str, list[Any]]:
    """The WHERE clause every side shares: this agent, shared chunks or the user's own, under the prefix."""
    if user is None:
        sql, params = "agent_id = %s AND user_id IS NULL", [agent_id]
    else:
        sql, params = "agent_id = %s AND (user_id IS NULL OR user_id = %s)", [agent_id, user]
    if path_prefix:
        escaped = path_prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        sql += " AND path LIKE %s"
        params.append(escaped + "%")
    return sql, params


def vector_candidates(agent_id: int, user: str | None, path_prefix: str, vector: list[float], model_id: str,
                      limit: int) -> list[tuple[int, float]]:
    """(chunk id, cosine similarity) of the nearest chunks embedded by `model_id`, through the HNSW index
    (ef_search from GOCLAW_MEMORY_HNSW_EF_SEARCH; iterative scans keep filtered queries from coming back short)."""
    where, params = _scope_sql(agent_id, user, path_prefix)
    literal = "[" + ",".join(repr(float(x)) for x in vector) + "]"
    ef = int(getattr(settings, "MEMORY_HNSW_EF_SEARCH", 100))
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT set_config('hnsw.ef_search', %s, true), "
                       "set_config('hnsw.iterative_scan', 'strict_order', true)", [str(max(ef, limit))])
        cursor.execute(
            f"SELECT id, 1 - (embedding <=> %s::vector) FROM {_TABLE} "
            f"WHERE {where} AND embedding_model = %s AND embedding IS NOT NULL "
            f"ORDER BY embedding <=> %s::vector LIMIT %s",
            [literal, *params, model_id, literal, limit])
        return [(row[0], float(row[1])) for row in cursor.fetchall()]


def text_candidates(agent_id: int, user: str | None, path_prefix: str, terms: list[str],
                    limit: int) -> list[tuple[int, float]]:
    """(chunk id, ts_rank) of the chunks holding the terms, best first (GIN index on the generated column). Chunks
    holding every term come first; if they are fewer than `limit`, chunks holding any term are added. Each side
    ranks at most GOCLAW_MEMORY_TEXT_CANDIDATES matches, so a query of common words stays cheap (ts_rank reads each
    candidate's tsvector; the vector side and the merge still see the best passages of the whole memory)."""
    if not terms:
        return []
    where, params = _scope_sql(agent_id, user, path_prefix)
    cap = int(getattr(settings, "MEMORY_TEXT_CANDIDATES", 100))
    found = _ranked(" & ".join(terms), where, params, limit, cap)  # \w+ words: no to_tsquery operator inside
    if len(found) < limit and len(terms) > 1:
        seen = {cid for cid, _ in found}
        found += [row for row in _ranked(" | ".join(terms), where, params, limit, cap) if row[0] not in seen]
        found = sorted(found, key=lambda row: -row[1])[:limit]
    return found


def _ranked(tsquery: str, where: str, params: list[Any], limit: int, cap: int | None) -> list[tuple[int, float]]:
    inner = f"SELECT id, tsv FROM {_TABLE} WHERE tsv @@ to_tsquery('simple', %s) AND {where}"
    inner_params: list[Any] = [tsquery, *params]
    if cap is not None:
        inner += " LIMIT %s"
        inner_params.append(cap)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT m.id, ts_rank(m.tsv, to_tsquery('simple', %s)) AS rank FROM ({inner}) m "
                       f"ORDER BY rank DESC, m.id LIMIT %s", [tsquery, *inner_params, limit])
        return [(row[0], float(row[1])) for row in cursor.fetchall()]


def _coverage(text: str, terms: list[str]) -> float:
    if not terms:
        return 0.0
    words = {w.lower() for w in _WORD_RE.findall(text)}
    return sum(1 for t in terms if t in words) / len(terms)


# --- merge ---------------------------------------------------------------------------------------------------------------
def memory_search(*, agent: Agent, user_id: str | None, query: str, max_results: int | None = None,
                  path_prefix: str = "", min_score: float = 0.0, vector_weight: float | None = None,
                  text_weight: float | None = None, embedder: Embedder | None = None) -> MemorySearch:
    """The chunks of `agent`'s memory that best answer `query` for `user_id` (empty: shared memory only)."""
    query = (query or "")[:MAX_QUERY_CHARS]
    max_results = DEFAULT_RESULTS if max_results is None else max(1, min(int(max_results), MAX_RESULTS))
    user = user_id or None
    notes: list[str] = []
    if not query.strip():
        return MemorySearch([], ["empty query"])
    limit = max(20, max_results * 4)
    terms = query_terms(query)
    vector_side: list[tuple[int, float]] = []
    try:
        embedder = embedder or get_embedder()
        vector_side = vector_candidates(agent.pk, user, path_prefix, query_vector(embedder, query), embedder.model_id,
                                        limit)
    except EmbeddingError as exc:
        notes.append(f"vector search unavailable ({exc}); results are from full-text search only")
    text_side = text_candidates(agent.pk, user, path_prefix, terms, limit)
    ids = {cid for cid, _ in vector_side} | {cid for cid, _ in text_side}
    if not ids:
        return MemorySearch([], notes)
    rows = _candidate_rows(agent.pk, user, ids)
    w_vec, w_text = _weights(vector_weight, text_weight)
    if not vector_side:
        w_vec, w_text = 0.0, 1.0
    elif not text_side:
        w_vec, w_text = 1.0, 0.0
    vec_scores = dict(vector_side)
    top_rank = max((rank for _, rank in text_side), default=0.0) or 1.0
    # Full-text rank, scaled to the best of this query, times the share of the query's words the chunk holds: a
    # chunk with one common word of five does not look like an exact match just because it ranks first.
    text_scores = {cid: (rank / top_rank) * _coverage(rows[cid].text, terms) for cid, rank in text_side if cid in rows}
    boost = float(getattr(settings, "MEMORY_PERSONAL_BOOST", 1.2))
    best: dict[tuple[str, int, int], MemoryHit] = {}
    for cid, chunk in rows.items():
        personal = chunk.user_id is not None
        if chunk.shadowed:
            continue  # the user's own document of that path replaces the shared one, as reads do
        v, t = max(0.0, vec_scores.get(cid, 0.0)), text_scores.get(cid, 0.0)
        score = (w_vec * v + w_text * t) * (boost if personal else 1.0)
        hit = MemoryHit(path=chunk.path, start_line=chunk.start_line, end_line=chunk.end_line, text=chunk.text,
                        score=score, vector_score=v, text_score=t, scope="personal" if personal else "shared",
                        chunk_id=cid)
        key = (chunk.path, chunk.start_line, chunk.end_line)
        if key not in best or (personal, hit.score) > (best[key].scope == "personal", best[key].score):
            best[key] = hit
    hits = sorted(best.values(), key=lambda h: (-h.score, h.path, h.start_line))
    hits = [h for h in hits if h.score >= min_score] if min_score and min_score > 0 else hits
    return MemorySearch(hits[:max_results], notes)


class _Row(NamedTuple):
    id: int
    path: str
    start_line: int
    end_line: int
    text: str
    user_id: str | None
    shadowed: bool  # a shared chunk whose path the user has a document of their own at


def _candidate_rows(agent_id: int, user: str | None, ids: set[int]) -> dict[int, _Row]:
    """The candidates' rows and, for shared ones, whether the user's own document of that path hides them: one
    statement (this runs on every search)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT c.id, c.path, c.start_line, c.end_line, c.text, c.user_id, "
            f"(c.user_id IS NULL AND %s::text IS NOT NULL AND EXISTS (SELECT 1 FROM {_DOCUMENTS} d "
            f"WHERE d.agent_id = %s AND d.user_id = %s AND d.path = c.path)) "
            f"FROM {_TABLE} c WHERE c.id = ANY(%s)", [user, agent_id, user, list(ids)])
        return {row[0]: _Row(*row) for row in cursor.fetchall()}

