"""LLM providers API, staff only (docs/runtime.md): list, create, read, change and delete the endpoints hosted agents
run on. The API key is write-only: requests set it (`api_key`) or remove it (`clear_api_key`), responses say only
whether one is set (`has_api_key`). Thin: parse, call runtime_app.services.providers, render."""
from __future__ import annotations

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from goclaw.api import (ClosedBody, IsStaff, StrictBooleanField, StrictCharField, StrictIntegerField, error_responses,
                        validated)
from runtime_app.choices import ProviderKind
from runtime_app.models import LLMProvider
from runtime_app.services import providers as svc


class StrictNumberField(serializers.FloatField):
    """A JSON number (integer or not), never a string or a boolean."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            self.fail("invalid")
        try:
            return super().to_internal_value(data)
        except OverflowError:  # an integer beyond any float
            self.fail("max_value", max_value=self.max_value)


NAME = RegexValidator(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$", "1-64 letters, digits, '-' or '_', starting with a letter "
                                                           "or digit")


class LLMProviderSerializer(serializers.ModelSerializer):
    timeout = serializers.FloatField(source="timeout_seconds", help_text="seconds per model request")
    has_api_key = serializers.BooleanField(read_only=True, help_text="whether a key is set (it is never returned)")

    class Meta:
        model = LLMProvider
        fields = ["name", "kind", "base_url", "model", "timeout", "max_concurrent", "allow_private_network", "enabled",
                  "has_api_key", "created_at", "updated_at"]


class LLMProviderWriteSerializer(ClosedBody, serializers.Serializer):
    """A provider's settings; the service checks them whole (URL and its outbound rule, ranges)."""

    name = StrictCharField(max_length=64, validators=[NAME], help_text="how agents name it (their `provider` field)")
    kind = serializers.ChoiceField(choices=ProviderKind.choices, required=False,
                                   help_text="openai: any OpenAI-compatible chat-completions endpoint; anthropic: the "
                                             "Messages API")
    base_url = StrictCharField(max_length=500, help_text="http(s); e.g. https://api.openai.com/v1, "
                                                         "http://127.0.0.1:11434/v1")
    model = StrictCharField(required=False, allow_blank=True, max_length=128,
                            help_text="default model; an agent's own model wins")
    timeout = StrictNumberField(required=False, min_value=svc.MIN_TIMEOUT, max_value=svc.MAX_TIMEOUT,
                                help_text="seconds per model request")
    max_concurrent = StrictIntegerField(required=False, min_value=svc.MIN_CONCURRENT, max_value=svc.MAX_CONCURRENT,
                                        help_text="model requests in flight at once, across every runner process")
    allow_private_network = StrictBooleanField(required=False, help_text="may reach loopback and private addresses "
                                                                         "(a local model server); never cloud metadata")
    enabled = StrictBooleanField(required=False)
    api_key = StrictCharField(required=False, write_only=True, max_length=svc.MAX_API_KEY_CHARS,
                              help_text="write-only: sealed at rest, never returned")
    clear_api_key = StrictBooleanField(required=False, write_only=True, help_text="write-only: remove the API key")


class LLMProviderPatchSerializer(LLMProviderWriteSerializer):
    """Only the fields given change; `api_key` replaces the key, `clear_api_key: true` removes it."""

    name = StrictCharField(required=False, max_length=64, validators=[NAME],
                           help_text="a rename is refused while agents name it")
    base_url = StrictCharField(required=False, max_length=500)


def _fields(data: dict) -> tuple[dict, str | None, bool]:
    """(model fields, new key, clear the key) from a validated body."""
    data = dict(data)
    api_key, clear = data.pop("api_key", None), data.pop("clear_api_key", False)
    if "timeout" in data:
        data["timeout_seconds"] = data.pop("timeout")
    return data, api_key, clear


WRITE_ERRORS = error_responses({400: "an invalid provider; `details` names each field (provider_invalid)",
                                409: "the name is taken (provider_exists), or agents name the provider being renamed "
                                     "(provider_in_use)"})
NOT_FOUND = error_responses({404: "no provider with this name (provider_not_found)"})


class ProviderListView(ListAPIView):
    permission_classes = [IsStaff]
    staff_permissions = {"GET": ("runtime_app.view_llmprovider",), "POST": ("runtime_app.add_llmprovider",)}
    serializer_class = LLMProviderSerializer

    def get_queryset(self):
        return LLMProvider.objects.order_by("name")

    @extend_schema(summary="LLM providers (staff)")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(request=LLMProviderWriteSerializer, responses={201: LLMProviderSerializer, **WRITE_ERRORS},
                   summary="Add an LLM provider (staff; the API key is write-only)")
    def post(self, request):
        data, api_key, clear = _fields(validated(LLMProviderWriteSerializer, request.data))
        provider = svc.provider_save(actor=request.user, provider=LLMProvider(**data), api_key=api_key,
                                     clear_api_key=clear)
        return Response(LLMProviderSerializer(provider).data, status=201)


class ProviderDetailView(APIView):
    permission_classes = [IsStaff]
    staff_permissions = {"GET": ("runtime_app.view_llmprovider",), "PATCH": ("runtime_app.change_llmprovider",),
                         "DELETE": ("runtime_app.delete_llmprovider",)}

    @extend_schema(responses={200: LLMProviderSerializer, **NOT_FOUND}, summary="One LLM provider (staff)")
    def get(self, request, name):
        return Response(LLMProviderSerializer(svc.provider_get(name)).data)

    @extend_schema(request=LLMProviderPatchSerializer,
                   responses={200: LLMProviderSerializer, **WRITE_ERRORS, **NOT_FOUND},
                   summary="Change some fields of an LLM provider (staff; api_key sets the key, clear_api_key "
                           "removes it)")
    def patch(self, request, name):
        provider = svc.provider_get(name)
        data, api_key, clear = _fields(validated(LLMProviderPatchSerializer, request.data))
        for field, value in data.items():
            setattr(provider, field, value)
        provider = svc.provider_save(actor=request.user, provider=provider, api_key=api_key, clear_api_key=clear)
        return Response(LLMProviderSerializer(provider).data)

    @extend_schema(responses={204: None, **NOT_FOUND, **error_responses({
        409: "agents name the provider (provider_in_use)"})}, summary="Delete an LLM provider (staff)")
    def delete(self, request, name):
        svc.provider_delete(actor=request.user, provider=svc.provider_get(name))
        return Response(status=204)
