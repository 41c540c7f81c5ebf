-- export_scope: the runs an export reads (seed 001 part 3 §4; issue 10).
-- grain: one row per selected run. key: run_id
-- The export framework (shopsim_wh/export) replaces this TEMP table with the runs of --runs / --experiment
-- after refusing the test split; every export_* view restricts to it, so kinds inherit the scope. The default
-- installed here holds every run whose split is not `test`, so the views answer sensibly when queried by hand.
-- DuckDB-specific: TEMP TABLE (a connection-local selection).
CREATE OR REPLACE TEMP TABLE export_scope AS
SELECT run_id FROM runs WHERE coalesce(split, '') <> 'test';
