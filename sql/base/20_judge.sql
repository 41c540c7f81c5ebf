-- judge_outputs: the answers `shopsim-wh judge` stored (docs/judge.md), the latest per judged item, rubric and judge.
-- grain: one row per (run_id, episode_id, step_idx, rubric_sha256, judge_fingerprint): the latest answer (a re-run
-- episode has a new input hash and a new answer; the newest counts). step_idx is NULL for episode-grain rubrics.
-- key: (run_id, episode_id, step_idx, rubric_sha256, judge_fingerprint); stg_judge_outputs keeps every answer.
-- DuckDB-specific: QUALIFY.
CREATE OR REPLACE VIEW judge_outputs AS
SELECT *
FROM stg_judge_outputs
QUALIFY row_number() OVER (
    PARTITION BY run_id, episode_id, step_idx, rubric_sha256, judge_fingerprint
    ORDER BY created_at DESC, load_id DESC) = 1;

-- judge_labels: the labels of the answers in judge_outputs, one per question (the long form of judge_outputs.labels).
-- grain: one row per (run_id, episode_id, step_idx, rubric_sha256, judge_fingerprint, question).
-- key: (run_id, episode_id, step_idx, rubric_sha256, judge_fingerprint, question)
-- DuckDB-specific: QUALIFY.
CREATE OR REPLACE VIEW judge_labels AS
SELECT l.*
FROM stg_judge_labels AS l
WHERE l.output_id IN (SELECT output_id FROM judge_outputs)
QUALIFY row_number() OVER (
    PARTITION BY l.run_id, l.output_id, l.question ORDER BY l.created_at DESC, l.load_id DESC) = 1;

-- labels: human labels imported by `shopsim-wh labels import`, the latest per item, label and labeler.
-- grain: one row per (run_id, episode_id, step_idx, label, labeler). key: the same
-- DuckDB-specific: QUALIFY.
CREATE OR REPLACE VIEW labels AS
SELECT *
FROM stg_labels
QUALIFY row_number() OVER (
    PARTITION BY run_id, episode_id, step_idx, label, labeler ORDER BY imported_at DESC, line DESC) = 1;
