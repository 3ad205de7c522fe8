"""The sessions list's filters (GET): checked before they reach the query."""
from django import forms

from runtime_app.choices import SessionStatus


class SessionFilterForm(forms.Form):
    """Agent key, user id and status; empty means any. CharField refuses NUL characters (PostgreSQL would fail)."""

    agent = forms.CharField(required=False, max_length=64)
    user_id = forms.CharField(required=False, max_length=255, strip=False)
    status = forms.ChoiceField(required=False, choices=[("", "any"), *SessionStatus.choices])

    def filters(self) -> dict[str, str]:
        """The filters given (only after is_valid())."""
        return {name: value for name, value in self.cleaned_data.items() if value}
