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

-- grain: one row per SkillBank snapshot (written by `skills snapshot` or ingested from a ShopSimRL round).
-- key: bank_sha256 (run_id = the loop round)
CREATE OR REPLACE VIEW skillbanks AS SELECT * FROM stg_skillbanks;

-- grain: one row per skill of a SkillBank snapshot, in injection order. key: (bank_sha256, position)
CREATE OR REPLACE VIEW skillbank_skills AS SELECT * FROM stg_skillbank_skills;

-- grain: one row per skill candidate of a loop round (run_id = the round). key: (run_id, candidate_id)
CREATE OR REPLACE VIEW skill_candidates AS SELECT * FROM stg_skill_candidates;

-- grain: one row per review decision on a skill candidate (run_id = the candidate's round); the latest is its
-- state. key: review_id
CREATE OR REPLACE VIEW skill_reviews AS SELECT * FROM stg_skill_reviews;

-- grain: one row per held-out (val/test) task id of a split manifest recorded for a loop round (run_id = the
-- round). key: (run_id, split_manifest_hash, task_id)
CREATE OR REPLACE VIEW skill_heldout_tasks AS SELECT * FROM stg_skill_heldout_tasks;

-- grain: one row per (labels version, episode) re-scored by `shopsim-wh reverify` (run_id = the re-scored run).
-- key: (run_id, labels_version, episode_id)
CREATE OR REPLACE VIEW episode_labels AS SELECT * FROM stg_episode_labels;

-- The loop's round artifacts (issue 30, `shopsim-wh ingest ROUND_DIR`; docs/loop.md). run_id = the round.
-- grain: one row per ingested artifact file of a round. key: (run_id, kind)
CREATE OR REPLACE VIEW loop_artifacts AS SELECT * FROM stg_loop_artifacts;

-- grain: one row per evidence card. key: (run_id, card_id)
CREATE OR REPLACE VIEW evidence_cards AS SELECT * FROM stg_evidence_cards;

-- grain: one row per cluster of evidence cards. key: (run_id, cluster_id)
CREATE OR REPLACE VIEW evidence_clusters AS SELECT * FROM stg_evidence_clusters;

-- grain: one row per chunk of an initial skill draft. key: (run_id, chunk_id)
CREATE OR REPLACE VIEW skill_chunks AS SELECT * FROM stg_skill_chunks;

-- grain: one row per record of a round's proposal ledger. key: (run_id, ledger, line)
CREATE OR REPLACE VIEW proposal_ledger AS SELECT * FROM stg_proposal_ledger;

-- grain: one row per entry (current skill or candidate) of a candidate pool. key: (run_id, pool_sha256, position)
CREATE OR REPLACE VIEW candidate_pools AS SELECT * FROM stg_candidate_pools;

-- grain: one row per episode of a gate's mask assignment. key: (run_id, assignment_sha256, position)
CREATE OR REPLACE VIEW mask_assignments AS SELECT * FROM stg_mask_assignments;

-- grain: one row per observation of an ingested ShopSimRL gate. key: (gate_id, position)
CREATE OR REPLACE VIEW gate_observations AS SELECT * FROM stg_gate_observations;
