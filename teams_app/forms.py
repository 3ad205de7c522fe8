"""Forms of the board page's recovery actions: they only check the shape of what a person typed (types, lengths,
a member to reassign to); whether the action is allowed on the task is the service's decision."""
from __future__ import annotations

from django import forms

# The services refuse longer text with a clear error; the forms stop it before it reaches them.
REASON_MAX = 10_000
TEXT_MAX = 10_000


class ActionForm(forms.Form):
    """An action with nothing to fill in (retry, unblock)."""

    def __init__(self, data=None, *, team=None, **kwargs):
        super().__init__(data, **kwargs)
        self.team = team


class CancelForm(ActionForm):
    reason = forms.CharField(max_length=REASON_MAX, required=False, widget=forms.Textarea(attrs={"rows": 2}))


class ReassignForm(ActionForm):
    """Reassign to one of the team's members (not the lead: the lead never works tasks itself)."""

    assignee = forms.ChoiceField(choices=())

    def __init__(self, data=None, *, team=None, **kwargs):
        super().__init__(data, team=team, **kwargs)
        members = team.members.select_related("agent").exclude(role="lead") if team is not None else []
        self.members = {m.agent.key: m.agent for m in members}
        self.fields["assignee"].choices = [(key, key) for key in sorted(self.members)]

    def clean_assignee(self):
        return self.members[self.cleaned_data["assignee"]]  # ChoiceField already refused anything else


class AnswerForm(ActionForm):
    answer = forms.CharField(max_length=TEXT_MAX, widget=forms.Textarea(attrs={"rows": 3}))


class ApproveForm(ActionForm):
    note = forms.CharField(max_length=TEXT_MAX, required=False, widget=forms.Textarea(attrs={"rows": 2}))


class RejectForm(ActionForm):
    feedback = forms.CharField(max_length=TEXT_MAX, widget=forms.Textarea(attrs={"rows": 3}))


class CommentForm(ActionForm):
    content = forms.CharField(max_length=TEXT_MAX, widget=forms.Textarea(attrs={"rows": 3}))


def form_error_sentence(form: forms.Form) -> str:
    """The form's errors as one sentence for a Django message ("answer: This field is required.")."""
    parts = []
    for field, errors in form.errors.items():
        label = "form" if field == "__all__" else field
        parts.append(f"{label}: {' '.join(str(e) for e in errors)}")
    return "; ".join(parts) or "the form is not valid"
