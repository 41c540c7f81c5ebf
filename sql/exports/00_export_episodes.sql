-- export_episode_facts: the outcome and selection facts of each scoped episode, without import_fidelity (whose
-- join of import_fidelity units to episodes costs a pass over both); what an export's episode-level --where
-- conditions are applied to before any row is built (shopsim_wh/export/scope.py: pushdown).
-- grain: one row per episode (last attempt) of a run in export_scope. key: (run_id, episode_id)
-- Columns beyond `episodes`:
--   success          the documented success rule (docs/export.md): a source with a reward (shop runs, tau-bench,
--                    ATIF with a final reward) succeeds iff r_success = 1 (reward_detail's r_success, or
--                    reward >= 1 for a task reward only); a reward-less trace (Claude Code sessions,
--                    agent_multi_turn without a reward) is taken as a demonstration: success iff completed.
--   experiment, run_split, run_fingerprint from `runs`.
-- No goal-derived column (right_product, purchase_asin, reward_detail) and no persona here: kinds cannot leak
-- what they cannot see.
-- Portable SQL except CREATE OR REPLACE.
CREATE OR REPLACE VIEW export_episode_facts AS
SELECT
    e.run_id,
    e.episode_id,
    e.task_id,
    e.sample_id AS episode_sample,
    coalesce(e.split, r.split) AS split,
    e.experiment,
    r.fingerprint AS run_fingerprint,
    e.status,
    e.reward,
    e.r_success,
    e.r_strict,
    e.r_loose,
    e.termination_reason,
    CASE
        WHEN e.status <> 'completed' THEN false
        WHEN e.reward IS NULL AND e.r_success IS NULL THEN true
        ELSE coalesce(e.r_success, 0) = 1
    END AS success,
    coalesce(e.source_format, r.source_format) AS source_format,
    e.instruction,
    e.model_steps,
    e.protocol_errors
FROM episodes AS e
JOIN runs AS r ON r.run_id = e.run_id
WHERE e.run_id IN (SELECT run_id FROM export_scope);

-- export_episodes: the episodes an export reads, with the outcome and selection facts every kind filters on.
-- grain: one row per episode (last attempt) of a run in export_scope. key: (run_id, episode_id)
-- Columns: those of export_episode_facts, and
--   import_fidelity  share of the source's records that converted into tables (import_fidelity rows of the
--                    episode and its sub-agent units); 1.0 for runner episodes.
-- Portable SQL except CREATE OR REPLACE.
CREATE OR REPLACE VIEW export_episodes AS
WITH fidelity AS (
    SELECT
        f.run_id,
        e.episode_id,
        sum(f.converted) AS converted,
        sum(f.records_total) AS records_total
    FROM import_fidelity AS f
    JOIN episodes AS e
        ON e.run_id = f.run_id AND (f.unit = e.episode_id OR f.unit LIKE e.episode_id || '/%'
                                    OR f.unit LIKE e.episode_id || '#%')
    WHERE f.run_id IN (SELECT run_id FROM export_scope)
    GROUP BY f.run_id, e.episode_id
),

final AS (
    SELECT
        x.run_id,
        x.episode_id,
        x.task_id,
        x.episode_sample,
        x.split,
        x.experiment,
        x.run_fingerprint,
        x.status,
        x.reward,
        x.r_success,
        x.r_strict,
        x.r_loose,
        x.termination_reason,
        x.success,
        x.source_format,
        CASE
            WHEN f.records_total > 0 THEN CAST(f.converted AS DOUBLE) / f.records_total
            ELSE CAST(1 AS DOUBLE)
        END AS import_fidelity,
        x.instruction,
        x.model_steps,
        x.protocol_errors
    FROM export_episode_facts AS x
    LEFT JOIN fidelity AS f ON f.run_id = x.run_id AND f.episode_id = x.episode_id
)

SELECT * FROM final;
