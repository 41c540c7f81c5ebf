-- termination: how each selected run's episodes ended (termination_shares: 'error' = failed attempts).
-- grain: one row per (run_id, termination). key: (run_id, termination)
SELECT run_id, termination, episodes, share
FROM termination_shares
WHERE run_id IN (SELECT run_id FROM report_runs)
ORDER BY run_id, share DESC, termination;
