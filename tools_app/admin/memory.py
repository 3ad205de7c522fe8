"""Admin for agent memory: documents per agent and user (shared ones marked), their chunks with vector status, a
"re-index" action, and a search page showing each result's text, vector, text and combined scores. Saves, deletes
and re-indexing go through `tools_app.services.memory`; the search page calls the same search as memory_search."""
from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.db import transaction
from django.db.models import Count, Q
from django.template.response import TemplateResponse
from django.urls import path

from goclaw.authz import person_required
from goclaw.errors import ApplicationError
from tools_app.admin.base import ServiceAdmin
from tools_app.memory.search import DEFAULT_RESULTS, MAX_RESULTS, memory_search
from tools_app.models import Agent
from tools_app.models.memory import MemoryChunk, MemoryDocument
from tools_app.services import memory as svc


class MemoryChunkInline(admin.TabularInline):
    model = MemoryChunk
    fields = ["start_line", "end_line", "excerpt", "vector", "embedding_model"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request, obj=None):
        return False

    def get_queryset(self, request):
        return super().get_queryset(request).defer("embedding")

    @admin.display(description="text")
    def excerpt(self, obj: MemoryChunk) -> str:
        return obj.text if len(obj.text) <= 160 else obj.text[:160] + "…"

    @admin.display(description="vector", boolean=True)
    def vector(self, obj: MemoryChunk) -> bool:
        return bool(obj.embedding_model)


class MemoryDocumentForm(forms.ModelForm):
    class Meta:
        model = MemoryDocument
        fields = ["agent", "user_id", "path", "content"]
        widgets = {"content": forms.Textarea(attrs={"rows": 24, "cols": 100, "class": "vLargeTextField"})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["content"].strip = False  # a memory file's final newline is part of it

    def clean_content(self):
        # Browsers send a textarea with CRLF line ends; files written by agents have LF.
        return (self.cleaned_data.get("content") or "").replace("\r\n", "\n")

    def clean_path(self):
        try:
            return svc.memory_path_clean(self.cleaned_data["path"])
        except ApplicationError as exc:
            raise forms.ValidationError(exc.message) from None


@admin.register(MemoryDocument)
class MemoryDocumentAdmin(ServiceAdmin):
    form = MemoryDocumentForm
    list_display = ["path", "agent", "scope", "chunk_count", "embedded_count", "updated_at"]
    list_filter = ["agent", ("user_id", admin.EmptyFieldListFilter)]
    search_fields = ["path", "user_id", "agent__key"]
    readonly_fields = ["content_hash", "created_at", "updated_at"]
    inlines = [MemoryChunkInline]
    actions = ["reindex_selected"]
    change_list_template = "admin/tools_app/memorydocument/change_list.html"

    def get_readonly_fields(self, request, obj=None):
        # Agent, user and path name the document: a change writes new content to the same one.
        return [*self.readonly_fields, "agent", "user_id", "path"] if obj is not None else self.readonly_fields

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("agent").annotate(
            n_chunks=Count("chunks"), n_embedded=Count("chunks", filter=Q(chunks__embedding__isnull=False)))

    @admin.display(description="user", ordering="user_id")
    def scope(self, obj: MemoryDocument) -> str:
        return obj.user_id or "(shared)"

    @admin.display(description="chunks", ordering="n_chunks")
    def chunk_count(self, obj: MemoryDocument) -> int:
        return obj.n_chunks

    @admin.display(description="with vector", ordering="n_embedded")
    def embedded_count(self, obj: MemoryDocument) -> int:
        return obj.n_embedded

    # --- writes through the services -------------------------------------------------------------------------------
    def save_model(self, request, obj, form, change):
        """The admin's save runs inside its own transaction: store and chunk there, embed once it has committed."""
        written = svc.memory_document_write(agent=obj.agent, user_id=obj.user_id or None, path=obj.path,
                                            content=form.cleaned_data.get("content", obj.content), embed=False)
        obj.pk = written.document.pk
        obj._state.adding = False
        document = written.document
        transaction.on_commit(lambda: svc.memory_document_embed(document=document))

    def delete_with_service(self, request, queryset):
        for document in queryset.select_related("agent"):
            svc.memory_document_delete(agent=document.agent, user_id=document.user_id, path=document.path)

    @admin.action(description="Re-index selected (chunk and embed again)", permissions=["change"])
    def reindex_selected(self, request, queryset):
        chunks = embedded = 0
        errors = set()
        for document in queryset.select_related("agent"):
            result = svc.memory_document_reindex(document=document)
            chunks, embedded = chunks + result.chunks, embedded + result.embedded
            if result.embedding_error:
                errors.add(result.embedding_error)
        level = messages.WARNING if errors else messages.SUCCESS
        self.message_user(request, f"Re-indexed {queryset.count()} document(s): {chunks} chunk(s), {embedded} with a "
                                   f"vector." + (f" Embedding failed: {'; '.join(sorted(errors))}" if errors else ""),
                          level)

    # --- the search page -------------------------------------------------------------------------------------------
    def get_urls(self):
        search = person_required("tools_app.view_memorydocument")(self.search_view)
        return [path("search/", self.admin_site.admin_view(search), name="tools_app_memorydocument_search"),
                *super().get_urls()]

    def search_view(self, request):
        """Run memory_search's hybrid search as a chosen agent and user, showing how each result scored."""
        form = MemorySearchForm(request.GET or None)
        result = None
        if form.is_valid():
            data = form.cleaned_data
            result = memory_search(agent=data["agent"], user_id=data.get("user_id") or None, query=data["query"],
                                   max_results=data.get("max_results") or DEFAULT_RESULTS,
                                   path_prefix=data.get("path_prefix") or "", min_score=data.get("min_score") or 0.0)
        return TemplateResponse(request, "admin/tools_app/memorydocument/search.html", {
            **self.admin_site.each_context(request), "opts": self.model._meta, "title": "Search memory",
            "form": form, "result": result})


class MemorySearchForm(forms.Form):
    agent = forms.ModelChoiceField(queryset=Agent.objects.order_by("key"), to_field_name="key")
    user_id = forms.CharField(required=False, max_length=255, help_text="empty: the shared memory only")
    query = forms.CharField(max_length=2000, widget=forms.TextInput(attrs={"size": 80}))
    max_results = forms.IntegerField(required=False, min_value=1, max_value=MAX_RESULTS, initial=DEFAULT_RESULTS)
    path_prefix = forms.CharField(required=False, max_length=500)
    min_score = forms.FloatField(required=False, min_value=0, max_value=10)
