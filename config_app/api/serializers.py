"""The import plan's shape, for the OpenAPI schema (the service builds the plan; nothing is parsed with these)."""
from rest_framework import serializers


class ConfigPlanEntitySerializer(serializers.Serializer):
    section = serializers.CharField()
    key = serializers.CharField(help_text="the entity's natural key")


class ConfigPlanChangeSerializer(ConfigPlanEntitySerializer):
    fields = serializers.DictField(help_text='field -> {"old", "new"}; secrets show "(added)", "(changed)", "(kept)" '
                                             'or "(removed)", never a value')


class ConfigImportPlanSerializer(serializers.Serializer):
    applied = serializers.BooleanField()
    dry_run = serializers.BooleanField()
    created = ConfigPlanEntitySerializer(many=True)
    changed = ConfigPlanChangeSerializer(many=True)
    removed = ConfigPlanEntitySerializer(many=True)
