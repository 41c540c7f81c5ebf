-- report_episodes: the final attempt of every episode of the report's runs (TEMP table report_runs) with the
-- run's domain, series (grp), checkpoint, model and source, completion by episode_completed (run_metrics.sql), the
-- reward facts as the episodes view has them (r_strict / r_success derived where the source stored none).
-- Materialised once per report as the TEMP table report_episodes (queries.install_selection).
-- grain: one row per episode (final attempt) of a selected run. key: (run_id, episode_id)
SELECT
    e.run_id,
    k.domain,
    k.grp,
    k.grp_pos,
    coalesce(r.checkpoint_id, '(none)') AS checkpoint_id,
    r.model_name,
    coalesce(r.source_format, 'runner') AS source,
    e.episode_id,
    e.task_id,
    e.sample_id,
    e.status,
    episode_completed(e.status, e.done) AS completed,
    e.reward,
    e.r_type,
    e.r_att,
    e.r_option,
    e.r_price,
    e.r_loose,
    e.r_strict,
    e.r_success,
    e.model_steps,
    e.total_actions,
    e.tokens_in,
    e.tokens_out,
    e.duration_s
FROM episodes AS e
JOIN report_runs AS k ON k.run_id = e.run_id
JOIN runs AS r ON r.run_id = e.run_id;
