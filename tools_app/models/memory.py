"""Memory documents and their chunks, embedded with pgvector (docs/memory.md)."""
from __future__ import annotations

from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from pgvector.django import HnswIndex, VectorField

# all-MiniLM-L6-v2's width. Every embedder writes vectors of this width (the HTTP embedder asks its server for it);
# switching to a model of another width is a migration of this column plus a re-embedding run (docs/memory.md).
EMBEDDING_DIMENSIONS = 384
MEMORY_PATH_MAX = 500


class MemoryDocument(models.Model):
    """One memory file of an agent (MEMORY.md, memory/…): a user's own, or shared by all its users when user_id is
    null. The content is the truth; its chunks are an index rebuilt from it."""

    agent = models.ForeignKey("tools_app.Agent", on_delete=models.CASCADE, related_name="memory_documents")
    user_id = models.CharField(max_length=255, null=True, blank=True, help_text="empty: shared by every user")
    path = models.CharField(max_length=MEMORY_PATH_MAX)
    content = models.TextField(blank=True, default="")
    content_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["agent", "user_id", "path"]
        constraints = [
            models.UniqueConstraint(F("agent"), Coalesce("user_id", Value("")), F("path"),
                                    name="memory_document_one_per_scope_path"),
        ]

    def __str__(self) -> str:
        return f"{self.path} ({self.user_id or 'shared'})"

    @property
    def is_shared(self) -> bool:
        return self.user_id is None


class MemoryChunk(models.Model):
    """A line range of a document: searched by its full-text column and its embedding. `agent`, `user_id` and `path`
    repeat the document's so a search filters one table; `embedding` stays null until an embedder succeeds."""

    document = models.ForeignKey(MemoryDocument, on_delete=models.CASCADE, related_name="chunks")
    agent = models.ForeignKey("tools_app.Agent", on_delete=models.CASCADE, related_name="+")
    user_id = models.CharField(max_length=255, null=True, blank=True)
    path = models.CharField(max_length=MEMORY_PATH_MAX)
    start_line = models.PositiveIntegerField()
    end_line = models.PositiveIntegerField()
    text = models.TextField()
    text_hash = models.CharField(max_length=64)
    tsv = models.GeneratedField(expression=SearchVector("text", config="simple"), output_field=SearchVectorField(),
                                db_persist=True)
    embedding = VectorField(dimensions=EMBEDDING_DIMENSIONS, null=True, blank=True)
    embedding_model = models.CharField(max_length=200, blank=True, default="",
                                       help_text="the embedder that made `embedding` (empty: none yet)")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["document", "start_line"]
        indexes = [
            GinIndex(fields=["tsv"], name="memory_chunk_tsv_gin"),
            HnswIndex(name="memory_chunk_embedding_hnsw", fields=["embedding"], m=16, ef_construction=64,
                      opclasses=["vector_cosine_ops"]),
            models.Index(fields=["agent", "user_id"], name="memory_chunk_agent_user"),
            models.Index(fields=["agent"], condition=Q(user_id__isnull=True), name="memory_chunk_agent_shared"),
            models.Index(fields=["embedding_model"], name="memory_chunk_missing_vector",
                         condition=Q(embedding__isnull=True)),
        ]

    def __str__(self) -> str:
        return f"{self.path}:{self.start_line}-{self.end_line}"


class EmbeddingCache(models.Model):
    """A text's vector by (text hash, model), so identical chunks (a rewrite that keeps most lines, the same note in
    two documents) are embedded once."""

    text_hash = models.CharField(max_length=64)
    model = models.CharField(max_length=200)
    embedding = VectorField(dimensions=EMBEDDING_DIMENSIONS)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["text_hash", "model"], name="embedding_cache_hash_model")]

    def __str__(self) -> str:
        return f"{self.model}:{self.text_hash[:12]}"
