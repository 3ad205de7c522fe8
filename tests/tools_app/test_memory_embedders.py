"""The embedders (P10): the OpenAI-compatible HTTP embedder against a real local server speaking that protocol
(tests/tools_app/embedding_server.py, a subprocess), an embedding failure leaving chunks searchable by text and the
back-fill task filling their vectors later, and the switch between embedders re-embedding old vectors."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

from goclaw.services import SCHEDULES
from tools_app.memory import BACKFILL_SCHEDULE, tasks
from tools_app.memory.embedders import EmbeddingError, LocalEmbedder, OpenAIEmbedder, get_embedder
from tools_app.memory.search import memory_search
from tools_app.models.memory import EmbeddingCache, MemoryChunk
from tools_app.services.memory import memory_document_write

SERVER = Path(__file__).with_name("embedding_server.py")
API_KEY = "sk-test-embeddings-0123456789abcdef"


class EmbeddingServer:
    """The test server in a subprocess on a free 127.0.0.1 port."""

    def __init__(self, *args: str) -> None:
        self.process = subprocess.Popen([sys.executable, str(SERVER), "--port", "0", *args],
                                        stdout=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        assert line.startswith("PORT "), line
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"
        deadline = time.monotonic() + 10
        while True:
            try:
                requests.get(f"{self.url}/stats", timeout=1)
                break
            except requests.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stats(self) -> dict:
        return requests.get(f"{self.url}/stats", timeout=5).json()

    def fail(self, failing: bool) -> None:
        requests.post(f"{self.url}/control", json={"fail": failing}, timeout=5).raise_for_status()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=10)
        self.process.stdout.close()


@pytest.fixture
def server():
    running = EmbeddingServer("--api-key", API_KEY)
    yield running
    running.stop()


@pytest.fixture
def openai_settings(settings, server):
    settings.MEMORY_EMBEDDER = "openai"
    settings.MEMORY_EMBEDDINGS_URL = f"{server.url}/v1"
    settings.MEMORY_EMBEDDINGS_MODEL = "test-embed-small"
    settings.MEMORY_EMBEDDINGS_API_KEY = API_KEY
    settings.MEMORY_EMBEDDINGS_ALLOW_PRIVATE_NETWORK = True  # the test server listens on loopback
    return settings


def local(url: str, *args, **kwargs) -> OpenAIEmbedder:
    """An HTTP embedder allowed to reach the loopback test server."""
    return OpenAIEmbedder(url, *args, allow_private_network=True, **kwargs)


def test_the_http_embedder_speaks_the_openai_protocol_to_a_real_server(server):
    embedder = local(f"{server.url}/v1", "test-embed-small", API_KEY, batch_size=2)
    vectors = embedder.embed(["red apples", "green apples", "a tax form", "red apples"])
    assert [len(v) for v in vectors] == [384] * 4
    assert vectors[0] == vectors[3]
    assert sum(a * b for a, b in zip(*vectors[:2])) > sum(a * b for a, b in zip(vectors[0], vectors[2]))
    assert server.stats()["requests"] == 2 and server.stats()["inputs"] == 4  # batches of two
    assert embedder.model_id == "openai:test-embed-small"


def test_http_embedder_failures_are_embedding_errors_that_never_show_the_key(server):
    with pytest.raises(EmbeddingError, match="HTTP 401") as info:
        local(f"{server.url}/v1", "m", "sk-wrong-key-abcdef0123456789").embed(["x"])
    assert "sk-wrong" not in str(info.value)
    server.fail(True)
    with pytest.raises(EmbeddingError, match="HTTP 500"):
        local(f"{server.url}/v1", "m", API_KEY).embed(["x"])
    with pytest.raises(EmbeddingError, match="unreachable"):
        local("http://127.0.0.1:9/v1", "m", API_KEY, timeout=2).embed(["x"])
    # A server that ignores `dimensions` and answers another width is refused, not stored.
    server.fail(False)
    with pytest.raises(EmbeddingError, match="width 16, not 384"):
        local(f"{server.url}/v1", "m", API_KEY, send_dimensions=False)._vectors(
            type("R", (), {"json": lambda self: {"data": [{"index": 0, "embedding": [1.0] * 16}]}})(), 1)


def test_the_http_embedder_refuses_a_loopback_server_unless_private_networks_are_allowed(server, openai_settings):
    """Fail closed: the default refuses the local server at dial time (nothing reaches it), naming the setting."""
    openai_settings.MEMORY_EMBEDDINGS_ALLOW_PRIVATE_NETWORK = False
    for url in (f"{server.url}/v1", server.url.replace("127.0.0.1", "2130706433") + "/v1"):
        openai_settings.MEMORY_EMBEDDINGS_URL = url
        with pytest.raises(EmbeddingError) as info:
            get_embedder().embed(["red apples"])
        assert "refused" in str(info.value) and "a loopback address" in str(info.value)
        assert "GOCLAW_EMBEDDINGS_ALLOW_PRIVATE_NETWORK=true" in str(info.value) and API_KEY not in str(info.value)
    with pytest.raises(EmbeddingError, match="cloud metadata endpoint"):
        OpenAIEmbedder("http://169.254.169.254/v1", "m", API_KEY, allow_private_network=True).embed(["x"])
    assert server.stats()["requests"] == 0

    openai_settings.MEMORY_EMBEDDINGS_ALLOW_PRIVATE_NETWORK = True
    assert len(get_embedder().embed(["red apples"])[0]) == 384
    assert server.stats()["requests"] == 1


def test_the_setting_picks_the_embedder_and_the_local_one_is_loaded_once(openai_settings):
    assert isinstance(get_embedder(), OpenAIEmbedder) and get_embedder() is get_embedder()
    openai_settings.MEMORY_EMBEDDER = "local"
    local = get_embedder()
    assert isinstance(local, LocalEmbedder) and get_embedder() is local
    assert local.embed(["x"])[0] and local._session is not None
    openai_settings.MEMORY_EMBEDDER = "bogus"
    with pytest.raises(EmbeddingError, match="local or openai"):
        get_embedder()


def test_memory_written_with_the_http_embedder_is_searchable_by_meaning_and_reuses_its_cache(agent, server,
                                                                                              openai_settings):
    memory_document_write(agent=agent, user_id="alice", path="memory/fruit.md",
                          content="Alice buys red apples at the Saturday market.\n")
    chunk = MemoryChunk.objects.get(agent=agent)
    assert chunk.embedding_model == "openai:test-embed-small" and len(chunk.embedding) == 384
    hits = memory_search(agent=agent, user_id="alice", query="saturday apples").hits
    assert hits[0].path == "memory/fruit.md" and hits[0].vector_score > 0.3
    before = server.stats()["inputs"]
    memory_document_write(agent=agent, user_id="bob", path="memory/fruit.md",
                          content="Alice buys red apples at the Saturday market.\n")
    assert server.stats()["inputs"] == before  # the cached vector, no request


@pytest.mark.django_db(transaction=True)
def test_when_embedding_fails_chunks_are_kept_without_vectors_and_the_backfill_task_fills_them(server,
                                                                                                openai_settings):
    from tests.factories import make_agent

    agent = make_agent()
    server.fail(True)
    written = memory_document_write(agent=agent, user_id="alice", path="memory/trip.md",
                                    content="The ferry to the island leaves at 06:40 from pier 3.\n")
    assert (written.chunks, written.embedded) == (1, 0) and "HTTP 500" in written.embedding_error
    chunk = MemoryChunk.objects.get(agent=agent)
    assert chunk.embedding is None and chunk.embedding_model == ""
    # Still found by its words while the embedder is down (the query cannot be embedded either).
    down = memory_search(agent=agent, user_id="alice", query="ferry island")
    assert [h.path for h in down.hits] == ["memory/trip.md"] and "full-text search only" in down.notes[0]
    assert tasks.backfill_embeddings()["embedded"] == 0  # still failing: nothing written, nothing lost
    assert BACKFILL_SCHEDULE in SCHEDULES and SCHEDULES[BACKFILL_SCHEDULE][0] == "tools_app.memory.tasks.backfill_embeddings"

    server.fail(False)
    report = tasks.backfill_embeddings()
    assert (report["embedded"], report["remaining"], report["error"]) == (1, 0, "")
    chunk.refresh_from_db()
    assert chunk.embedding_model == "openai:test-embed-small" and len(chunk.embedding) == 384
    assert EmbeddingCache.objects.filter(model="openai:test-embed-small").count() == 1
    up = memory_search(agent=agent, user_id="alice", query="when does the boat go")
    assert up.notes == [] and up.hits[0].vector_score > 0


def test_switching_embedders_re_embeds_old_vectors_and_searches_only_compare_one_models_vectors(agent,
                                                                                                openai_settings):
    openai_settings.MEMORY_EMBEDDER = "local"
    memory_document_write(agent=agent, user_id=None, path="MEMORY.md", content="The boiler is serviced in May.\n")
    assert MemoryChunk.objects.get(agent=agent).embedding_model == get_embedder().model_id
    openai_settings.MEMORY_EMBEDDER = "openai"
    # Before the re-embedding run the old model's vector is not compared with the new model's query vector.
    assert memory_search(agent=agent, user_id=None, query="heating maintenance month").hits == []
    report = tasks.backfill_embeddings()
    assert (report["embedded"], report["remaining"]) == (1, 0)
    assert MemoryChunk.objects.get(agent=agent).embedding_model == "openai:test-embed-small"
    assert json.dumps(memory_search(agent=agent, user_id=None, query="boiler serviced").as_dict()).count("MEMORY.md") == 1
