"""Memory hybrid search over N chunks (default 100,000) of real text: the docstrings and documentation files of the
installed packages, chunked by the memory chunker and embedded with the default (local) model. Never random vectors.

Reports indexing throughput (embedding, row insertion, HNSW build: each separately), `memory_search` p50 / p95
(end to end with the query embedded, and with the query vector cached) against the 30 ms target, and recall@10 of
the vector side (the HNSW index at the configured ef_search) against exact search (a sequential scan), target 0.95.

Embedding 100k chunks takes tens of minutes here, so vectors are cached by text hash under the benchmark data dir
(`$GOCLAW_BENCH_DATA/memory/`, never in git) and reused by later runs. Run a small check with `--chunks 3000`.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import random
import sys
import time
from pathlib import Path

from _common import BENCH_DATA, django_setup, percentile, summary_ms, write_result

AGENT_KEY = "bench-memory"
WARMUP_QUERIES = 50
SYSTEM_DOCS = Path("/usr/share/doc")
MAX_DOC_BYTES = 2_000_000
SKIP_NAMES = {"LICENSE", "LICENSE.txt", "LICENSE.md", "RECORD", "COPYING", "AUTHORS", "WHEEL", "top_level.txt",
              "entry_points.txt", "INSTALLER", "REQUESTED"}


def site_packages() -> list[Path]:
    """Where the installed text is: the venv's site-packages, the standard library (its docstrings ship with the
    interpreter), then the documentation of the machine's installed Debian packages (/usr/share/doc: READMEs, NEWS,
    changelogs). The Python packages alone give ~54k distinct chunks of 500 characters, the stdlib ~9k more."""
    import site
    import sysconfig

    roots = [Path(p) for p in site.getsitepackages() if Path(p).is_dir()] or [Path(sys.prefix) / "lib"]
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    roots += [stdlib] if stdlib.is_dir() and stdlib not in roots else []
    return roots + ([SYSTEM_DOCS] if SYSTEM_DOCS.is_dir() else [])


def documents(limit_chars: int):
    """(pseudo path, text) of every docstring and text document of the installed packages and the standard library,
    in a stable order."""
    total = 0
    for root in site_packages():
        for path in sorted(root.rglob("*")):
            if total >= limit_chars:
                return
            if not path.is_file() or path.name in SKIP_NAMES or "__pycache__" in path.parts:
                continue
            rel = path.relative_to(root).as_posix()
            if root == SYSTEM_DOCS:
                if path.name.startswith("copyright") or path.suffix in (".html", ".png", ".svg", ".css", ".js"):
                    continue
                text = _system_doc(path)
                if text:
                    total += len(text)
                    yield "doc/" + rel, text
                continue
            if root.name != "site-packages":  # the standard library (its own site-packages is not ours)
                if rel.startswith("site-packages/"):
                    continue
                rel = "stdlib/" + rel
            if path.suffix == ".py":
                try:
                    tree = ast.parse(path.read_text(encoding="utf-8"))
                except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
                    continue
                docs = []
                for node in ast.walk(tree):
                    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                        doc = ast.get_docstring(node)
                        if doc and len(doc) >= 60:
                            docs.append(doc)
                text = "\n\n".join(docs)
            elif path.suffix in (".rst", ".md", ".txt") or path.name == "METADATA":
                try:
                    text = path.read_text(encoding="utf-8")
                except (UnicodeDecodeError, OSError):
                    continue
            else:
                continue
            if text.strip():
                total += len(text)
                yield rel, text


def _system_doc(path: Path) -> str:
    """A Debian package's document as text (gzip-compressed or not); '' for binary or oversized files."""
    import gzip

    try:
        if path.stat().st_size > MAX_DOC_BYTES:
            return ""
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        return data[:MAX_DOC_BYTES * 4].decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError, gzip.BadGzipFile):
        return ""


def corpus(n: int, max_chars: int, overlap: int) -> list[tuple[str, int, int, str, str]]:
    """The first n distinct chunks (path, start, end, text, hash) of the installed packages' text."""
    from tools_app.memory.chunking import chunk_text

    seen: set[str] = set()
    out = []
    for rel, text in documents(limit_chars=2_000_000_000):
        for chunk in chunk_text(text, max_chars, overlap):
            words = chunk.text.split()
            if len(words) < 8 or chunk.text_hash in seen or "\x00" in chunk.text:
                continue
            seen.add(chunk.text_hash)
            out.append((f"memory/{rel}.md", chunk.start_line, chunk.end_line, chunk.text, chunk.text_hash))
            if len(out) >= n:
                return out
    return out


class VectorCache:
    """text hash -> float32 vector, in one .npz per model under the benchmark data dir."""

    def __init__(self, model_id: str) -> None:
        import numpy as np

        self.np = np
        safe = hashlib.sha256(model_id.encode()).hexdigest()[:12]
        self.path = BENCH_DATA / "memory" / f"vectors-{safe}.npz"
        self.meta_path = self.path.with_suffix(".json")
        self.vectors: dict[str, object] = {}
        if self.path.exists():
            data = np.load(self.path)
            self.vectors = dict(zip(data["hashes"].tolist(), data["vectors"]))
        self.meta = json.loads(self.meta_path.read_text()) if self.meta_path.exists() else {}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        hashes = list(self.vectors)
        tmp = self.path.with_name(self.path.stem + ".tmp.npz")
        self.np.savez(tmp, hashes=self.np.array(hashes), vectors=self.np.stack([self.vectors[h] for h in hashes]))
        os.replace(tmp, self.path)
        self.meta_path.write_text(json.dumps(self.meta, indent=2))


def embed_missing(chunks, cache: VectorCache, embedder) -> dict:
    import numpy as np

    missing = [(h, text) for *_, text, h in chunks if h not in cache.vectors]
    started = time.perf_counter()
    done = 0
    for start in range(0, len(missing), 256):
        batch = missing[start:start + 256]
        for (digest, _), vector in zip(batch, embedder.embed([t for _, t in batch])):
            cache.vectors[digest] = np.asarray(vector, dtype=np.float32)
        done += len(batch)
        if done % 2048 < 256 or done == len(missing):
            elapsed = time.perf_counter() - started
            print(f"  embedded {done}/{len(missing)} ({done / elapsed:.1f}/s)", flush=True)
            cache.save()
    elapsed = time.perf_counter() - started
    if len(missing) >= 100:  # a handful of new chunks says nothing about throughput
        cache.meta["last_measured"] = {"chunks": len(missing), "seconds": round(elapsed, 2),
                                       "chunks_per_second": round(len(missing) / elapsed, 2),
                                       "mean_chars": round(sum(len(t) for _, t in missing) / len(missing), 1)}
        cache.save()
    return {"newly_embedded": len(missing), "seconds": round(elapsed, 2),
            "chunks_per_second": round(len(missing) / elapsed, 2) if missing else None,
            "cached_before_run": len(chunks) - len(missing), "last_full_measurement": cache.meta.get("last_measured")}


def load_database(agent, chunks, cache: VectorCache, model_id: str, reload: bool = False) -> dict:
    """Replace the benchmark agent's memory with the corpus (unless it already holds exactly it)."""
    from django.db import connection, transaction

    from tools_app.models.memory import MemoryChunk, MemoryDocument

    signature = hashlib.sha256("".join(h for *_, h in chunks).encode()).hexdigest()
    marker = MemoryDocument.objects.filter(agent=agent, path="memory/.bench-signature").first()
    if not reload and marker is not None and marker.content == signature and \
            MemoryChunk.objects.filter(agent=agent).count() == len(chunks):
        return {"reused": True}
    MemoryDocument.objects.filter(agent=agent).delete()
    index_sql = ("CREATE INDEX memory_chunk_embedding_hnsw ON tools_app_memorychunk "
                 "USING hnsw (embedding vector_cosine_ops) WITH (m = 16, ef_construction = 64)")
    with connection.cursor() as cursor:
        cursor.execute("DROP INDEX IF EXISTS memory_chunk_embedding_hnsw")
    started = time.perf_counter()
    by_path: dict[str, list] = {}
    for item in chunks:
        by_path.setdefault(item[0], []).append(item)
    with transaction.atomic():
        docs = MemoryDocument.objects.bulk_create([
            MemoryDocument(agent=agent, user_id=None, path=path, content="\n\n".join(c[3] for c in items),
                           content_hash=hashlib.sha256(path.encode()).hexdigest()) for path, items in by_path.items()])
        doc_ids = {d.path: d.pk for d in docs}
        rows = [MemoryChunk(document_id=doc_ids[path], agent=agent, user_id=None, path=path, start_line=start,
                            end_line=end, text=text, text_hash=digest, embedding=cache.vectors[digest],
                            embedding_model=model_id) for path, start, end, text, digest in chunks]
        MemoryChunk.objects.bulk_create(rows, batch_size=2000)
        MemoryDocument.objects.create(agent=agent, user_id=None, path="memory/.bench-signature", content=signature,
                                      content_hash=signature)
    inserted = time.perf_counter() - started
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SET maintenance_work_mem = '512MB'")
        cursor.execute(index_sql)
        cursor.execute("ANALYZE tools_app_memorychunk")
    built = time.perf_counter() - started
    return {"reused": False, "insert_seconds": round(inserted, 2), "insert_rows_per_second": round(len(chunks) / inserted, 1),
            "hnsw_build_seconds": round(built, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--max-chars", type=int, default=500, help="chunk size (the memory default is 1000)")
    parser.add_argument("--overlap", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--reload", action="store_true", help="insert the chunks again even if they are there")
    args = parser.parse_args()

    django_setup()
    import numpy as np
    from django.db import connection, transaction

    from tools_app.memory import search as memory_search_module
    from tools_app.memory.embedders import get_embedder
    from tools_app.memory.search import memory_search, vector_candidates
    from tools_app.models import Agent
    from tools_app.services.agents import agent_create

    embedder = get_embedder()
    started = time.perf_counter()
    chunks = corpus(args.chunks, args.max_chars, args.overlap)
    corpus_seconds = time.perf_counter() - started
    print(f"corpus: {len(chunks)} chunks in {corpus_seconds:.1f}s", flush=True)
    cache = VectorCache(embedder.model_id)
    embedding = embed_missing(chunks, cache, embedder)
    agent = Agent.objects.filter(key=AGENT_KEY).first() or agent_create(key=AGENT_KEY, provider="openai")
    loading = load_database(agent, chunks, cache, embedder.model_id, reload=args.reload)
    # A running server's steady state: autovacuum moves the full-text index's pending list (GIN fastupdate, up to
    # gin_pending_list_limit = 4 MB, read linearly by every text search) into the index within minutes of a bulk
    # load; measured right after one, the text side was 2-3 times slower. Cheap when done already.
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE tools_app_memorychunk")
    loading["vacuum_seconds"] = round(time.perf_counter() - started, 2)
    print(f"database: {loading}", flush=True)

    rng = random.Random(args.seed)
    sample = rng.sample(chunks, min(args.queries + WARMUP_QUERIES, len(chunks)))
    warmup_picks, picks = sample[:WARMUP_QUERIES], sample[WARMUP_QUERIES:]
    queries = [" ".join(text.split()[:10]) for _, _, _, text, _ in picks]  # a remembered phrase of a passage
    # Warm-up with other passages (the model's first load, the database's and the OS's caches), as every latency
    # benchmark here does: what is measured is the steady state of a running server.
    for _, _, _, text, _ in warmup_picks:
        memory_search_module._query_cache.clear()
        memory_search(agent=agent, user_id="bench-user", query=" ".join(text.split()[:10]))

    configured_parallel = bool(getattr(__import__("django.conf").conf.settings, "MEMORY_SEARCH_PARALLEL", False))
    # End to end, the query embedded each time (the per-process query cache emptied first).
    total = []
    for query in queries:
        memory_search_module._query_cache.clear()
        t0 = time.perf_counter()
        memory_search(agent=agent, user_id="bench-user", query=query)
        total.append(time.perf_counter() - t0)
    # The same queries with their vectors cached: the database part and the merge.
    warm = []
    for query in queries:
        t0 = time.perf_counter()
        result = memory_search(agent=agent, user_id="bench-user", query=query)
        warm.append(time.perf_counter() - t0)
    # The two sides on two connections (GOCLAW_MEMORY_SEARCH_PARALLEL) against both on the caller's one, query
    # by query in alternating order, so both see the same machine load (the other helpers' work on shared cores).
    from django.conf import settings

    both: dict[bool, list[float]] = {True: [], False: []}
    for i, query in enumerate(queries):
        for parallel in ((True, False) if i % 2 else (False, True)):
            settings.MEMORY_SEARCH_PARALLEL = parallel
            memory_search_module._query_cache.clear()
            t0 = time.perf_counter()
            memory_search(agent=agent, user_id="bench-user", query=query)
            both[parallel].append(time.perf_counter() - t0)
    settings.MEMORY_SEARCH_PARALLEL = configured_parallel
    # Each part alone, for the same queries (which side dominates the tail): the query's embedding, then the
    # full-text and the vector statements as memory_search runs them (it embeds while the text statement runs).
    sides: dict[str, list[float]] = {"embed_query": [], "text_side": [], "vector_side": []}
    limit = max(20, memory_search_module.DEFAULT_RESULTS * 4)
    for query in queries:
        t0 = time.perf_counter()
        vector = embedder.embed_one(query)
        t1 = time.perf_counter()
        memory_search_module.text_side(agent.pk, "bench-user", "", memory_search_module.query_terms(query), limit)
        t2 = time.perf_counter()
        memory_search_module.vector_side(agent.pk, "bench-user", "", vector, embedder.model_id, limit)
        t3 = time.perf_counter()
        for name, seconds in (("embed_query", t1 - t0), ("text_side", t2 - t1), ("vector_side", t3 - t2)):
            sides[name].append(seconds)
    found_own = sum(1 for (_, s, e, text, _), q in zip(picks, queries)
                    if any(h.text == text for h in memory_search(agent=agent, user_id="", query=q).hits))

    # Recall@10 of the vector side: HNSW (configured ef_search) against an exact sequential scan.
    recalls = []
    for query in queries[:100]:
        vector = memory_search_module.query_vector(embedder, query)
        approx = [cid for cid, _ in vector_candidates(agent.pk, None, "", vector, embedder.model_id, 10)]
        literal = "[" + ",".join(repr(float(x)) for x in vector) + "]"
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL enable_indexscan = off")
            cursor.execute("SET LOCAL enable_bitmapscan = off")
            cursor.execute("SELECT id FROM tools_app_memorychunk WHERE agent_id = %s AND embedding IS NOT NULL "
                           "ORDER BY embedding <=> %s::vector LIMIT 10", [agent.pk, literal])
            exact = [row[0] for row in cursor.fetchall()]
        recalls.append(len(set(approx) & set(exact)) / max(1, len(exact)))
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN SELECT id FROM tools_app_memorychunk WHERE agent_id = %s AND user_id IS NULL AND "
                       "embedding_model = %s AND embedding IS NOT NULL ORDER BY embedding <=> %s::vector LIMIT 24",
                       [agent.pk, embedder.model_id, "[" + ",".join(["0.05"] * 384) + "]"])
        plan = [row[0] for row in cursor.fetchall()]

    p95_total, p95_warm = percentile([s * 1000 for s in total], 95), percentile([s * 1000 for s in warm], 95)
    recall = float(np.mean(recalls)) if recalls else None
    write_result("memory", {
        "chunks": len(chunks), "requested_chunks": args.chunks, "chunk_max_chars": args.max_chars,
        "mean_chunk_chars": round(sum(len(c[3]) for c in chunks) / max(1, len(chunks)), 1),
        "model": embedder.model_id, "corpus_seconds": round(corpus_seconds, 1),
        "indexing": {"embedding": embedding, "database": loading},
        "memory_search_end_to_end": summary_ms(total) | {"p95_ms": round(p95_total, 3)},
        "memory_search_query_vector_cached": summary_ms(warm) | {"p95_ms": round(p95_warm, 3)},
        "end_to_end_alternating": {"sides_in_parallel": summary_ms(both[True]), "sides_sequential": summary_ms(both[False]),
                                   "p95_ms": {"sides_in_parallel": round(percentile([s * 1000 for s in both[True]], 95), 3),
                                              "sides_sequential": round(percentile([s * 1000 for s in both[False]], 95), 3)}},
        "search_parallel_sides": configured_parallel,
        "parts_alone": {name: summary_ms(values) | {"p95_ms": round(percentile([s * 1000 for s in values], 95), 3)}
                        for name, values in sides.items()},
        "queries": len(queries), "query_found_its_own_passage": round(found_own / max(1, len(queries)), 3),
        "vector_recall_at_10": round(recall, 4) if recall is not None else None,
        "hnsw_ef_search": int(getattr(__import__("django.conf").conf.settings, "MEMORY_HNSW_EF_SEARCH", 100)),
        "vector_plan": plan[:3],
        "targets": {"p95_ms": 30, "recall_at_10": 0.95,
                    "p95_met_end_to_end": p95_total <= 30, "p95_met_query_vector_cached": p95_warm <= 30,
                    "recall_met": recall is not None and recall >= 0.95},
        "last_result_count": len(result.hits),
    })


if __name__ == "__main__":
    main()
