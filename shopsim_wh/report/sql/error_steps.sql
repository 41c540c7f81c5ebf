-- error_steps: at which step each error code is labelled, over one domain's runs ($domain) and every agent
-- (labels without a step, e.g. a reset failure, are left out).
-- grain: one row per (code, step_idx). key: (code, step_idx)
SELECT l.code, l.step_idx, count(*) AS labels
FROM report_labels AS l
JOIN report_runs AS k ON k.run_id = l.run_id
WHERE l.step_idx IS NOT NULL AND k.domain = $domain
GROUP BY l.code, l.step_idx
ORDER BY l.code, l.step_idx;
