"""Memory API (docs/memory.md): an agent's memory documents per user (`?user_id=`; none = the shared layer), read,
written (chunked and embedded like a write_file), deleted and searched exactly as the memory_search tool does. Staff
may reach any agent's memory; an agent token only its own. Thin: parse, call a service or selector, render."""
from __future__ import annotations

from django.db.models import Count, Q
from django.db.models.functions import Length
from django.shortcuts import get_object_or_404
from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from goclaw.api import (ClosedBody, IsAgentOrStaff, StrictCharField, StrictIntegerField, agent_of, error_responses,
                        validated, validated_query)
from goclaw.errors import NotFound, PermissionDenied
from tools_app.memory.search import MAX_QUERY_CHARS, MAX_RESULTS, memory_search
from tools_app.models import Agent
from tools_app.models.memory import MEMORY_PATH_MAX, MemoryDocument
from tools_app.services import memory as svc


class UserQuerySerializer(serializers.Serializer):
    user_id = StrictCharField(required=False, allow_blank=True, max_length=255,
                              help_text="the user whose memory this is; empty or absent: the agent's shared memory")


class DocumentSummarySerializer(serializers.Serializer):
    path = serializers.CharField()
    user_id = serializers.CharField(allow_null=True, help_text="null: shared by every user")
    scope = serializers.CharField(help_text="personal | shared")
    size = serializers.IntegerField(help_text="characters")
    content_hash = serializers.CharField()
    chunks = serializers.IntegerField()
    embedded_chunks = serializers.IntegerField(help_text="chunks with a vector of the current embedder or another")
    updated_at = serializers.DateTimeField()


class DocumentSerializer(DocumentSummarySerializer):
    content = serializers.CharField()
    created_at = serializers.DateTimeField()
    embedding_error = serializers.CharField(required=False, help_text="on a write: why its chunks have no vector yet")


class DocumentWriteSerializer(ClosedBody, serializers.Serializer):
    content = StrictCharField(allow_blank=True)


class SearchRequestSerializer(ClosedBody, serializers.Serializer):
    query = StrictCharField(max_length=MAX_QUERY_CHARS)
    max_results = StrictIntegerField(required=False, min_value=1, max_value=MAX_RESULTS)
    path_prefix = StrictCharField(required=False, allow_blank=True, max_length=MEMORY_PATH_MAX)
    min_score = serializers.FloatField(required=False, min_value=0, max_value=10)
    user_id = StrictCharField(required=False, allow_blank=True, max_length=255)


class SearchHitSerializer(serializers.Serializer):
    path = serializers.CharField()
    start_line = serializers.IntegerField()
    end_line = serializers.IntegerField()
    text = serializers.CharField()
    score = serializers.FloatField(help_text="weighted sum of the two sides, ×1.2 for personal chunks")
    vector_score = serializers.FloatField(help_text="cosine similarity, 0-1")
    text_score = serializers.FloatField(help_text="full-text rank scaled to the query's best, times word coverage")
    scope = serializers.CharField()


class SearchResponseSerializer(serializers.Serializer):
    results = SearchHitSerializer(many=True)
    count = serializers.IntegerField()
    notes = serializers.ListField(child=serializers.CharField())


def _agent(request, key: str) -> Agent:
    if "\x00" in key:
        raise NotFound("no such agent")
    agent = get_object_or_404(Agent, key=key)
    caller = agent_of(request)
    if caller is not None and caller.pk != agent.pk:
        raise PermissionDenied("an agent may only reach its own memory", code="memory_not_yours")
    return agent


def _counted(rows):
    return rows.annotate(n_chunks=Count("chunks"), size=Length("content"),
                         n_embedded=Count("chunks", filter=Q(chunks__embedding__isnull=False)))


def _summary(document: MemoryDocument) -> dict:
    """A document row annotated by `_counted`."""
    return {"path": document.path, "user_id": document.user_id, "scope": "shared" if document.is_shared else "personal",
            "size": document.size, "content_hash": document.content_hash, "chunks": document.n_chunks,
            "embedded_chunks": document.n_embedded, "updated_at": document.updated_at}


def _detail(document: MemoryDocument, **extra) -> dict:
    return {**_summary(document), "content": document.content, "created_at": document.created_at, **extra}


NOT_YOURS = error_responses({403: "an agent token for another agent (memory_not_yours)"})


class MemoryListView(APIView):
    permission_classes = [IsAgentOrStaff]
    staff_permissions = {"GET": ("tools_app.view_memorydocument",)}

    @extend_schema(parameters=[UserQuerySerializer], responses={200: DocumentSummarySerializer(many=True), **NOT_YOURS},
                   summary="The memory documents a user sees: their own and the shared ones (staff, the agent)")
    def get(self, request, key):
        agent = _agent(request, key)
        user = validated_query(UserQuerySerializer, request).get("user_id") or None
        documents = svc.memory_documents_visible(agent=agent, user_id=user)
        counted = {d.pk: d for d in _counted(MemoryDocument.objects.filter(pk__in=[d.pk for d in documents]))
                   .defer("content")}
        return Response([_summary(counted[d.pk]) for d in documents])


class MemoryDocumentView(APIView):
    permission_classes = [IsAgentOrStaff]
    staff_permissions = {"GET": ("tools_app.view_memorydocument",),
                         "PUT": ("tools_app.add_memorydocument", "tools_app.change_memorydocument"),
                         "DELETE": ("tools_app.delete_memorydocument",)}

    @extend_schema(parameters=[UserQuerySerializer], responses={200: DocumentSerializer, **NOT_YOURS, **error_responses({
        404: "no such agent, or no document at this path for the user nor shared (memory_document_not_found)",
        400: "not a memory path (memory_path_invalid)"})},
        summary="Read a memory document: the user's own, else the shared one (staff, the agent)")
    def get(self, request, key, path):
        agent = _agent(request, key)
        user = validated_query(UserQuerySerializer, request).get("user_id") or None
        document = svc.memory_document_get(agent=agent, user_id=user, path=svc.memory_path_clean(path))
        if document is None:
            raise svc.MemoryDocumentNotFound(f"no memory document {path}")
        return Response(_detail(_counted(MemoryDocument.objects.filter(pk=document.pk)).get()))

    @extend_schema(parameters=[UserQuerySerializer], request=DocumentWriteSerializer,
                   responses={200: DocumentSerializer, 201: DocumentSerializer, **NOT_YOURS, **error_responses({
                       400: "not a memory path (memory_path_invalid) or too large (memory_too_large)"})},
                   summary="Write a memory document of the user (shared without user_id); .md files are re-indexed")
    def put(self, request, key, path):
        agent = _agent(request, key)
        user = validated_query(UserQuerySerializer, request).get("user_id") or None
        content = validated(DocumentWriteSerializer, request.data)["content"]
        written = svc.memory_document_write(agent=agent, user_id=user, path=path, content=content)
        body = _detail(_counted(MemoryDocument.objects.filter(pk=written.document.pk)).get())
        if written.embedding_error:
            body["embedding_error"] = written.embedding_error
        return Response(body, status=201 if written.created else 200)

    @extend_schema(parameters=[UserQuerySerializer], responses={204: None, **NOT_YOURS, **error_responses({
        404: "the user (or the shared layer) has no document at this path"})},
        summary="Delete the user's memory document (the shared one without user_id)")
    def delete(self, request, key, path):
        agent = _agent(request, key)
        user = validated_query(UserQuerySerializer, request).get("user_id") or None
        svc.memory_document_delete(agent=agent, user_id=user, path=path)
        return Response(status=204)


class MemorySearchView(APIView):
    permission_classes = [IsAgentOrStaff]
    staff_permissions = {"POST": ("tools_app.view_memorydocument",)}  # a read: the search changes nothing

    @extend_schema(request=SearchRequestSerializer, responses={200: SearchResponseSerializer, **NOT_YOURS},
                   summary="Hybrid memory search for a user, as the memory_search tool (staff, the agent)")
    def post(self, request, key):
        agent = _agent(request, key)
        data = validated(SearchRequestSerializer, request.data)
        result = memory_search(agent=agent, user_id=data.get("user_id") or None, query=data["query"],
                               max_results=data.get("max_results"), path_prefix=data.get("path_prefix", ""),
                               min_score=data.get("min_score") or 0.0)
        payload = result.as_dict()
        for hit in payload["results"]:
            hit.pop("chunk_id", None)
        return Response(payload)


urlpatterns = [
    path("agents/<str:key>/memory", MemoryListView.as_view(), name="memory-list"),
    path("agents/<str:key>/memory/search", MemorySearchView.as_view(), name="memory-search"),
    path("agents/<str:key>/memory/<path:path>", MemoryDocumentView.as_view(), name="memory-document"),
]
