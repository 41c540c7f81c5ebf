-- report_episodes: the final attempt of every episode of the report's runs (TEMP table report_runs) with its kind, the
-- run's checkpoint and model and completion by episode_completed (run_metrics.sql); r_success as the episodes
-- view derives it where the source stored none.
-- Materialised once per report as the TEMP table report_episodes (queries.install_selection).
-- grain: one row per episode (final attempt) of a selected run. key: (run_id, episode_id)
SELECT
    e.run_id,
    k.kind,
    coalesce(r.checkpoint_id, '(none)') AS checkpoint_id,
    r.model_name,
    e.episode_id,
    e.task_id,
    e.sample_id,
    e.status,
    episode_completed(e.status, e.done) AS completed,
    e.reward,
    e.r_success,
    e.model_steps,
    e.total_actions,
    e.tokens_in,
    e.tokens_out,
    e.duration_s
FROM episodes AS e
JOIN report_runs AS k ON k.run_id = e.run_id
JOIN runs AS r ON r.run_id = e.run_id;
