from django.db import migrations

# One statement takes tokens for a batch of calls (a process's concurrent calls share it, tools_app.ratelimit), each
# call all-or-nothing over its buckets and in the batch's order, as if the calls had come one after the other.
# `calls`: [[{"key", "cap"}, …], …]; returns (call, bucket) positions (0-based) of the empty buckets of each refused
# call. Missing buckets are created full first (at the cap of the first call naming them, as one call after the
# other would) and every bucket is then locked, both in key order, so two takes never wait on each other in
# opposite orders; within the batch a bucket is read after the earlier calls' takes
# (now() is the transaction's start: what an earlier call took is not refilled for a later one).
TAKE = r"""
CREATE OR REPLACE FUNCTION goclaw_rate_limit_take(calls json, window_seconds float8, async_commit boolean)
RETURNS TABLE (call_no integer, bucket_no integer)
LANGUAGE plpgsql AS $fn$
DECLARE
    one_call json;
    keys text[];
    caps float8[];
    levels float8[];
    refused boolean;
    level float8;
    i integer := 0;
    j integer;
BEGIN
    IF async_commit THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    INSERT INTO tools_app_ratelimitbucket (key, tokens, updated_at, last_allowed)
    SELECT DISTINCT ON (b.key) b.key, b.cap, now(), true
      FROM json_array_elements(calls) WITH ORDINALITY AS c(value, n),
           json_to_recordset(c.value) AS b(key text, cap float8)
     ORDER BY b.key, c.n
    ON CONFLICT (key) DO NOTHING;
    PERFORM 1 FROM tools_app_ratelimitbucket
     WHERE key IN (SELECT b.key FROM json_array_elements(calls) AS c(value),
                                     json_to_recordset(c.value) AS b(key text, cap float8))
     ORDER BY key FOR UPDATE;
    FOR one_call IN SELECT value FROM json_array_elements(calls) LOOP
        SELECT array_agg(b.key ORDER BY b.n), array_agg(b.cap ORDER BY b.n) INTO keys, caps
          FROM ROWS FROM (json_to_recordset(one_call) AS (key text, cap float8)) WITH ORDINALITY AS b(key, cap, n);
        levels := '{}';
        refused := false;
        FOR j IN 1 .. coalesce(array_length(keys, 1), 0) LOOP
            SELECT LEAST(caps[j], t.tokens + GREATEST(0, EXTRACT(EPOCH FROM (now() - t.updated_at))) * caps[j]
                                             / window_seconds)
              INTO level FROM tools_app_ratelimitbucket t WHERE t.key = keys[j];
            levels := levels || level;
            IF level < 1 THEN
                call_no := i;
                bucket_no := j - 1;
                refused := true;
                RETURN NEXT;
            END IF;
        END LOOP;
        IF NOT refused THEN
            FOR j IN 1 .. coalesce(array_length(keys, 1), 0) LOOP
                UPDATE tools_app_ratelimitbucket SET tokens = levels[j] - 1, updated_at = now(), last_allowed = true
                 WHERE key = keys[j];
            END LOOP;
        END IF;
        i := i + 1;
    END LOOP;
END
$fn$
"""


class Migration(migrations.Migration):
    """The rate-limit take as a function over a batch of calls (one statement for a process's concurrent calls)."""

    dependencies = [("tools_app", "0016_invocation_search")]

    operations = [
        migrations.RunSQL(TAKE, "DROP FUNCTION IF EXISTS goclaw_rate_limit_take(json, float8, boolean)"),
    ]
