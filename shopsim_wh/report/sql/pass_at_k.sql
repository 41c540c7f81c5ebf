-- pass_at_k: the pass@k curve (unbiased estimator, pass_at_k_estimate) and tau-bench's pass^k
-- (pass_hat_k_estimate) of each selected run for k = 1 .. $kmax, each the mean over the run's tasks
-- (task_success_counts: n completed samples, c successes); pass^k over tasks with at least k samples.
-- grain: one row per (run_id, k). key: (run_id, k)
WITH t AS (
    SELECT run_id, n, c FROM task_success_counts WHERE run_id IN (SELECT run_id FROM report_runs)
),

ks AS (
    SELECT CAST(range AS INTEGER) AS k FROM range(1, CAST($kmax AS BIGINT) + 1)
)

SELECT
    t.run_id,
    ks.k,
    count(*) AS tasks,
    avg(pass_at_k_estimate(t.n, t.c, ks.k)) AS pass_at_k,
    avg(pass_hat_k_estimate(t.n, t.c, ks.k)) AS pass_hat_k
FROM t
CROSS JOIN ks
GROUP BY t.run_id, ks.k
ORDER BY t.run_id, ks.k;
