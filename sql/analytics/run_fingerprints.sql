-- run_fingerprints: the fingerprint fields of every run, one per row (runs.fingerprint_fields unpacked).
-- grain: one row per (run_id, field). key: (run_id, field)
-- value is the field's JSON text (objects such as `sampling` stay whole). Runs without fingerprint_fields
-- have no rows. Two vocabularies (docs/gate.md "Run identity"): runner runs hold the runner's fields (model_name,
-- sampling, job_list_hash, ...); ingested ShopSimRL runs hold ShopSimRL's plan sections (identity_source, model,
-- prompt, runtime, environment, task_split, jobs, skills, observed, ...).
-- DuckDB-specific: json_keys / json_extract / unnest.
CREATE OR REPLACE VIEW run_fingerprints AS
WITH fields AS (
    SELECT run_id, fingerprint_fields, unnest(json_keys(fingerprint_fields)) AS field
    FROM runs
    WHERE fingerprint_fields IS NOT NULL AND json_valid(fingerprint_fields)
),

final AS (
    SELECT
        run_id,
        field,
        CAST(json_extract(fingerprint_fields, '$."' || replace(field, '"', '\"') || '"') AS VARCHAR) AS value
    FROM fields
)

SELECT * FROM final;
