-- task_metrics: per (run, task) outcomes across the task's samples (repeats), for pass@k and GRPO-style
-- group statistics.
-- grain: one row per (run_id, task_id) over episodes with a task id. key: (run_id, task_id)
-- reward statistics over completed samples only; successes = samples with r_success = 1;
-- pass_at_1 = successes / completed; pass_at_n = 1 if any completed sample succeeded;
-- reward_varies = the completed samples' rewards are not all equal (a GRPO group with signal);
-- all_zero = every completed sample scored 0.
-- Portable SQL except CREATE OR REPLACE.
CREATE OR REPLACE VIEW task_metrics AS
WITH ep AS (
    SELECT run_id, task_id, sample_id, status, reward, r_success, total_actions, model_steps, tokens_in, tokens_out
    FROM episodes
    WHERE task_id IS NOT NULL
),

final AS (
    SELECT
        run_id,
        task_id,
        count(*) AS episodes,
        count(*) FILTER (WHERE status = 'completed') AS completed,
        count(*) FILTER (WHERE status = 'failed') AS failed,
        avg(reward) FILTER (WHERE status = 'completed') AS reward_mean,
        stddev_samp(reward) FILTER (WHERE status = 'completed') AS reward_std,
        min(reward) FILTER (WHERE status = 'completed') AS reward_min,
        max(reward) FILTER (WHERE status = 'completed') AS reward_max,
        count(*) FILTER (WHERE status = 'completed' AND r_success = 1) AS successes,
        CAST(count(*) FILTER (WHERE status = 'completed' AND r_success = 1) AS DOUBLE)
            / nullif(count(*) FILTER (WHERE status = 'completed'), 0) AS pass_at_1,
        CASE
            WHEN count(*) FILTER (WHERE status = 'completed') = 0 THEN NULL
            WHEN count(*) FILTER (WHERE status = 'completed' AND r_success = 1) > 0 THEN CAST(1 AS DOUBLE)
            ELSE CAST(0 AS DOUBLE)
        END AS pass_at_n,
        min(reward) FILTER (WHERE status = 'completed') < max(reward) FILTER (WHERE status = 'completed')
            AS reward_varies,
        max(reward) FILTER (WHERE status = 'completed') = 0 AS all_zero,
        avg(total_actions) FILTER (WHERE status = 'completed') AS mean_steps,
        avg(model_steps) FILTER (WHERE status = 'completed') AS mean_model_steps,
        avg(tokens_in) FILTER (WHERE status = 'completed') AS tokens_in_mean,
        avg(tokens_out) FILTER (WHERE status = 'completed') AS tokens_out_mean
    FROM ep
    GROUP BY run_id, task_id
)

SELECT * FROM final;
