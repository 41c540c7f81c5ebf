-- checkpoint_compare: every pair of runs with the same job list (fingerprint field job_list_hash, or jobs.sha256
-- of an ingested ShopSimRL run's manifest), compared on
-- the jobs (task_id, sample_id) both completed.
-- grain: one row per run pair, run_a created before run_b (ties: by run_id). key: (run_a, run_b)
-- delta = reward_b - reward_a per job; delta_sem = stddev_samp(delta) / sqrt(n_pairs) (the paired SEM);
-- b_only_successes / a_only_successes = jobs strictly solved (r_success = 1) by one run and not the other;
-- differing_fields = fingerprint fields whose values differ (checkpoint_id, skill_bank_hash, ...).
-- DuckDB-specific: json_extract_string, list(... ORDER BY ...); otherwise portable.
CREATE OR REPLACE VIEW checkpoint_compare AS
WITH run_keys AS (
    SELECT
        run_id, created_at, model_name, checkpoint_id,
        -- the runner's job_list_hash, else an ingested ShopSimRL run's (run_identity: jobs.sha256 of its plan)
        coalesce(json_extract_string(fingerprint_fields, '$.job_list_hash'),
                 json_extract_string(fingerprint_fields, '$.jobs.sha256')) AS job_list_hash
    FROM runs
    WHERE fingerprint_fields IS NOT NULL AND json_valid(fingerprint_fields)
),

run_pairs AS (
    SELECT
        a.run_id AS run_a, b.run_id AS run_b,
        a.model_name AS model_a, b.model_name AS model_b,
        a.checkpoint_id AS checkpoint_a, b.checkpoint_id AS checkpoint_b,
        a.job_list_hash
    FROM run_keys AS a
    JOIN run_keys AS b
        ON a.job_list_hash = b.job_list_hash
        AND (a.created_at < b.created_at OR (a.created_at = b.created_at AND a.run_id < b.run_id))
    WHERE a.job_list_hash IS NOT NULL
),

ep AS NOT MATERIALIZED (
    SELECT run_id, task_id, sample_id, reward, r_success
    FROM episodes
    WHERE status = 'completed' AND task_id IS NOT NULL
),

paired AS (
    SELECT
        p.run_a, p.run_b,
        ea.reward AS reward_a, eb.reward AS reward_b,
        ea.r_success AS success_a, eb.r_success AS success_b
    FROM run_pairs AS p
    JOIN ep AS ea ON ea.run_id = p.run_a
    JOIN ep AS eb ON eb.run_id = p.run_b AND eb.task_id = ea.task_id AND eb.sample_id = ea.sample_id
),

stats AS (
    SELECT
        run_a, run_b,
        count(*) AS n_pairs,
        avg(reward_a) AS reward_a,
        avg(reward_b) AS reward_b,
        avg(reward_b - reward_a) AS delta_mean,
        stddev_samp(reward_b - reward_a) / sqrt(count(*)) AS delta_sem,
        avg(success_a) AS r_success_a,
        avg(success_b) AS r_success_b,
        sum(CASE WHEN success_b = 1 AND success_a <> 1 THEN 1 ELSE 0 END) AS b_only_successes,
        sum(CASE WHEN success_a = 1 AND success_b <> 1 THEN 1 ELSE 0 END) AS a_only_successes
    FROM paired
    GROUP BY run_a, run_b
),

pair_fields AS (
    SELECT p.run_a, p.run_b, f.field
    FROM run_pairs AS p
    JOIN run_fingerprints AS f ON f.run_id = p.run_a OR f.run_id = p.run_b
    GROUP BY p.run_a, p.run_b, f.field
),

diffs AS (
    SELECT
        pf.run_a, pf.run_b,
        list(pf.field ORDER BY pf.field) FILTER (WHERE fa.value IS DISTINCT FROM fb.value) AS differing_fields
    FROM pair_fields AS pf
    LEFT JOIN run_fingerprints AS fa ON fa.run_id = pf.run_a AND fa.field = pf.field
    LEFT JOIN run_fingerprints AS fb ON fb.run_id = pf.run_b AND fb.field = pf.field
    GROUP BY pf.run_a, pf.run_b
),

final AS (
    SELECT
        p.run_a, p.run_b, p.model_a, p.model_b, p.checkpoint_a, p.checkpoint_b, p.job_list_hash,
        coalesce(s.n_pairs, 0) AS n_pairs,
        s.reward_a, s.reward_b, s.delta_mean, s.delta_sem, s.r_success_a, s.r_success_b,
        s.b_only_successes, s.a_only_successes,
        coalesce(d.differing_fields, []) AS differing_fields
    FROM run_pairs AS p
    LEFT JOIN stats AS s ON s.run_a = p.run_a AND s.run_b = p.run_b
    LEFT JOIN diffs AS d ON d.run_a = p.run_a AND d.run_b = p.run_b
)

SELECT * FROM final;
