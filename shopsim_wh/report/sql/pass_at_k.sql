-- pass_at_k: the pass@k curve (unbiased estimator, pass_at_k_estimate) and tau-bench's pass^k
-- (pass_hat_k_estimate) of each series (report_runs.grp) of one domain's runs ($domain) for k = 1 .. $kmax,
-- each the mean over the series' tasks (task_success_counts: n completed samples, c successes; a checkpoint's
-- runs pooled add theirs); pass^k over tasks with at least k samples.
-- grain: one row per (grp, k). key: (grp, k)
WITH t AS (
    SELECT k.grp, min(k.grp_pos) AS grp_pos, t.task_id, sum(t.n) AS n, sum(t.c) AS c
    FROM task_success_counts AS t
    JOIN report_runs AS k ON k.run_id = t.run_id
    WHERE k.domain = $domain
    GROUP BY k.grp, t.task_id
),

ks AS (
    SELECT CAST(range AS INTEGER) AS k FROM range(1, CAST($kmax AS BIGINT) + 1)
)

SELECT
    t.grp,
    ks.k,
    count(*) AS tasks,
    avg(pass_at_k_estimate(t.n, t.c, ks.k)) AS pass_at_k,
    avg(pass_hat_k_estimate(t.n, t.c, ks.k)) AS pass_hat_k
FROM t
CROSS JOIN ks
GROUP BY t.grp, ks.k
ORDER BY min(t.grp_pos), t.grp, ks.k;
