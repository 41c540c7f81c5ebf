-- components: the mean of each r_* reward component per series (report_runs.grp) of one domain's runs
-- ($domain), each over the completed episodes that have it (as run_metrics' r_*_mean: r_strict / r_loose /
-- r_success derived where the source stored none); components a series never reported are left out.
-- grain: one row per (grp, component). key: (grp, component)
WITH m AS (
    SELECT
        grp,
        min(grp_pos) AS grp_pos,
        avg(r_type) AS r_type,
        avg(r_att) AS r_att,
        avg(r_option) AS r_option,
        avg(r_price) AS r_price,
        avg(r_loose) AS r_loose,
        avg(r_strict) AS r_strict,
        avg(r_success) AS r_success
    FROM report_episodes
    WHERE completed AND domain = $domain
    GROUP BY grp
),

long AS (
    UNPIVOT m ON r_type, r_att, r_option, r_price, r_loose, r_strict, r_success INTO NAME component VALUE mean
)

SELECT l.grp, l.component, l.mean
FROM long AS l
WHERE l.mean IS NOT NULL
ORDER BY l.grp_pos, l.grp, l.component;
