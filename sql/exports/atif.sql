-- export: atif
-- grain: one row per episode (its last attempt): its ATIF trajectory (Harbor's Agent Trajectory Interchange Format)
-- trl: -
-- sample: run_id, episode_id
-- filters: status, reward, r_success, success, import_fidelity, source_format, split, experiment, task_id
-- record: atif
-- description: the episode as an ATIF trajectory (sub-agents as nested trajectories), one per line, as `shopsim-wh dump --format atif` writes it
-- The record itself is built by the dump writer (to_atif in shopsim_wh/ingest/dump.py) for the episodes this view selects:
-- column `record` (JSON; the JSONL line). No private goal is stored, so none is written.
-- Portable SQL except CREATE OR REPLACE.
CREATE OR REPLACE VIEW export_atif AS
SELECT
    md5(run_id || '/' || episode_id || ':atif') AS sample_id,
    run_id, episode_id, task_id, status, reward, r_success, success, import_fidelity, source_format, split, experiment
FROM export_episodes;
