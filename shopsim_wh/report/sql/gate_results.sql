-- gate_results: the recorded decisions of the paired gate for one (bare, treatment) pair, newest first (table
-- gate_results, written by every `shopsim-wh gate` run that is not --dry-run).
-- grain: one row per recorded gate decision of the pair. key: gate_id
SELECT
    decided_at,
    decision,
    rule,
    bare_checkpoint_id,
    treatment_checkpoint_id,
    n_pairs,
    coverage,
    covariate_names,
    selected,
    tool_version,
    gate_id
FROM gate_results
WHERE bare_run = $bare AND treatment_run = $treatment
ORDER BY decided_at DESC, gate_id;
