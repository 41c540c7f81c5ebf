-- error_steps: at which step each error code is labelled, over every selected run and agent (labels without a
-- step, e.g. a reset failure, are left out).
-- grain: one row per (code, step_idx). key: (code, step_idx)
SELECT code, step_idx, count(*) AS labels
FROM report_labels
WHERE step_idx IS NOT NULL
GROUP BY code, step_idx
ORDER BY code, step_idx;
