"""Skills API (docs/skills.md): staff list, read, edit, enable / disable and delete skills; an agent lists and reads
the skills visible to it (the global ones and its own). Publishing is the `publish_skill` tool's job. Thin: parse,
call a selector or a service, render."""
from __future__ import annotations

from django.db.models import Count, Max, QuerySet
from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from goclaw.api import (IsAgentOrStaff, IsStaff, StrictBooleanField, StrictCharField, agent_of, error_responses,
                        validated, validated_query)
from goclaw.errors import NotFound, ValidationError
from tools_app.models import Agent
from tools_app.models.skills import Skill
from tools_app.services import skills as svc
from tools_app.skills import skill_list_visible


class SkillSerializer(serializers.ModelSerializer):
    agent = serializers.SlugRelatedField(slug_field="key", read_only=True, allow_null=True,
                                         help_text="the agent whose skill this is; null: every agent's")
    use_count = serializers.IntegerField(read_only=True, help_text="use_skill calls so far")
    last_used_at = serializers.DateTimeField(read_only=True, allow_null=True)

    class Meta:
        model = Skill
        fields = ["slug", "name", "description", "tags", "version", "enabled", "agent", "source_path", "published_by",
                  "use_count", "last_used_at", "created_at", "updated_at"]


class SkillDetailSerializer(SkillSerializer):
    class Meta(SkillSerializer.Meta):
        fields = SkillSerializer.Meta.fields + ["content", "files"]


class SkillListQuerySerializer(serializers.Serializer):
    agent = StrictCharField(required=False, max_length=64, help_text="staff: only this agent's own skills")
    enabled = serializers.ChoiceField(choices=["true", "false"], required=False)


class SkillScopeQuerySerializer(serializers.Serializer):
    agent = StrictCharField(required=False, allow_blank=True, max_length=64,
                            help_text="staff: which scope's skill - an agent key, or empty for the global one. Left "
                                      "out: the only skill with this slug (409 skill_ambiguous when several scopes "
                                      "have one). Agents always get the skill they see.")


class SkillUpdateSerializer(serializers.Serializer):
    description = StrictCharField(required=False, max_length=svc.DESCRIPTION_MAX_CHARS)
    tags = serializers.ListField(child=StrictCharField(max_length=svc.TAG_MAX_CHARS), required=False,
                                 max_length=svc.TAGS_MAX)
    content = StrictCharField(required=False, help_text="the instructions (a new version)")
    enabled = StrictBooleanField(required=False)
    agent = StrictCharField(required=False, allow_null=True, max_length=64,
                            help_text="move the skill to this agent's scope; null: every agent's")


def _annotated(rows: QuerySet) -> QuerySet:
    """Usage counts in the same query as the rows (no query per skill)."""
    return rows.select_related("agent").annotate(use_count=Count("uses"), last_used_at=Max("uses__at"))


def _skill_for(request, slug: str) -> Skill:
    """The skill `slug` names for this caller: an agent's visible one, or staff's in the scope ?agent= names."""
    agent = agent_of(request)
    scope = validated_query(SkillScopeQuerySerializer, request).get("agent")
    if agent is not None:
        found = _annotated(skill_list_visible(agent.pk).filter(slug=slug)).first() if "\x00" not in slug else None
        if found is None:
            raise NotFound(f"no skill {slug[:64]!r} is visible to this agent")
        return found
    rows = _annotated(Skill.objects.filter(slug=slug)) if "\x00" not in slug else Skill.objects.none()
    if scope is not None:
        rows = rows.filter(agent__isnull=True) if scope == "" else rows.filter(agent__key=scope)
    found = list(rows[:2])
    if not found:
        raise NotFound(f"no skill {slug[:64]!r}" + (" in that scope" if scope is not None else ""))
    if len(found) > 1:
        raise svc.SkillAmbiguous(f"several scopes have a skill {slug[:64]!r}: name one with ?agent=",
                                 details={"agents": [s.agent.key if s.agent_id else None for s in found]})
    return found[0]


class SkillListView(ListAPIView):
    permission_classes = [IsAgentOrStaff]
    staff_permissions = {"GET": ("tools_app.view_skill",)}
    serializer_class = SkillSerializer

    def get_queryset(self):
        agent = agent_of(self.request)
        filters = validated_query(SkillListQuerySerializer, self.request)
        rows = skill_list_visible(agent.pk) if agent is not None else Skill.objects.all()
        if agent is None and "agent" in filters:
            rows = rows.filter(agent__key=filters["agent"])
        if "enabled" in filters:
            rows = rows.filter(enabled=filters["enabled"] == "true")
        return _annotated(rows.defer("content", "files")).order_by("slug", "created_at")

    @extend_schema(parameters=[SkillListQuerySerializer],
                   summary="Skills: all of them (staff), or those visible to the calling agent")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


AMBIGUOUS = error_responses({409: "several scopes have this slug and none was named (skill_ambiguous)"})


class SkillDetailView(APIView):
    staff_permissions = {"GET": ("tools_app.view_skill",), "PATCH": ("tools_app.change_skill",),
                         "DELETE": ("tools_app.delete_skill",)}

    def get_permissions(self):
        method = getattr(getattr(self, "request", None), "method", "GET")
        return [IsAgentOrStaff()] if method in ("GET", "HEAD", "OPTIONS") else [IsStaff()]

    @extend_schema(parameters=[SkillScopeQuerySerializer], responses={200: SkillDetailSerializer, **AMBIGUOUS},
                   summary="One skill with its instructions and files (staff; an agent: one it sees)")
    def get(self, request, slug):
        return Response(SkillDetailSerializer(_skill_for(request, slug)).data)

    @extend_schema(parameters=[SkillScopeQuerySerializer], request=SkillUpdateSerializer,
                   responses={200: SkillDetailSerializer, **error_responses({
                       409: "the target scope already has this slug (skill_slug_taken), or several scopes have it "
                            "and none was named (skill_ambiguous)"})},
                   summary="Edit a skill: description, tags or content (a new version), enabled, scope (staff)")
    def patch(self, request, slug):
        skill = _skill_for(request, slug)
        changes = dict(validated(SkillUpdateSerializer, request.data))
        if "agent" in changes and changes["agent"] is not None:
            key = changes["agent"]
            changes["agent"] = Agent.objects.filter(key=key).first() if "\x00" not in key else None
            if changes["agent"] is None:
                raise ValidationError(f"agent: no agent has the key {key[:64]!r}", code="skill_invalid",
                                      details={"agent": "unknown agent key"})
        skill = svc.skill_update(actor=request.user, skill=skill, **changes)
        return Response(SkillDetailSerializer(_annotated(Skill.objects.filter(pk=skill.pk)).get()).data)

    @extend_schema(parameters=[SkillScopeQuerySerializer], responses={204: None, **AMBIGUOUS},
                   summary="Delete a skill and its usage records (staff)")
    def delete(self, request, slug):
        svc.skill_delete(actor=request.user, skill=_skill_for(request, slug))
        return Response(status=204)


# `str`, not `slug`: a path that is not a slug is a 404 from the view (after the credential check), like any
# unknown skill, rather than a bare "no route".
urlpatterns: list = [
    path("skills", SkillListView.as_view(), name="skill-list"),
    path("skills/<str:slug>", SkillDetailView.as_view(), name="skill-detail"),
]
