-- max_repeats: the most completed samples any task of one domain's series ($domain, report_runs.grp) has (the
-- largest k of the pass@k curve; a checkpoint's runs pooled add their samples of a task).
-- grain: one row.
SELECT max(n) AS repeats
FROM (
    SELECT k.grp, t.task_id, sum(t.n) AS n
    FROM task_success_counts AS t
    JOIN report_runs AS k ON k.run_id = t.run_id
    WHERE k.domain = $domain
    GROUP BY k.grp, t.task_id
);
