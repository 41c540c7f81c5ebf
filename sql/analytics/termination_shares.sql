-- termination_shares: how each run's episodes ended, as shares (the long form of run_metrics' share_*).
-- grain: one row per (run_id, termination). key: (run_id, termination)
-- termination = termination_reason of completed episodes ('unknown' when NULL), 'error' for failed ones;
-- shares sum to 1 per run.
-- Portable SQL except CREATE OR REPLACE.
CREATE OR REPLACE VIEW termination_shares AS
WITH ended AS (
    SELECT
        run_id,
        CASE WHEN status = 'failed' THEN 'error' ELSE coalesce(termination_reason, 'unknown') END AS termination
    FROM episodes
),

counts AS (
    SELECT run_id, termination, count(*) AS episodes
    FROM ended
    GROUP BY run_id, termination
),

final AS (
    SELECT
        run_id,
        termination,
        episodes,
        CAST(episodes AS DOUBLE) / sum(episodes) OVER (PARTITION BY run_id) AS share
    FROM counts
)

SELECT * FROM final;
