"""Memory (P10): files routed to memory documents, chunked and embedded with the real local model, found again by
hybrid search; per-user isolation with the shared layer; chunking boundaries; the embedding cache."""
from __future__ import annotations

import json

import pytest
from django.db import connection, transaction

from tests.factories import make_agent
from tools_app import pipeline
from tools_app.base import ToolContext, ToolError
from tools_app.builtin import fs
from tools_app.calls import CallContext, ToolCall
from tools_app.memory.chunking import chunk_text
from tools_app.memory.embedders import Embedder, EmbeddingError, get_embedder
from tools_app.memory.search import memory_search
from tools_app.memory.tools import MemoryGetTool, MemorySearchTool
from tools_app.models.memory import EmbeddingCache, MemoryChunk, MemoryDocument
from tools_app.services.memory import (memory_document_delete, memory_document_write, memory_embeddings_backfill)
from tools_app.workspace import workspace_build

FS = {t.name: t for t in fs.TOOLS}
SEARCH, GET = MemorySearchTool(), MemoryGetTool()

# A small hand-written corpus: one note per topic, so the expected match of each query is unambiguous.
CORPUS = {
    "memory/birds.md": "The blue heron nests on the east pier every April.\nIt leaves again in late September.\n",
    "memory/garden.md": "Tomatoes need staking before the first heavy summer storm.\nWater them in the morning.\n",
    "memory/car.md": "The car's winter tyres are stored in the garage loft.\nSwap them in November.\n",
    "memory/kitchen.md": "Descale the espresso machine once a month with citric acid.\n",
    "memory/taxes.md": "The tax return is due on the last day of July; receipts are in the blue folder.\n",
    "memory/health.md": "Bob is allergic to peanuts and carries an epinephrine pen.\n",
    "memory/music.md": "Rehearsal for the choir is on Thursday evenings at the old church hall.\n",
    "memory/travel.md": "Passport expires in 2027; renew it six months before any trip abroad.\n",
    "memory/work.md": "The quarterly report goes to Dana; she prefers charts over tables.\n",
    "memory/pets.md": "The cat gets half a pouch of wet food at 7 pm and dry food in the morning.\n",
}


def ctx_for(agent, user_id: str = "") -> ToolContext:
    return ToolContext(agent_key=agent.key, agent_id=agent.pk, call=CallContext(user_id=user_id),
                       workspace=workspace_build(agent, user_id, agent.other_config))


def ok(tool, ctx: ToolContext, **args) -> str:
    result = tool.run(ctx, args)
    assert not result.is_error, result.for_llm
    return result.for_llm


def search(agent, user_id: str, query: str, **args) -> list[dict]:
    return json.loads(ok(SEARCH, ctx_for(agent, user_id), query=query, **args))["results"]


# --- write → chunks → search ----------------------------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_a_note_written_with_write_file_is_chunked_embedded_and_found_by_memory_search_through_the_pipeline():
    agent = make_agent()
    content = CORPUS["memory/birds.md"]
    wrote = pipeline.execute(ToolCall(agent, "write_file", {"path": "memory/birds.md", "content": content},
                                      user_id="alice"))
    assert (wrote.status, wrote.for_llm) == ("ok", f"wrote {len(content)} bytes to memory/birds.md (created)"), \
        wrote.for_llm
    chunk = MemoryChunk.objects.get(agent=agent)
    assert (chunk.user_id, chunk.path, chunk.start_line, chunk.end_line) == ("alice", "memory/birds.md", 1, 2)
    assert chunk.embedding is not None and chunk.embedding_model == get_embedder().model_id
    assert not (agent.workspace_path / "alice" / "memory").exists()

    found = pipeline.execute(ToolCall(agent, "memory_search", {"query": "where does the heron nest?"},
                                      user_id="alice"))
    assert found.status == "ok", found.for_llm
    [hit] = json.loads(found.for_llm)["results"]
    assert (hit["path"], hit["start_line"], hit["end_line"], hit["scope"]) == ("memory/birds.md", 1, 2, "personal")
    assert hit["text"] == CORPUS["memory/birds.md"].rstrip("\n")
    read = pipeline.execute(ToolCall(agent, "read_file", {"path": "memory/birds.md"}, user_id="alice"))
    assert read.for_llm == "[memory/birds.md lines 1-2 of 2]\n" + CORPUS["memory/birds.md"]


def test_memory_paths_are_routed_and_other_paths_stay_on_disk(agent):
    ctx = ctx_for(agent, "alice")
    for path in ("MEMORY.md", "memory.md", "memory/a.md", "memory/deep/b.txt"):
        ok(FS["write_file"], ctx, path=path, content=f"note in {path}\n")
    ok(FS["write_file"], ctx, path="notes/memory.md", content="on disk\n")
    assert sorted(MemoryDocument.objects.filter(agent=agent).values_list("path", flat=True)) == \
        ["MEMORY.md", "memory.md", "memory/a.md", "memory/deep/b.txt"]
    assert (ctx.workspace.root / "notes" / "memory.md").read_text() == "on disk\n"
    assert not (ctx.workspace.root / "MEMORY.md").exists()
    # Only .md documents are chunked: memory/deep/b.txt is stored and readable but not indexed.
    assert set(MemoryChunk.objects.filter(agent=agent).values_list("path", flat=True)) == \
        {"MEMORY.md", "memory.md", "memory/a.md"}
    assert ok(FS["read_file"], ctx, path="memory/deep/b.txt").endswith("note in memory/deep/b.txt\n")
    listing = ok(FS["list_files"], ctx, path="memory", recursive=True)
    assert "memory/a.md" in listing and "memory/deep/b.txt" in listing


def test_editing_a_memory_file_replaces_its_chunks_and_the_old_text_is_no_longer_found(agent):
    ctx = ctx_for(agent, "alice")
    ok(FS["write_file"], ctx, path="memory/car.md", content=CORPUS["memory/car.md"])
    before = set(MemoryChunk.objects.filter(agent=agent).values_list("id", flat=True))
    ok(FS["edit"], ctx, path="memory/car.md", old_string="garage loft", new_string="basement shelf")
    after = MemoryChunk.objects.filter(agent=agent)
    assert before.isdisjoint(after.values_list("id", flat=True))
    assert [c.text for c in after] == ["The car's winter tyres are stored in the basement shelf.\nSwap them in November."]
    assert search(agent, "alice", "basement shelf")[0]["path"] == "memory/car.md"
    assert not [h for h in search(agent, "alice", "loft", min_score=0.3) if "loft" in h["text"]]


def test_hybrid_ranking_puts_the_exact_phrase_match_and_the_paraphrase_match_in_the_top_results(agent):
    for path, content in CORPUS.items():
        memory_document_write(agent=agent, user_id=None, path=path, content=content)
    notes = {"memory/plants.md": "Remember to water the orchids every Sunday morning.\n",  # the exact phrase
             "memory/plants2.md": "Once a week, at the weekend, the orchid pots need a drink.\n",  # its paraphrase
             "memory/lawn.md": "Water the lawn every evening when it is dry.\n"}  # shares words, not meaning
    for path, content in notes.items():
        memory_document_write(agent=agent, user_id=None, path=path, content=content)
    hits = search(agent, "", "water the orchids every Sunday", max_results=3)
    assert [h["path"] for h in hits[:2]] == ["memory/plants.md", "memory/plants2.md"]
    assert hits[0]["text_score"] == 1.0 and hits[1]["text_score"] == 0.0  # the paraphrase came from the vectors
    assert hits[2]["path"] == "memory/lawn.md" and hits[2]["text_score"] > hits[1]["text_score"]
    # Paraphrases with no word in common with their note still find it first.
    for query, path in (("which foods must Bob avoid because of his allergy?", "memory/health.md"),
                        ("when should I feed the kitty", "memory/pets.md"),
                        ("renewing travel documents", "memory/travel.md"),
                        ("singing practice night", "memory/music.md")):
        assert search(agent, "", query, max_results=3)[0]["path"] == path, query
    exact = search(agent, "", "winter tyres are stored in the garage loft", max_results=3)
    assert exact[0]["path"] == "memory/car.md" and exact[0]["text_score"] == 1.0


def test_search_results_respect_max_results_path_prefix_and_min_score(agent):
    for path, content in CORPUS.items():
        memory_document_write(agent=agent, user_id=None, path=path, content=content)
    memory_document_write(agent=agent, user_id=None, path="MEMORY.md", content="The heron is my favourite bird.\n")
    assert len(search(agent, "", "notes")) == 6
    assert len(search(agent, "", "notes", max_results=2)) == 2
    assert {h["path"] for h in search(agent, "", "heron", path_prefix="memory/")} <= set(CORPUS)
    assert [h["path"] for h in search(agent, "", "heron", path_prefix="MEMORY")] == ["MEMORY.md"]
    strong = search(agent, "", "blue heron east pier", min_score=0.5)
    assert strong and all(h["score"] >= 0.5 for h in strong)
    assert search(agent, "", "blue heron east pier", min_score=1.5) == []


# --- per-user isolation -------------------------------------------------------------------------------------------
def test_a_user_never_sees_another_users_memory_only_their_own_and_the_shared(agent):
    memory_document_write(agent=agent, user_id="alice", path="memory/secret.md",
                          content="Alice's locker code is 4711 and she keeps it in the red notebook.\n")
    memory_document_write(agent=agent, user_id="bob", path="memory/secret.md",
                          content="Bob's locker code is 9001 and he keeps it in the green notebook.\n")
    memory_document_write(agent=agent, user_id=None, path="memory/office.md",
                          content="The office locker room is on the second floor.\n")
    for user, own, other in (("alice", "4711", "9001"), ("bob", "9001", "4711")):
        hits = search(agent, user, "locker code notebook", max_results=10)
        texts = " ".join(h["text"] for h in hits)
        assert own in texts and other not in texts
        assert {(h["path"], h["scope"]) for h in hits} == {("memory/secret.md", "personal"), ("memory/office.md", "shared")}
        assert ok(GET, ctx_for(agent, user), path="memory/secret.md").count(own) == 1
    # A call without a user sees the shared layer only, and another agent sees nothing of this one.
    assert {h["path"] for h in search(agent, "", "locker code notebook", max_results=10)} == {"memory/office.md"}
    assert search(make_agent(), "alice", "locker code notebook") == []
    carol = ctx_for(agent, "carol")
    with pytest.raises(ToolError, match="no memory file memory/secret.md"):
        GET.run(carol, {"path": "memory/secret.md"})
    with pytest.raises(ToolError, match="file not found"):
        FS["read_file"].run(carol, {"path": "memory/secret.md"})


def test_the_shared_file_is_the_fallback_until_the_user_writes_their_own_which_then_hides_it(agent):
    memory_document_write(agent=agent, user_id=None, path="MEMORY.md",
                          content="Team standup is at 9:30 in the blue room.\n")
    alice, bob = ctx_for(agent, "alice"), ctx_for(agent, "bob")
    assert ok(FS["read_file"], alice, path="MEMORY.md").endswith("9:30 in the blue room.\n")
    assert [h["scope"] for h in search(agent, "alice", "standup time")] == ["shared"]
    ok(FS["write_file"], alice, path="MEMORY.md", content="My standup moved to 10:15 in the green room.\n")
    assert MemoryDocument.objects.filter(agent=agent, path="MEMORY.md").count() == 2
    assert ok(FS["read_file"], alice, path="MEMORY.md").endswith("10:15 in the green room.\n")
    assert ok(FS["read_file"], bob, path="MEMORY.md").endswith("9:30 in the blue room.\n")
    alice_hits = search(agent, "alice", "standup blue room")
    assert [(h["scope"], "10:15" in h["text"]) for h in alice_hits] == [("personal", True)]
    assert [h["scope"] for h in search(agent, "bob", "standup blue room")] == ["shared"]
    # Deleting her copy brings the shared one back for her.
    memory_document_delete(agent=agent, user_id="alice", path="MEMORY.md")
    assert ok(FS["read_file"], alice, path="MEMORY.md").endswith("9:30 in the blue room.\n")


def test_personal_chunks_outrank_equally_good_shared_ones(agent):
    memory_document_write(agent=agent, user_id=None, path="memory/a.md", content="Lunch is served at noon.\n")
    memory_document_write(agent=agent, user_id="alice", path="memory/b.md", content="Lunch is served at noon.\n")
    hits = search(agent, "alice", "when is lunch served")
    assert [h["scope"] for h in hits] == ["personal", "shared"]
    assert hits[0]["score"] == pytest.approx(hits[1]["score"] * 1.2, rel=1e-3)


def test_a_call_without_a_user_writes_the_shared_file(agent):
    ok(FS["write_file"], ctx_for(agent, ""), path="memory/rules.md", content="Never deploy on Fridays.\n")
    assert MemoryDocument.objects.get(agent=agent, path="memory/rules.md").user_id is None
    assert ok(GET, ctx_for(agent, "anyone"), path="memory/rules.md", from_line=1, to_line=1) == \
        "[memory/rules.md lines 1-1 of 1]\nNever deploy on Fridays."


# --- memory_get ----------------------------------------------------------------------------------------------------
def test_memory_get_returns_the_whole_file_or_a_line_range_and_refuses_other_paths(agent):
    memory_document_write(agent=agent, user_id="alice", path="memory/list.md",
                          content="".join(f"line {n}\n" for n in range(1, 11)))
    ctx = ctx_for(agent, "alice")
    assert ok(GET, ctx, path="memory/list.md").startswith("[memory/list.md lines 1-10 of 10]\nline 1\n")
    assert ok(GET, ctx, path="memory/list.md", from_line=3, to_line=5) == \
        "[memory/list.md lines 3-5 of 10]\nline 3\nline 4\nline 5"
    assert ok(GET, ctx, path="./memory/list.md", from_line=9, to_line=50).endswith("line 9\nline 10")
    for path, message in (("notes.md", "memory paths are"), ("memory/../SOUL.md", "not a clean"),
                          ("/etc/passwd", "not a clean")):
        with pytest.raises(ToolError, match=message):
            GET.run(ctx, {"path": path})
    with pytest.raises(ToolError, match="past the end"):
        GET.run(ctx, {"path": "memory/list.md", "from_line": 11})


# --- chunking -------------------------------------------------------------------------------------------------------
def test_chunks_are_whole_lines_of_at_most_max_chars_with_overlapping_tail_lines():
    lines = [f"{n:03d} " + "x" * 95 for n in range(1, 31)]  # 30 lines of 99 characters (100 with the newline)
    chunks = chunk_text("\n".join(lines) + "\n", max_chars=1000, overlap=200)
    assert all(len(c.text) <= 1000 for c in chunks)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 10), (9, 18), (17, 26), (25, 30)]
    # Every chunk is exactly its lines, and the next starts with the last lines (<= 200 chars) of the one before.
    for chunk in chunks:
        assert chunk.text == "\n".join(lines[chunk.start_line - 1:chunk.end_line])


def test_a_blank_line_ends_a_chunk_once_it_is_half_full_and_a_giant_line_is_cut_into_pieces():
    para = "\n".join(["a" * 99] * 6)  # 600 characters: more than half of 1000
    chunks = chunk_text(f"{para}\n\n{para}\n", max_chars=1000, overlap=200)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 7), (6, 13)]
    assert chunks[0].text.endswith("a\n")  # the blank line closes the first chunk
    giant = chunk_text("short\n" + "y" * 2500 + "\nafter\n", max_chars=1000, overlap=200)
    assert [(c.start_line, c.end_line, len(c.text)) for c in giant] == \
        [(1, 1, 5), (2, 2, 1000), (2, 2, 1000), (2, 2, 500), (3, 3, 5)]
    assert chunk_text("") == [] and chunk_text("\n\n  \n") == []
    assert chunk_text("one line") == [chunk_text("one line\n")[0]]


def test_the_overlap_is_clamped_below_half_the_chunk_so_chunking_always_moves_forward():
    chunks = chunk_text("\n".join(f"line {n}" for n in range(100)), max_chars=40, overlap=500)
    assert all(len(c.text) <= 40 for c in chunks)
    assert all(b.start_line > a.start_line and b.end_line > a.end_line for a, b in zip(chunks, chunks[1:]))
    assert chunks[-1].end_line == 100


# --- the embedding cache ---------------------------------------------------------------------------------------------
def test_identical_chunks_are_embedded_once_and_reuse_the_cached_vector(agent, monkeypatch):
    embedder = get_embedder()
    calls: list[list[str]] = []
    real = embedder.embed

    def counting(texts):
        calls.append(list(texts))
        return real(texts)

    monkeypatch.setattr(embedder, "embed", counting)
    para = "\n".join(f"Paragraph line {n}: " + "keys and neighbours " * 5 for n in range(5))  # > 500 characters
    first = para + "\n\nBring the spare keys to the neighbour on Saturday.\n"
    memory_document_write(agent=agent, user_id="alice", path="memory/keys.md", content=first)
    memory_document_write(agent=agent, user_id="bob", path="memory/keys.md", content=first)
    memory_document_write(agent=make_agent(), user_id=None, path="MEMORY.md", content=first)
    old_texts = [c.text for c in chunk_text(first)]
    assert len(old_texts) == 2 and calls == [old_texts]
    assert EmbeddingCache.objects.filter(model=embedder.model_id).count() == 2
    assert MemoryChunk.objects.filter(embedding__isnull=False).count() == 6
    assert len({tuple(c.embedding) for c in MemoryChunk.objects.filter(text=old_texts[0])}) == 1
    # A rewrite that keeps the first paragraph embeds only the chunk that changed.
    calls.clear()
    second = para + "\n\nThe neighbour is away in August.\n"
    memory_document_write(agent=agent, user_id="alice", path="memory/keys.md", content=second)
    new_texts = [c.text for c in chunk_text(second)]
    assert new_texts[0] == old_texts[0] and calls == [[new_texts[1]]]
    assert memory_embeddings_backfill()["remaining"] == 0


# --- search mechanics (one statement per side, the query embedded on a pool thread) --------------------------------
class _DownEmbedder(Embedder):
    """An embedder whose server is down: the search is full-text only."""

    model_id = "down:test"

    def embed(self, texts):
        raise EmbeddingError("embeddings server unreachable")


def test_chunks_holding_every_word_come_first_then_chunks_holding_some_and_never_another_users(agent):
    for user, path, content in ((None, "memory/both.md", "The copper kettle whistles.\n"),
                                (None, "memory/one.md", "A copper pipe under the sink.\n"),
                                ("alice", "memory/other.md", "The kettle is descaled monthly.\n"),
                                ("bob", "memory/bob.md", "Bob's copper kettle collection.\n"),
                                (None, "memory/none.md", "Nothing relevant here at all.\n")):
        memory_document_write(agent=agent, user_id=user, path=path, content=content)
    found = memory_search(agent=agent, user_id="alice", query="copper kettle", embedder=_DownEmbedder())
    assert "full-text search only" in found.notes[0]
    assert [(h.path, h.text_score) for h in found.hits][:1] == [("memory/both.md", 1.0)]
    assert {h.path for h in found.hits} == {"memory/both.md", "memory/one.md", "memory/other.md"}
    assert all(0 < h.text_score < 1 for h in found.hits[1:])


@pytest.mark.django_db(transaction=True)
def test_a_search_inside_a_transaction_sees_the_notes_written_in_it_by_words_and_by_meaning():
    agent = make_agent()
    memory_document_write(agent=agent, user_id=None, path="memory/music.md", content=CORPUS["memory/music.md"])
    with transaction.atomic():
        memory_document_write(agent=agent, user_id="alice", path="memory/health.md", content=CORPUS["memory/health.md"])
        assert search(agent, "alice", "peanuts epinephrine")[0]["path"] == "memory/health.md"
        by_meaning = search(agent, "alice", "which foods must Bob avoid because of his allergy?", max_results=1)
        assert by_meaning[0]["path"] == "memory/health.md" and by_meaning[0]["vector_score"] > 0.3
    assert search(agent, "alice", "choir rehearsal")[0]["path"] == "memory/music.md"


def _hnsw_settings_now() -> tuple[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('hnsw.ef_search'), current_setting('hnsw.iterative_scan')")
        return cursor.fetchone()


@pytest.mark.django_db(transaction=True)
def test_the_vector_search_settings_hold_on_every_connection_and_after_a_rolled_back_transaction(settings):
    agent = make_agent()
    memory_document_write(agent=agent, user_id=None, path="memory/pets.md", content=CORPUS["memory/pets.md"])
    search(agent, "", "feeding the cat")
    default = str(settings.MEMORY_HNSW_EF_SEARCH)
    assert _hnsw_settings_now() == (default, "strict_order")
    settings.MEMORY_HNSW_EF_SEARCH = 150
    try:
        with transaction.atomic():
            assert search(agent, "", "feeding the cat")[0]["path"] == "memory/pets.md"
            assert _hnsw_settings_now() == ("150", "strict_order")
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    assert _hnsw_settings_now() == (default, "strict_order")  # a setting made inside the transaction went with it
    search(agent, "", "feeding the cat")
    assert _hnsw_settings_now() == ("150", "strict_order")
    connection.close()
    assert search(agent, "", "feeding the cat")[0]["path"] == "memory/pets.md"  # a new connection sets them again
    assert _hnsw_settings_now() == ("150", "strict_order")


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_the_vector_side_runs_on_a_second_connection_with_the_same_results(monkeypatch):
    from tools_app.memory import search as search_module

    agent = make_agent()
    for path, content in CORPUS.items():
        memory_document_write(agent=agent, user_id=None, path=path, content=content)
    memory_document_write(agent=agent, user_id="bob", path="memory/bob.md", content="Bob's cat is allergic to fish.\n")
    query = "which foods must Bob avoid because of his allergy?"
    sequential = memory_search(agent=agent, user_id="alice", query=query).as_dict()
    # Tests run without persistent connections, where the search keeps to one; force the parallel path here.
    monkeypatch.setattr(search_module, "_sides_in_parallel", search_module._autocommit)
    parallel = memory_search(agent=agent, user_id="alice", query=query).as_dict()
    assert parallel == sequential and parallel["results"][0]["path"] == "memory/health.md"
    assert all(hit["path"] != "memory/bob.md" for hit in parallel["results"])
    # The pool thread's connection was closed after the search (CONN_MAX_AGE 0), not left open.
    assert search_module._search_pool().submit(lambda: connection.connection is None).result()
    with transaction.atomic():  # inside a transaction both sides read on this connection and see its new rows
        memory_document_write(agent=agent, user_id="alice", path="memory/nuts.md",
                              content="Alice keeps the peanut-free snacks in the top drawer.\n")
        assert search(agent, "alice", "peanut-free snacks drawer")[0]["path"] == "memory/nuts.md"


@pytest.mark.django_db(transaction=True)
def test_a_second_connection_is_used_only_when_enabled_outside_transactions_with_persistent_connections(settings,
                                                                                                    monkeypatch):
    from tools_app.memory.search import _sides_in_parallel

    settings.MEMORY_SEARCH_PARALLEL = True
    assert not _sides_in_parallel()  # the tests' CONN_MAX_AGE is 0: a connection per search would cost more
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 600)
    assert _sides_in_parallel()
    with transaction.atomic():
        assert not _sides_in_parallel()  # a second connection would not see this transaction's rows
    settings.MEMORY_SEARCH_PARALLEL = False
    assert not _sides_in_parallel()
