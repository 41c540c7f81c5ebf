-- export: shopsimrl-v4
-- grain: one row per episode (its last attempt): the ShopSimRL `shopsimrl-episode-v4` record
-- trl: -
-- sample: run_id, episode_id
-- filters: status, reward, r_success, success, import_fidelity, source_format, split, experiment, task_id
-- record: shopsimrl-v4
-- description: the episode re-emitted in ShopSimRL's runtime record format (what `shopsim-wh dump` writes), one per line; ingest reads it back
-- The record itself is built by the dump writer (shopsim_wh/ingest/dump_v4.py) for the episodes this view selects:
-- column `record` (JSON; the JSONL line). No private goal is stored, so none is written.
-- Portable SQL except CREATE OR REPLACE.
CREATE OR REPLACE VIEW export_shopsimrl_v4 AS
SELECT
    md5(run_id || '/' || episode_id || ':shopsimrl-v4') AS sample_id,
    run_id, episode_id, task_id, status, reward, r_success, success, import_fidelity, source_format, split, experiment
FROM export_episodes;
