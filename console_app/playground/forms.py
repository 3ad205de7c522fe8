"""The playground's "run as" form: which agent, for which user and session, which tool (and how long to wait for a
person's approval). The tool's own arguments come from `schema_form`."""
from __future__ import annotations

from django import forms

from tools_app.models import Agent

MAX_WAIT_SECONDS = 60


class RunAsForm(forms.Form):
    """Agent (enabled ones), user id, optional session key and the tool name: the call context of a playground run."""

    agent = forms.ModelChoiceField(queryset=Agent.objects.none(), to_field_name="key", empty_label="— choose an agent —")
    user_id = forms.CharField(max_length=255, required=False, label="user id")
    session_key = forms.CharField(max_length=255, required=False, label="session key (optional)")
    tool = forms.CharField(max_length=128, required=False)
    wait_seconds = forms.IntegerField(min_value=0, max_value=MAX_WAIT_SECONDS, required=False, initial=0,
                                      label="wait for an approval (seconds)")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["agent"].queryset = Agent.objects.filter(enabled=True).order_by("key")
