-- The lineage of ShopSimRL's loop artifacts (issue 30; docs/loop.md "Ingesting ShopSimRL round artifacts"):
-- evidence refs joined to the episodes and steps they cite, and a selected skill to its gate coefficient.
-- grain: stated per view below (card, cluster, chunk, ledger record, bank skill, gate observation).
-- round_id = the partition run_id of the artifact (the round it was ingested as: `round-000`, `cold-start`).
-- An episode is found in any run of the warehouse whose episode_id is the card's source_trajectory_id (ShopSimRL
-- names episodes `task-{task:06d}__sample-{sample:03d}`, online retries `train-group-...-full-skill-retry`);
-- episode_run_id says which run (NULL: no ingested run holds it).
-- DuckDB-specific: from_json, unnest.

-- loop_card_episodes: evidence card -> the episode it analysed.
-- grain: one row per (evidence card, run holding its episode); a card no run holds: one row, episode columns NULL.
-- key: (round_id, card_id, episode_run_id)
CREATE OR REPLACE VIEW loop_card_episodes AS
SELECT c.run_id AS round_id, c.card_id, c.channel, c.stage, c.status, c.eligible_for_consolidation,
       c.firewall_findings, c.source_trajectory_id, e.run_id AS episode_run_id, e.experiment, e.split, e.task_id,
       e.sample_id, e.status AS episode_status, e.reward, e.r_success, e.model_steps, e.termination_reason
FROM evidence_cards AS c
LEFT JOIN episodes AS e ON e.episode_id = c.source_trajectory_id;

-- loop_card_steps: evidence card -> the steps of the episode it analysed.
-- grain: one row per (evidence card, run holding its episode, agent, step). key: (round_id, card_id, episode_run_id,
-- agent_id, step_idx)
CREATE OR REPLACE VIEW loop_card_steps AS
SELECT c.round_id, c.card_id, c.channel, c.source_trajectory_id, c.episode_run_id, s.agent_id, s.step_idx, s.page,
       s.content, s.finish_reason, s.protocol_error, s.policy_failure
FROM loop_card_episodes AS c
JOIN steps AS s ON s.run_id = c.episode_run_id AND s.episode_id = c.source_trajectory_id;

-- loop_cluster_cards: evidence cluster -> its cards.
-- grain: one row per (cluster, card). key: (round_id, cluster_id, card_id)
CREATE OR REPLACE VIEW loop_cluster_cards AS
SELECT run_id AS round_id, cluster_id, batch_id, channel,
       unnest(from_json(evidence_card_ids, '["VARCHAR"]')) AS card_id
FROM evidence_clusters;

-- loop_chunk_clusters: skill chunk -> the clusters it was compiled from, from a draft (`skill_chunks`) or from a
-- SkillBank skill's metadata.evidence_cluster_ids (the published cold-start banks carry them).
-- grain: one row per (round, chunk, cluster, source). key: (round_id, chunk_id, cluster_id, via)
CREATE OR REPLACE VIEW loop_chunk_clusters AS
SELECT DISTINCT round_id, chunk_id, cluster_id, via FROM (
    SELECT run_id AS round_id, chunk_id, unnest(from_json(evidence_cluster_ids, '["VARCHAR"]')) AS cluster_id,
           'skill_chunks' AS via
    FROM skill_chunks
    UNION ALL
    SELECT run_id AS round_id, skill_id AS chunk_id,
           unnest(from_json(json_extract(metadata, '$.evidence_cluster_ids'), '["VARCHAR"]')) AS cluster_id,
           'skillbank_skills' AS via
    FROM skillbank_skills
    WHERE json_extract(metadata, '$.evidence_cluster_ids') IS NOT NULL
) AS x;

-- loop_ledger_cards: proposal ledger record -> the evidence cards it rests on (source_card_ids).
-- grain: one row per (round, ledger, record, card). key: (round_id, ledger, line, card_id)
CREATE OR REPLACE VIEW loop_ledger_cards AS
SELECT run_id AS round_id, ledger, line, candidate_id, operation, target_chunk_id, validation_result,
       estimated_effect, contribution_rank, unnest(from_json(source_card_ids, '["VARCHAR"]')) AS card_id
FROM proposal_ledger
WHERE source_card_ids IS NOT NULL;

-- loop_skill_cards: a SkillBank skill -> the evidence cards it rests on, by two paths: its candidate's ledger
-- records (`via` = 'ledger': the skill's candidate_id, else its skill_id, is a ledger candidate) and its chunk's
-- clusters (`via` = 'clusters').
-- grain: one row per (bank, skill position, card, path). key: (bank_sha256, position, card_id, via)
CREATE OR REPLACE VIEW loop_skill_cards AS
WITH skills AS (
    SELECT s.run_id AS round_id, s.bank_sha256, s.position, s.skill_id,
           coalesce(s.candidate_id, s.skill_id) AS intervention_id, s.estimated_effect, s.contribution_rank
    FROM skillbank_skills AS s
)
SELECT DISTINCT k.round_id, k.bank_sha256, k.position, k.skill_id, k.intervention_id, k.estimated_effect,
       k.contribution_rank, l.card_id, 'ledger' AS via
FROM skills AS k
JOIN loop_ledger_cards AS l ON l.candidate_id = k.intervention_id
UNION ALL
SELECT DISTINCT k.round_id, k.bank_sha256, k.position, k.skill_id, k.intervention_id, k.estimated_effect,
       k.contribution_rank, cc.card_id, 'clusters' AS via
FROM skills AS k
JOIN loop_chunk_clusters AS ch ON ch.chunk_id = k.skill_id
JOIN loop_cluster_cards AS cc ON cc.cluster_id = ch.cluster_id;

-- loop_skill_evidence: which episodes a SkillBank skill rests on, and its gate coefficient: skill -> cards (either
-- path) -> episodes of any run, with the reward coefficient, rank and status of the skill's intervention in the
-- gate decision recorded in the bank's round (gate_coefficients; NULL when that round has no ingested gate).
-- grain: one row per (bank, skill position, card, path, run holding the card's episode).
-- key: (bank_sha256, position, card_id, via, episode_run_id)
CREATE OR REPLACE VIEW loop_skill_evidence AS
SELECT k.round_id, k.bank_sha256, k.position, k.skill_id, k.intervention_id, k.via, k.card_id, e.channel,
       e.source_trajectory_id, e.episode_run_id, e.split, e.task_id, e.sample_id, e.reward, e.r_success,
       g.gate_id, g.beta AS gate_coefficient, g.rank AS gate_rank, g.status AS gate_status,
       k.estimated_effect AS bank_estimated_effect, k.contribution_rank AS bank_contribution_rank
FROM loop_skill_cards AS k
LEFT JOIN loop_card_episodes AS e ON e.card_id = k.card_id
LEFT JOIN gate_coefficients AS g ON g.run_id = k.round_id AND g.name = k.intervention_id;

-- loop_gate_observations: an ingested gate's observations with the runs that hold their episodes: the masked run
-- (its runs.provenance carries the gate's mask assignment) and the bare run (its ShopSimRL plan fingerprint is
-- the gate's bare_baseline.plan_fingerprint); NULL when no ingested run is found.
-- grain: one row per observation. key: (gate_id, position)
CREATE OR REPLACE VIEW loop_gate_observations AS
WITH treat AS (
    SELECT run_id, json_extract_string(provenance, '$.mask_assignments.assignment_sha256') AS assignment_sha256
    FROM runs WHERE json_extract_string(provenance, '$.mask_assignments.assignment_sha256') IS NOT NULL
), bare AS (
    SELECT run_id, json_extract_string(fingerprint_fields, '$.plan_fingerprint') AS plan_fingerprint
    FROM runs WHERE json_extract_string(fingerprint_fields, '$.plan_fingerprint') IS NOT NULL
)
SELECT o.run_id AS round_id, o.gate_id, o.position, o.episode_id, o.split, o.task_id, o.sample_id, o.mask,
       o.included_chunk_ids, o.reward, o.bare_reward, o.delta_reward, t.run_id AS treatment_run, b.run_id AS bare_run,
       te.reward AS treatment_episode_reward, be.reward AS bare_episode_reward
FROM gate_observations AS o
LEFT JOIN treat AS t ON t.assignment_sha256 = o.assignment_sha256
LEFT JOIN bare AS b ON b.plan_fingerprint = o.bare_plan_fingerprint
LEFT JOIN episodes AS te ON te.run_id = t.run_id AND te.episode_id = o.episode_id
LEFT JOIN episodes AS be ON be.run_id = b.run_id AND be.episode_id = o.episode_id;
