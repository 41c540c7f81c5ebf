-- grain: one row per run. key: run_id
CREATE OR REPLACE VIEW runs AS SELECT * FROM stg_runs;

-- grain: one row per `run` / `ingest` invocation. key: load_id
CREATE OR REPLACE VIEW loads AS SELECT * FROM stg_loads;

-- grain: one row per failed episode attempt. key: (run_id, episode_id, attempt)
CREATE OR REPLACE VIEW failures AS SELECT * FROM stg_failures;

-- grain: one row per rejected input record. key: (run_id, source_file, line)
CREATE OR REPLACE VIEW ingest_errors AS SELECT * FROM stg_ingest_errors;

-- grain: one row per ingested unit. key: (run_id, source_file, unit)
CREATE OR REPLACE VIEW import_fidelity AS SELECT * FROM stg_import_fidelity;

-- grain: one row per `shopsim-wh gate` decision (run_id = the treatment run). key: gate_id
CREATE OR REPLACE VIEW gate_results AS SELECT * FROM stg_gate_results;
