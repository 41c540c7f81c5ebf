-- components: the mean of each r_* reward component per selected run (run_metrics' r_*_mean columns, long form),
-- each over the completed episodes that have it; components a run never reported are left out.
-- grain: one row per (run_id, component). key: (run_id, component)
WITH m AS (
    SELECT run_id, r_type_mean, r_att_mean, r_option_mean, r_price_mean, r_loose_mean, r_strict_mean, r_success_mean
    FROM run_metrics
    WHERE run_id IN (SELECT run_id FROM report_runs)
),

long AS (
    UNPIVOT m ON r_type_mean, r_att_mean, r_option_mean, r_price_mean, r_loose_mean, r_strict_mean, r_success_mean
    INTO NAME component VALUE mean
)

SELECT run_id, replace(component, '_mean', '') AS component, mean
FROM long
WHERE mean IS NOT NULL
ORDER BY run_id, component;
