-- summary: the report's run summary table: who ran (experiment, source, model, checkpoint, split) and the
-- headline figures of run_metrics.
-- grain: one row per selected run. key: run_id
SELECT
    r.run_id,
    r.experiment,
    coalesce(r.source_format, 'runner') AS source,
    r.model_name,
    r.checkpoint_id,
    r.split,
    m.planned,
    m.completed,
    m.failed,
    m.coverage,
    m.reward_mean,
    m.reward_sem,
    m.r_success_mean,
    m.mean_model_steps,
    m.tokens_in_mean,
    m.tokens_out_mean,
    m.cost_per_episode
FROM runs AS r
JOIN run_metrics AS m ON m.run_id = r.run_id
WHERE r.run_id IN (SELECT run_id FROM report_runs)
ORDER BY r.created_at, r.run_id;
