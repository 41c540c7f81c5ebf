-- max_repeats: the most completed samples any task of the selected runs has (the largest k of the pass@k curve).
-- grain: one row.
SELECT max(n) AS repeats FROM task_success_counts WHERE run_id IN (SELECT run_id FROM report_runs);
