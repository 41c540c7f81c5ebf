-- step_hist: the distribution of model steps per completed episode of one domain's runs ($domain), per series
-- (report_runs.grp).
-- grain: one row per (grp, model_steps). key: (grp, model_steps)
SELECT grp, model_steps, count(*) AS episodes
FROM report_episodes
WHERE domain = $domain AND completed AND model_steps IS NOT NULL
GROUP BY grp, model_steps
ORDER BY min(grp_pos), grp, model_steps;
