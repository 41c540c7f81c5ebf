-- grain: pass_at_k_estimate is a scalar macro (one value per call); pass_at_k(k) and run_pass_at_k(k) are
-- table macros whose grain is stated above each.
-- pass_at_k_estimate(n, c, k): the unbiased pass@k estimator 1 - C(n-c, k) / C(n, k) (Chen et al. 2021) for
-- a task with n samples of which c succeeded; computed as 1 - exp(lgamma(n-c+1) + lgamma(n-k+1) - lgamma(n-c-k+1)
-- - lgamma(n+1)) so that large n does not overflow. With fewer samples than k (n < k) it falls back to "any of
-- the n succeeded" (1 if c > 0 else 0), which is what the estimator tends to as n -> k.
-- DuckDB-specific: scalar macro, lgamma.
CREATE OR REPLACE MACRO pass_at_k_estimate(n, c, k) AS
    CASE
        WHEN n IS NULL OR c IS NULL OR k IS NULL OR n <= 0 OR k <= 0 THEN NULL
        WHEN c <= 0 THEN CAST(0 AS DOUBLE)
        WHEN n - c < k THEN CAST(1 AS DOUBLE)
        ELSE 1 - exp(lgamma(n - c + 1) + lgamma(n - k + 1) - lgamma(n - c - k + 1) - lgamma(n + 1))
    END;

-- pass_hat_k_estimate(n, c, k): pass^k of tau-bench (Yao et al. 2024), the chance that k samples drawn
-- without replacement from the task's n all succeed: C(c, k) / C(n, k), computed through lgamma like the above.
-- NULL when the task has fewer than k samples (n < k): reliability over k trials needs k trials.
CREATE OR REPLACE MACRO pass_hat_k_estimate(n, c, k) AS
    CASE
        WHEN n IS NULL OR c IS NULL OR k IS NULL OR n <= 0 OR k <= 0 OR n < k THEN NULL
        WHEN c < k THEN CAST(0 AS DOUBLE)
        ELSE exp(lgamma(c + 1) + lgamma(n - k + 1) - lgamma(c - k + 1) - lgamma(n + 1))
    END;

-- task_success_counts: per (run, task) the completed samples n and the successes c among them
-- (success = r_success = 1). The one definition pass@k and run_metrics count from;
-- completed = episode_completed (run_metrics.sql).
-- grain: one row per (run_id, task_id) with a task id. key: (run_id, task_id)
CREATE OR REPLACE VIEW task_success_counts AS
SELECT
    run_id, task_id,
    count(*) AS n,
    sum(CASE WHEN r_success = 1 THEN 1 ELSE 0 END) AS c
FROM episodes
WHERE episode_completed(status, done) AND task_id IS NOT NULL
GROUP BY run_id, task_id;

-- pass_at_k(k): per (run, task) the unbiased pass@k and tau-bench's pass^k (pass_hat_k) over the task's
-- completed samples, success = r_success = 1.
-- grain: one row per (run_id, task_id) with a task id. key: (run_id, task_id)
CREATE OR REPLACE MACRO pass_at_k(k) AS TABLE
WITH final AS (
    SELECT
        run_id, task_id, n, c, k AS k,
        pass_at_k_estimate(n, c, k) AS pass_at_k,
        pass_hat_k_estimate(n, c, k) AS pass_hat_k
    FROM task_success_counts
)

SELECT * FROM final;

-- run_pass_at_k(k): per run, the mean over tasks of pass_at_k(k) and of pass_hat_k (pass^k); tasks_short =
-- tasks with fewer than k completed samples (their pass@k falls back to "any success"; pass^k leaves them out).
-- grain: one row per run with task ids. key: run_id
CREATE OR REPLACE MACRO run_pass_at_k(k) AS TABLE
WITH per_task AS (
    SELECT * FROM pass_at_k(k)
),

final AS (
    SELECT
        run_id,
        k AS k,
        count(*) AS tasks,
        sum(CASE WHEN n < k THEN 1 ELSE 0 END) AS tasks_short,
        avg(pass_at_k) AS pass_at_k,
        avg(pass_hat_k) AS pass_hat_k
    FROM per_task
    GROUP BY run_id
)

SELECT * FROM final;
