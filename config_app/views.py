"""The admin page "Configuration: export / import": download the export; upload a document, see its diff, apply
it. Between the diff and the apply the document waits sealed in a ConfigDraft row that only its uploader may
apply (within DRAFT_TTL); the apply re-validates everything. Thin: the services do the work."""
from __future__ import annotations

import uuid
from datetime import timedelta

from django.contrib import admin, messages
from django.http import HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from config_app.document import document_dump, document_load
from config_app.errors import ConfigInvalid
from config_app.models import ConfigDraft
from config_app.permissions import APPLY_PERMISSION, EXPORT_PERMISSION, may_apply
from config_app.services import config_export, config_import
from goclaw import crypto
from goclaw.authz import person_required

DRAFT_TTL = timedelta(hours=1)


def _draft_context(draft: ConfigDraft) -> str:
    return f"config_app.configdraft:{draft.pk}:document"


def _page(request, **context) -> TemplateResponse:
    return TemplateResponse(request, "config_app/config_page.html", {
        **admin.site.each_context(request), "title": "Configuration: export / import",
        "may_apply": may_apply(request.user), **context})


@person_required(EXPORT_PERMISSION)  # the page shows the export; a dry run's plan shows the current configuration
@require_http_methods(["GET", "POST"])
def config_page(request):
    """GET: the page. POST: an uploaded (or pasted) document, checked as a dry run; its diff, and an apply button."""
    if request.method == "GET":
        return _page(request)
    upload = request.FILES.get("file")
    text = upload.read() if upload else request.POST.get("document", "").encode()
    prune = request.POST.get("prune") == "on"
    try:
        plan = config_import(document_load(text), dry_run=True, prune=prune, actor=request.user)
    except ConfigInvalid as exc:
        return _page(request, problems=exc.lines, prune=prune)
    draft = None
    if may_apply(request.user):
        ConfigDraft.objects.filter(created_at__lt=timezone.now() - DRAFT_TTL).delete()
        draft = ConfigDraft(created_by=request.user, prune=prune)
        draft.document_sealed = crypto.encrypt_bytes(text, associated_data=_draft_context(draft))
        draft.save()
    return _page(request, plan=plan, draft=draft, prune=prune)


@person_required(EXPORT_PERMISSION, APPLY_PERMISSION)
@require_POST
def config_apply(request):
    """Apply the uploader's draft (re-validated whole); the draft is gone afterwards either way."""
    draft_id = request.POST.get("draft", "")
    draft = ConfigDraft.objects.filter(pk=draft_id, created_by=request.user,
                                       created_at__gte=timezone.now() - DRAFT_TTL).first() \
        if _is_uuid(draft_id) else None
    if draft is None:
        messages.error(request, "That upload is no longer available (it expired or was applied): upload it again.")
        return HttpResponseRedirect(reverse("config:page"))
    try:
        text = crypto.decrypt_bytes(draft.document_sealed, associated_data=_draft_context(draft))
    except crypto.DecryptionError:
        text = None
    prune = draft.prune
    draft.delete()
    if text is None:
        messages.error(request, "That upload cannot be opened any more (the encryption key changed): upload it again.")
        return HttpResponseRedirect(reverse("config:page"))
    try:
        plan = config_import(document_load(text), dry_run=False, prune=prune, actor=request.user)
    except ConfigInvalid as exc:
        return _page(request, problems=exc.lines, prune=prune)
    messages.success(request, f"Configuration applied: {len(plan['created'])} created, {len(plan['changed'])} "
                              f"changed, {len(plan['removed'])} removed.")
    return _page(request, plan=plan, applied=True)


@person_required(EXPORT_PERMISSION)
def config_download(request):
    """The export as a YAML attachment."""
    response = HttpResponse(document_dump(config_export()), content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="goclaw-config.yaml"'
    return response


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
