-- report_labels: the error_labels rows of the report's runs (TEMP table report_runs), materialised once per report
-- as the TEMP table report_labels: error_labels is the costliest view, and three sections read it.
-- grain: one row per (run_id, episode_id, agent_id, step_idx, code) of a selected run.
SELECT l.run_id, l.episode_id, l.agent_id, l.step_idx, l.code, l.scope, l.category
FROM error_labels AS l
WHERE l.run_id IN (SELECT run_id FROM report_runs);
