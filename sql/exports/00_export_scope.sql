-- export_scope: the runs an export reads (seed 001 part 3 §4; issue 10).
-- grain: one row per selected run. key: run_id
-- The export framework (shopsim_wh/export) replaces this TEMP table with the runs of --runs / --experiment
-- after refusing the test split; every export_* view restricts to it, so kinds inherit the scope. The default
-- installed here holds every run whose split is not `test`, so the views answer sensibly when queried by hand.
-- DuckDB-specific: TEMP TABLE (a connection-local selection).
CREATE OR REPLACE TEMP TABLE export_scope AS
SELECT run_id FROM runs WHERE coalesce(split, '') <> 'test';

-- export_decisions_wanted: when getvariable('export_decisions_subset') is true, export_decisions computes only
-- the decisions listed here (a kind whose header says `-- decisions: VIEW` has the framework fill it from VIEW,
-- e.g. preference, which needs the contexts of its pairs' decisions only). Empty by default.
-- grain: one row per decision. key: (run_id, episode_id, agent_id, step_idx)
CREATE OR REPLACE TEMP TABLE export_decisions_wanted (run_id VARCHAR, episode_id VARCHAR, agent_id VARCHAR,
                                                      step_idx INTEGER);
