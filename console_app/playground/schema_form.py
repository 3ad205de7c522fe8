"""Django forms built server-side from a tool's JSON Schema `parameters`: one field per property (string, integer,
number, boolean and enum get matching fields; anything nested gets a JSON textarea), and a raw-JSON alternative.
Schemas may come from MCP servers, so they are read defensively and their text is escaped, never trusted."""
from __future__ import annotations

import json
import re
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.utils.html import conditional_escape

MAX_FIELDS = 100          # a schema with more properties is edited as raw JSON only
TEXTAREA_ABOVE = 200      # strings that may be longer than this (or unbounded) get a textarea
MAX_ENUM = 200
_FIELD_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_SCALAR_TYPES = ("string", "integer", "number", "boolean")


class _Omit:
    """A blank optional property: left out of the arguments (the tool's own default applies)."""


OMIT = _Omit()


def property_kind(prop: Any) -> str:
    """How a property is edited: "enum", one of the scalar types, or "json" (objects, arrays, oneOf, unions …)."""
    if not isinstance(prop, dict) or any(k in prop for k in ("oneOf", "anyOf", "allOf", "not", "$ref")):
        return "json"
    values = [prop["const"]] if "const" in prop else prop.get("enum")
    if isinstance(values, list) and 0 < len(values) <= MAX_ENUM and all(
            v is None or isinstance(v, (str, int, float, bool)) for v in values):
        return "enum"
    kind = prop.get("type")
    if isinstance(kind, list):
        rest = [k for k in kind if k != "null"]
        kind = rest[0] if len(rest) == 1 else None
    return kind if kind in _SCALAR_TYPES else "json"


def _number(value: Any) -> int | float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class NumberField(forms.FloatField):
    """A JSON number: whole values stay integers (5, not 5.0)."""

    def to_python(self, value):
        number = super().to_python(value)
        return int(number) if number is not None and number.is_integer() and abs(number) < 2 ** 53 else number


class JSONValueField(forms.CharField):
    """Any JSON value in a textarea (nested properties); `expect` = "object" / "array" checks the top level."""

    def __init__(self, *, expect: str | None = None, **kwargs):
        self.expect = expect
        kwargs.setdefault("widget", forms.Textarea(attrs={"rows": 4, "cols": 80, "class": "vLargeTextField"}))
        super().__init__(strip=False, **kwargs)

    def clean(self, value):
        text = super().clean(value)
        if not (text or "").strip():
            return OMIT
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"not valid JSON: {exc}", code="json") from None
        if self.expect == "object" and not isinstance(data, dict):
            raise ValidationError("must be a JSON object ({…})", code="json_type")
        if self.expect == "array" and not isinstance(data, list):
            raise ValidationError("must be a JSON array ([…])", code="json_type")
        return data


def _choice_key(value: Any, all_strings: bool) -> str:
    return value if all_strings else json.dumps(value)


def _field_for(prop: dict | Any, kind: str, required: bool) -> forms.Field:
    prop = prop if isinstance(prop, dict) else {}
    default, has_default = prop.get("default"), "default" in prop
    common: dict[str, Any] = {"required": False, "label_suffix": ""}
    if kind == "enum":
        values = [prop["const"]] if "const" in prop else prop["enum"]
        all_strings = all(isinstance(v, str) for v in values)
        by_key = {_choice_key(v, all_strings): v for v in values}
        choices = [(key, str(value) if isinstance(value, str) else json.dumps(value)) for key, value in by_key.items()]
        if not required:
            choices.insert(0, ("", "— not set —"))
        field = forms.TypedChoiceField(choices=choices, coerce=by_key.__getitem__, empty_value=OMIT,
                                       **{**common, "required": required})
        if has_default and _choice_key(default, all_strings) in by_key:
            field.initial = _choice_key(default, all_strings)
        return field
    if kind == "string":
        max_length, min_length = _number(prop.get("maxLength")), _number(prop.get("minLength"))
        long_text = max_length is None or max_length > TEXTAREA_ABOVE
        widget = (forms.Textarea(attrs={"rows": 4, "cols": 80, "class": "vLargeTextField"}) if long_text
                  else forms.TextInput(attrs={"class": "vTextField"}))
        # A required string may be "" (write_file's content) unless the schema says otherwise: then blank is an error.
        field = forms.CharField(widget=widget, strip=False, max_length=int(max_length) if max_length is not None else None,
                                min_length=int(min_length) if min_length else None,
                                **{**common, "required": required and bool(min_length)})
        field.initial = default if isinstance(default, str) else None
        return field
    if kind in ("integer", "number"):
        bounds = {"min_value": _number(prop.get("minimum")), "max_value": _number(prop.get("maximum"))}
        if kind == "integer":
            bounds = {k: int(v) if v is not None and float(v).is_integer() else v for k, v in bounds.items()}
            field = forms.IntegerField(**bounds, **{**common, "required": required})
        else:
            field = NumberField(**bounds, **{**common, "required": required})
        field.initial = _number(default)
        return field
    if kind == "boolean":
        if required or has_default:  # always sent: a checkbox
            field = forms.BooleanField(**common)
            field.initial = bool(default) if has_default else False
            return field
        return forms.NullBooleanField(widget=forms.Select(choices=[("unknown", "— not set —"), ("true", "true"),
                                                                   ("false", "false")]), **common)
    expect = prop.get("type") if prop.get("type") in ("object", "array") else None
    field = JSONValueField(expect=expect, **{**common, "required": required})
    if has_default:
        field.initial = json.dumps(default, indent=2, ensure_ascii=False)
    return field


def schema_properties(schema: Any) -> tuple[dict, set[str]]:
    """(properties, required names) of an object schema; ({}, set()) for anything else."""
    if not isinstance(schema, dict):
        return {}, set()
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    required = schema.get("required") if isinstance(schema.get("required"), list) else []
    return properties, {name for name in required if isinstance(name, str)}


class ToolArgumentsForm(forms.Form):
    """One field per property of `schema`; `arguments()` (after is_valid) is the JSON object to send. A schema too
    large or not an object has no fields (`too_large`): edit it as raw JSON instead."""

    def __init__(self, schema: Any, *args, **kwargs):
        kwargs.setdefault("prefix", "arg")
        super().__init__(*args, **kwargs)
        properties, required = schema_properties(schema)
        self.too_large = len(properties) > MAX_FIELDS
        self.properties: dict[str, tuple[str, str, bool]] = {}  # field name → (property, kind, schema-required)
        if self.too_large:
            return
        for index, (name, prop) in enumerate(properties.items()):
            if not isinstance(name, str):
                continue
            kind = property_kind(prop)
            field = _field_for(prop, kind, name in required)
            field.label = name
            description = prop.get("description") if isinstance(prop, dict) else None
            # Django's stock form templates print help_text with |safe: escape the (possibly hostile) text here.
            field.help_text = conditional_escape(description[:2000]) if isinstance(description, str) else ""
            field.schema_required = name in required
            field.kind = kind
            field_name = name if _FIELD_NAME.match(name) and name not in self.fields else f"p{index}"
            self.fields[field_name] = field
            self.properties[field_name] = (name, kind, name in required)

    def arguments(self) -> dict[str, Any]:
        """The arguments the person typed, as a JSON object: blank optional properties are left out."""
        out: dict[str, Any] = {}
        for field_name, (name, kind, required) in self.properties.items():
            value = self.cleaned_data.get(field_name)
            if value is OMIT or (value is None and kind in _SCALAR_TYPES):
                continue
            if kind == "string" and value == "" and not required:
                continue
            out[name] = value
        return out


class RawArgumentsForm(forms.Form):
    """The arguments as one JSON object, for schemas the generated form cannot express (or by choice)."""

    arguments = forms.CharField(widget=forms.Textarea(attrs={"rows": 10, "cols": 80, "class": "vLargeTextField"}),
                                strip=False, required=False, label="arguments (JSON object)", max_length=1_000_000)

    def clean_arguments(self) -> dict:
        text = self.cleaned_data["arguments"]
        if not text.strip():
            return {}
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"not valid JSON: {exc}", code="json") from None
        if not isinstance(data, dict):
            raise ValidationError("the arguments must be a JSON object ({…})", code="json_type")
        return data


def initial_arguments(schema: Any) -> dict[str, Any]:
    """The schema's defaults, to start the raw JSON editor with."""
    properties, _ = schema_properties(schema)
    return {name: prop["default"] for name, prop in list(properties.items())[:MAX_FIELDS]
            if isinstance(name, str) and isinstance(prop, dict) and "default" in prop}
