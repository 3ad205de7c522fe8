import django.contrib.postgres.indexes
import django.contrib.postgres.search
import django.db.models.deletion
import django.db.models.functions.comparison
import pgvector.django
import pgvector.django.indexes
import pgvector.django.vector
from django.db import migrations, models


class Migration(migrations.Migration):
    """Memory documents, their chunks (generated full-text column with a GIN index, 384-dim embedding with an HNSW
    cosine index) and the embedding cache. The pgvector extension first (IF NOT EXISTS; goclaw's PostgreSQL bootstrap
    creates it as the superuser). Unapplying never drops it: the app role does not own it, and other data may use it."""

    dependencies = [("tools_app", "0011_context_files")]

    operations = [
        migrations.RunSQL("CREATE EXTENSION IF NOT EXISTS vector", reverse_sql=migrations.RunSQL.noop),
        migrations.CreateModel(
            name='EmbeddingCache',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('text_hash', models.CharField(max_length=64)),
                ('model', models.CharField(max_length=200)),
                ('embedding', pgvector.django.vector.VectorField(dimensions=384)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('text_hash', 'model'), name='embedding_cache_hash_model')],
            },
        ),
        migrations.CreateModel(
            name='MemoryDocument',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('user_id', models.CharField(blank=True, help_text='empty: shared by every user', max_length=255, null=True)),
                ('path', models.CharField(max_length=500)),
                ('content', models.TextField(blank=True, default='')),
                ('content_hash', models.CharField(max_length=64)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('agent', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memory_documents', to='tools_app.agent')),
            ],
            options={
                'ordering': ['agent', 'user_id', 'path'],
            },
        ),
        migrations.CreateModel(
            name='MemoryChunk',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('user_id', models.CharField(blank=True, max_length=255, null=True)),
                ('path', models.CharField(max_length=500)),
                ('start_line', models.PositiveIntegerField()),
                ('end_line', models.PositiveIntegerField()),
                ('text', models.TextField()),
                ('text_hash', models.CharField(max_length=64)),
                ('tsv', models.GeneratedField(db_persist=True, expression=django.contrib.postgres.search.SearchVector('text', config='simple'), output_field=django.contrib.postgres.search.SearchVectorField())),
                ('embedding', pgvector.django.vector.VectorField(blank=True, dimensions=384, null=True)),
                ('embedding_model', models.CharField(blank=True, default='', help_text='the embedder that made `embedding` (empty: none yet)', max_length=200)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('agent', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tools_app.agent')),
                ('document', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='chunks', to='tools_app.memorydocument')),
            ],
            options={
                'ordering': ['document', 'start_line'],
            },
        ),
        migrations.AddConstraint(
            model_name='memorydocument',
            constraint=models.UniqueConstraint(models.F('agent'), django.db.models.functions.comparison.Coalesce('user_id', models.Value('')), models.F('path'), name='memory_document_one_per_scope_path'),
        ),
        migrations.AddIndex(
            model_name='memorychunk',
            index=django.contrib.postgres.indexes.GinIndex(fields=['tsv'], name='memory_chunk_tsv_gin'),
        ),
        migrations.AddIndex(
            model_name='memorychunk',
            index=pgvector.django.indexes.HnswIndex(ef_construction=64, fields=['embedding'], m=16, name='memory_chunk_embedding_hnsw', opclasses=['vector_cosine_ops']),
        ),
        migrations.AddIndex(
            model_name='memorychunk',
            index=models.Index(fields=['agent', 'user_id'], name='memory_chunk_agent_user'),
        ),
        migrations.AddIndex(
            model_name='memorychunk',
            index=models.Index(condition=models.Q(('user_id__isnull', True)), fields=['agent'], name='memory_chunk_agent_shared'),
        ),
        migrations.AddIndex(
            model_name='memorychunk',
            index=models.Index(condition=models.Q(('embedding__isnull', True)), fields=['embedding_model'], name='memory_chunk_missing_vector'),
        ),
        # Keep the 1.5 kB vector in the row (the text and tsvector are moved to TOAST instead): a scan over an agent's
        # chunks (the plan for small agents) then reads no TOAST pages, and the planner's cost estimate holds.
        migrations.RunSQL("ALTER TABLE tools_app_memorychunk ALTER COLUMN embedding SET STORAGE PLAIN",
                          reverse_sql="ALTER TABLE tools_app_memorychunk ALTER COLUMN embedding SET STORAGE EXTERNAL"),
    ]
