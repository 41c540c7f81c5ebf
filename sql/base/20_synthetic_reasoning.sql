-- synthetic_reasoning: the teachers' answers stored by `shopsim-wh synth-reasoning` (docs/export.md).
-- grain: one row per (request_hash, teacher_fingerprint): the latest answer stored for that request and teacher
-- key: (request_hash, teacher_fingerprint); run_id is the run of the decision the request was built from.
-- Two invocations racing on one request both append; the later answer wins (ties: the larger load_id).
-- DuckDB-specific: QUALIFY.
CREATE OR REPLACE VIEW synthetic_reasoning AS
SELECT *
FROM stg_synthetic_reasoning
QUALIFY row_number() OVER (
    PARTITION BY request_hash, teacher_fingerprint ORDER BY created_at DESC, load_id DESC) = 1;
