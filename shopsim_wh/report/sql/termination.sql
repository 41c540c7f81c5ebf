-- termination: how the episodes of one domain's runs ($domain) ended, per series (report_runs.grp), from
-- termination_shares ('error' = failed attempts): episode counts add up over a series' runs, share = the
-- series' episodes with that ending / all its episodes.
-- grain: one row per (grp, termination). key: (grp, termination)
WITH counts AS (
    SELECT k.grp, min(k.grp_pos) AS grp_pos, t.termination, sum(t.episodes) AS episodes
    FROM termination_shares AS t
    JOIN report_runs AS k ON k.run_id = t.run_id
    WHERE k.domain = $domain
    GROUP BY k.grp, t.termination
)

SELECT grp, termination, episodes, CAST(episodes AS DOUBLE) / sum(episodes) OVER (PARTITION BY grp) AS share
FROM counts
ORDER BY grp_pos, grp, share DESC, termination;
