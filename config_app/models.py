"""What configuration as code remembers between imports: which environment variable each secret came from, and the
documents staff upload in the admin between the diff and the apply (sealed, short-lived)."""
from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class SecretSource(models.Model):
    """`{env: NAME}` provenance of one secret of one entity. It holds while the sealed column still has the
    `fingerprint` (SHA-256 of the sealed text) it had after the import; any other write makes the export say
    `{set: true}` again, since the value may no longer come from that variable."""

    section = models.CharField(max_length=64)
    key = models.CharField(max_length=600, help_text="the entity's natural key, as the plan labels it")
    path = models.CharField(max_length=200, help_text='e.g. "env.API_TOKEN" or "config_overrides.headers.Authorization"')
    env_var = models.CharField(max_length=128)
    fingerprint = models.CharField(max_length=64)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["section", "key", "path"]
        constraints = [models.UniqueConstraint(fields=["section", "key", "path"], name="secret_source_unique")]

    def __str__(self) -> str:
        return f"{self.section} {self.key} {self.path} <- ${self.env_var}"


class ConfigDraft(models.Model):
    """A document uploaded on the admin page, kept sealed (goclaw.crypto, bound to this row) until its uploader
    applies it or it expires: the browser carries only the draft's id, never the document."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    document_sealed = models.TextField()
    prune = models.BooleanField(default=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        permissions = [("apply_configuration", "Can apply a configuration document (import)"),
                       ("export_configuration", "Can export the configuration document and see import dry runs")]

    def __str__(self) -> str:
        return f"draft {self.pk} by {self.created_by_id}"
