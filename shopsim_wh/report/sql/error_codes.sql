-- error_codes: which error_labels codes (report_labels) hit the selected runs: episodes with the code at least once and labels
-- in all (a step-scope code may label several steps of one episode).
-- grain: one row per (run_id, code). key: (run_id, code)
SELECT l.run_id, l.code, l.category, l.scope, count(DISTINCT l.episode_id) AS episodes, count(*) AS labels
FROM report_labels AS l
GROUP BY l.run_id, l.code, l.category, l.scope
ORDER BY l.run_id, episodes DESC, l.code;
