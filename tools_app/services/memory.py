"""Writes to agent memory (docs/memory.md), the entry point for the API, the admin and other apps.

The implementation lives in `tools_app.memory.indexing`, beside the chunker and the embedders it drives, because the
memory router, tools and tasks (runtime modules of the `tools_app.memory` package) call it too, and the app's
acyclic-siblings contract forbids `tools_app.memory` and `tools_app.services` importing each other: this module
re-exports it, so the dependency only runs services -> memory."""
from tools_app.memory.indexing import (MemoryDocumentNotFound, MemoryPathInvalid, MemoryWrite, is_memory_path,
                                       memory_chunks_embed, memory_document_delete, memory_document_embed,
                                       memory_document_get, memory_document_reindex, memory_document_write,
                                       memory_documents_visible, memory_embeddings_backfill, memory_path_clean,
                                       scope_user)

__all__ = ["MemoryDocumentNotFound", "MemoryPathInvalid", "MemoryWrite", "is_memory_path", "memory_chunks_embed",
           "memory_document_delete", "memory_document_embed", "memory_document_get", "memory_document_reindex",
           "memory_document_write", "memory_documents_visible", "memory_embeddings_backfill", "memory_path_clean",
           "scope_user"]
