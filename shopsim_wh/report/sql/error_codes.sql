-- error_codes: which error_labels codes (report_labels) hit one domain's runs ($domain), per series
-- (report_runs.grp): episodes with the code at least once and labels in all (a step-scope code may label
-- several steps of one episode).
-- grain: one row per (grp, code). key: (grp, code)
SELECT
    k.grp,
    l.code,
    min(l.category) AS category,
    min(l.scope) AS scope,
    count(DISTINCT (l.run_id, l.episode_id)) AS episodes,
    count(*) AS labels
FROM report_labels AS l
JOIN report_runs AS k ON k.run_id = l.run_id
WHERE k.domain = $domain
GROUP BY k.grp, l.code
ORDER BY min(k.grp_pos), k.grp, episodes DESC, l.code;
