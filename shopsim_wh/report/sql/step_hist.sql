-- step_hist: the distribution of model steps per completed episode, per selected rollout run.
-- grain: one row per (run_id, model_steps). key: (run_id, model_steps)
SELECT run_id, model_steps, count(*) AS episodes
FROM report_episodes
WHERE kind = 'rollout' AND completed AND model_steps IS NOT NULL
GROUP BY run_id, model_steps
ORDER BY run_id, model_steps;
