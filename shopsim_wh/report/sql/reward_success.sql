-- reward_success: mean reward and strict success with their SEM (sample stddev / sqrt(n)) over the completed
-- episodes of one domain's runs ($domain), per series (report_runs.grp: a run, or a checkpoint's runs pooled
-- with --group-by checkpoint). lo / hi = mean -/+ SEM (NULL below 2 values).
-- grain: one row per (grp, metric) with a value. key: (grp, metric)
WITH done AS (
    SELECT grp, grp_pos, checkpoint_id, source, run_id, reward, r_success
    FROM report_episodes
    WHERE completed AND domain = $domain
),

agg AS (
    SELECT
        grp,
        min(grp_pos) AS grp_pos,
        min(checkpoint_id) AS checkpoint_id,
        string_agg(DISTINCT source, ', ' ORDER BY source) AS source,
        count(DISTINCT run_id) AS runs,
        count(reward) AS n_reward,
        avg(reward) AS reward_mean,
        stddev_samp(reward) / sqrt(count(reward)) AS reward_sem,
        count(r_success) AS n_success,
        avg(r_success) AS success_mean,
        stddev_samp(r_success) / sqrt(count(r_success)) AS success_sem
    FROM done
    GROUP BY grp
),

long AS (
    SELECT grp, grp_pos, checkpoint_id, source, runs, 'reward' AS metric, n_reward AS n, reward_mean AS mean, reward_sem AS sem
    FROM agg
    UNION ALL
    SELECT grp, grp_pos, checkpoint_id, source, runs, 'success' AS metric, n_success AS n, success_mean AS mean, success_sem AS sem
    FROM agg
)

SELECT l.grp, l.checkpoint_id, l.source, l.runs, l.metric, l.n, l.mean, l.sem, l.mean - l.sem AS lo, l.mean + l.sem AS hi
FROM long AS l
WHERE l.mean IS NOT NULL
ORDER BY l.grp_pos, l.grp, l.metric;
