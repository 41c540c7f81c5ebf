-- reward_success: mean reward and strict success with their SEM (sample stddev / sqrt(n)) over completed
-- episodes, per run and per checkpoint (GROUPING SETS: level 'run' rows have a run_id, level 'checkpoint' rows
-- pool every selected run of the checkpoint). lo / hi = mean -/+ SEM (NULL below 2 values).
-- grain: one row per (level, run_id or NULL, checkpoint_id, metric). key: (level, run_id, checkpoint_id, metric)
WITH done AS (
    SELECT run_id, checkpoint_id, reward, r_success FROM report_episodes WHERE completed
),

agg AS (
    SELECT
        CASE WHEN grouping(run_id) = 0 THEN 'run' ELSE 'checkpoint' END AS level,
        run_id,
        checkpoint_id,
        count(reward) AS n_reward,
        avg(reward) AS reward_mean,
        stddev_samp(reward) / sqrt(count(reward)) AS reward_sem,
        count(r_success) AS n_success,
        avg(r_success) AS success_mean,
        stddev_samp(r_success) / sqrt(count(r_success)) AS success_sem
    FROM done
    GROUP BY GROUPING SETS ((run_id, checkpoint_id), (checkpoint_id))
),

long AS (
    SELECT level, run_id, checkpoint_id, 'reward' AS metric, n_reward AS n, reward_mean AS mean, reward_sem AS sem
    FROM agg
    UNION ALL
    SELECT level, run_id, checkpoint_id, 'success' AS metric, n_success AS n, success_mean AS mean, success_sem AS sem
    FROM agg
)

SELECT level, run_id, checkpoint_id, metric, n, mean, sem, mean - sem AS lo, mean + sem AS hi
FROM long
WHERE mean IS NOT NULL
ORDER BY level DESC, checkpoint_id, run_id, metric;
