"""Allow-always rules keep their scope (free_effects) and the description shown when they were created; exact
exec rules bind every argument by hash; held file changes keep their exact arguments only sealed (AES-256-GCM)."""
from django.db import migrations, models
from django.utils import timezone


def _seal_context(change_id) -> str:
    # Must equal tools_app.services.approvals.pending_change_seal_context.
    return f"tools_app.pendingchange.arguments:{change_id}"


def seal_pending_changes(apps, schema_editor):
    """Held changes kept the exact call in clear: seal it for the pending ones (decided ones no longer need it)
    and keep only scrubbed copies of the arguments and path for display."""
    from goclaw import crypto
    from tools_app.security.scrub import default_scrubber

    PendingChange = apps.get_model("tools_app", "PendingChange")
    for change in PendingChange.objects.filter(sealed_arguments="").iterator(chunk_size=200):
        raw = change.arguments if change.arguments is not None else {}
        sealed = crypto.encrypt_json(raw, associated_data=_seal_context(change.pk)) if change.status == "pending" else ""
        display, _ = default_scrubber.scrub_data(raw)
        path, _ = default_scrubber.scrub(change.path or "")
        PendingChange.objects.filter(pk=change.pk).update(arguments=display, sealed_arguments=sealed, path=path)


def unseal_pending_changes(apps, schema_editor):
    """Rolling back: the exact arguments of still-sealed rows go back in clear (the previous format)."""
    from goclaw import crypto

    PendingChange = apps.get_model("tools_app", "PendingChange")
    for change in PendingChange.objects.exclude(sealed_arguments="").iterator(chunk_size=200):
        arguments = crypto.decrypt_json(change.sealed_arguments, associated_data=_seal_context(change.pk))
        PendingChange.objects.filter(pk=change.pk).update(arguments=arguments, sealed_arguments="")


def bind_exact_exec_rules(apps, schema_editor):
    """Exact exec rules compared the command text only; exact rules now match the hash of every argument
    (command, working_dir, timeout). Take it from the request each rule was created from; a rule without one cannot
    be bound and is revoked (its call is simply asked again)."""
    ApprovalRule = apps.get_model("tools_app", "ApprovalRule")
    now = timezone.now()
    for rule in ApprovalRule.objects.filter(match="exact", args_hash="").select_related("created_from"):
        source_hash = rule.created_from.args_hash if rule.created_from_id else ""
        if source_hash:
            ApprovalRule.objects.filter(pk=rule.pk).update(args_hash=source_hash)
        elif rule.revoked_at is None:
            ApprovalRule.objects.filter(pk=rule.pk).update(revoked_at=now)


class Migration(migrations.Migration):

    dependencies = [
        ('tools_app', '0006_agent_sandbox_profile_and_invocation_sandbox'),
    ]

    operations = [
        migrations.AddField(
            model_name='approvalrule',
            name='description',
            field=models.TextField(blank=True, help_text='what the rule covers, as shown to the person who created it'),
        ),
        migrations.AddField(
            model_name='approvalrule',
            name='free_effects',
            field=models.JSONField(blank=True, default=list, help_text="exec prefix/glob: effects (write, delete) the further arguments may have because the approved command's had them"),
        ),
        migrations.AddField(
            model_name='pendingchange',
            name='sealed_arguments',
            field=models.TextField(blank=True, help_text='the exact call, AES-256-GCM sealed to this row (goclaw.crypto); applied on accept, erased once decided'),
        ),
        migrations.AlterField(
            model_name='approvalrule',
            name='args_hash',
            field=models.CharField(blank=True, help_text='exact rules: hash of tool + every argument (exec: command, working_dir, timeout)', max_length=64),
        ),
        migrations.AlterField(
            model_name='approvalrule',
            name='match',
            field=models.CharField(choices=[('exact', 'Exact call (exec: command, working directory and timeout)'), ('prefix', 'Leading command words (exec only; analysed arguments)'), ('glob', 'Globs on command words or on argument values (paths normalised, segment-wise)')], default='exact', max_length=10),
        ),
        migrations.AlterField(
            model_name='approvalrule',
            name='pattern',
            field=models.TextField(help_text='exec: the command (exact, shown scrubbed), its leading words (prefix) or word globs (glob); other tools: canonical arguments JSON (exact) or a JSON object of per-argument globs'),
        ),
        migrations.AlterField(
            model_name='pendingchange',
            name='arguments',
            field=models.JSONField(blank=True, default=dict, help_text='scrubbed copy of the call, for display'),
        ),
        migrations.RunPython(seal_pending_changes, unseal_pending_changes),
        migrations.RunPython(bind_exact_exec_rules, migrations.RunPython.noop),
    ]
