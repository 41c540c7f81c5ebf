-- episode_primary_failure: each episode's one primary failure code, chosen by taxonomy precedence.
-- grain: one row per episode (final attempt). key: (run_id, episode_id)
-- primary_failure is NULL for strict successes (r_success = 1) and for episodes without any label;
-- ties in precedence go to the earliest step. first_error_step = the main agent's first step-scope label
-- (first invalid action, protocol error, loop, ...), the place to look at with ir_context.
-- Portable SQL except CREATE OR REPLACE.
CREATE OR REPLACE VIEW episode_primary_failure AS
WITH labels AS (
    SELECT run_id, episode_id, agent_id, step_idx, code, scope, precedence, evidence
    FROM error_labels
),

ranked AS (
    SELECT
        *,
        row_number() OVER (
            PARTITION BY run_id, episode_id
            ORDER BY precedence, CASE WHEN step_idx IS NULL THEN 1 ELSE 0 END, step_idx, agent_id
        ) AS rnk
    FROM labels
),

per_episode AS (
    SELECT
        run_id, episode_id,
        count(*) AS n_labels,
        count(DISTINCT code) AS n_codes,
        min(CASE WHEN scope = 'step' AND agent_id = 'main' THEN step_idx END) AS first_error_step
    FROM labels
    GROUP BY run_id, episode_id
),

final AS (
    SELECT
        e.run_id,
        e.episode_id,
        e.task_id,
        e.sample_id,
        e.status,
        e.reward,
        e.r_success,
        CASE WHEN e.r_success = 1 THEN NULL ELSE r.code END AS primary_failure,
        CASE WHEN e.r_success = 1 THEN NULL ELSE r.precedence END AS precedence,
        CASE WHEN e.r_success = 1 THEN NULL ELSE r.agent_id END AS primary_agent_id,
        CASE WHEN e.r_success = 1 THEN NULL ELSE r.step_idx END AS primary_step_idx,
        CASE WHEN e.r_success = 1 THEN NULL ELSE r.evidence END AS primary_evidence,
        coalesce(p.n_labels, 0) AS n_labels,
        coalesce(p.n_codes, 0) AS n_codes,
        p.first_error_step
    FROM episodes AS e
    LEFT JOIN ranked AS r
        ON r.run_id = e.run_id AND r.episode_id = e.episode_id AND r.rnk = 1
    LEFT JOIN per_episode AS p
        ON p.run_id = e.run_id AND p.episode_id = e.episode_id
)

SELECT * FROM final;
