-- summary: the run table of one domain's section ($domain): who ran (experiment, source, model, checkpoint,
-- split), what reward means for the run (runs.primary_reward; 'task_reward' for a rewarded source that does not
-- say), the headline figures of run_metrics and the sub-agents the run's episodes spawned (agents, depth > 0).
-- One row per run, never pooled. html.py abbreviates long ids and keeps the full value in the cell's title.
-- grain: one row per selected run of the domain. key: run_id
WITH sub AS (
    SELECT run_id, count(*) AS sub_agents
    FROM agents
    WHERE depth > 0 AND run_id IN (SELECT run_id FROM report_runs WHERE domain = $domain)
    GROUP BY run_id
)

SELECT
    r.run_id,
    r.experiment,
    coalesce(r.source_format, 'runner') AS source,
    r.model_name,
    r.checkpoint_id,
    r.split,
    CASE WHEN m.reward_mean IS NULL THEN NULL ELSE coalesce(r.primary_reward, 'task_reward') END AS reward_meaning,
    m.planned,
    m.episodes,
    m.completed,
    m.failed,
    m.coverage,
    m.reward_mean,
    m.reward_sem,
    m.r_success_mean,
    m.mean_model_steps,
    m.tokens_in_mean,
    m.tokens_out_mean,
    m.cost_per_episode,
    coalesce(s.sub_agents, 0) AS sub_agents
FROM report_runs AS k
JOIN runs AS r ON r.run_id = k.run_id
JOIN run_metrics AS m ON m.run_id = k.run_id
LEFT JOIN sub AS s ON s.run_id = k.run_id
WHERE k.domain = $domain
ORDER BY k.pos;
