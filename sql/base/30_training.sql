-- The training namespace (issue 31; docs/export_rl.md): trainer samples beside the episode and step trace.
-- Writers: `shopsim-wh ingest DUMP.pt` (slime's --save-debug-rollout-data) and the runner with model.record_tokens.
-- Only the episode's last attempt counts, as in `episodes` (a slime sample's episode has attempt 1).

-- grain: one row per trainer sample of an episode's last attempt. key: (run_id, episode_id, agent_id, sample_idx)
-- grpo_advantage: the sample's reward minus its group's mean over the group's standard deviation (GRPO's
-- normalisation; a group is (run_id, rollout_step, group_index), each episode counted once through its first sample;
-- 0 when the group's rewards are all equal).
CREATE OR REPLACE VIEW training_samples AS
WITH s AS (
    SELECT t.* FROM stg_training_samples t
    WHERE t.attempt = (SELECT max(a.attempt) FROM stg_training_samples a
                       WHERE a.run_id = t.run_id AND a.episode_id = t.episode_id)
), per_episode AS (
    SELECT run_id, rollout_step, group_index, episode_id, any_value(reward) AS reward
    FROM s WHERE NOT coalesce(remove_sample, false) GROUP BY ALL
), groups AS (
    SELECT run_id, rollout_step, group_index, avg(reward) AS mean_reward, stddev_samp(reward) AS sd_reward,
           count(*) AS group_size
    FROM per_episode GROUP BY ALL
)
SELECT s.*, g.group_size,
       CASE WHEN s.remove_sample OR s.reward IS NULL THEN NULL
            WHEN coalesce(g.sd_reward, 0) = 0 THEN 0.0
            ELSE (s.reward - g.mean_reward) / (g.sd_reward + 1e-6) END AS grpo_advantage
FROM s LEFT JOIN groups g
  ON g.run_id = s.run_id AND g.rollout_step IS NOT DISTINCT FROM s.rollout_step
 AND g.group_index IS NOT DISTINCT FROM s.group_index;

-- grain: one row per trainer sample (its token arrays). key: (run_id, episode_id, agent_id, sample_idx)
CREATE OR REPLACE VIEW training_tokens AS
SELECT t.* FROM stg_training_tokens t
SEMI JOIN training_samples s USING (run_id, episode_id, attempt, agent_id, sample_idx);

-- grain: one row per token span of a trainer sample. key: (run_id, episode_id, agent_id, sample_idx, span_idx)
CREATE OR REPLACE VIEW training_spans AS
SELECT t.* FROM stg_training_spans t
SEMI JOIN training_samples s USING (run_id, episode_id, attempt, agent_id, sample_idx);

-- grain: one row per model turn with recorded token ids (last attempt). key: (run_id, episode_id, agent_id, step_idx)
CREATE OR REPLACE VIEW model_turn_tokens AS
SELECT t.* FROM stg_model_turn_tokens t
WHERE t.attempt = (SELECT max(a.attempt) FROM stg_model_turn_tokens a
                   WHERE a.run_id = t.run_id AND a.episode_id = t.episode_id);

-- grain: one row per (trainer sample, tokenizer) checked by `training retokenize`, the latest check.
-- key: (run_id, episode_id, agent_id, sample_idx, tokenizer_hash)
CREATE OR REPLACE VIEW training_retokenization AS
SELECT * FROM stg_training_retokenization
QUALIFY row_number() OVER (PARTITION BY run_id, episode_id, agent_id, sample_idx, tokenizer_hash
                           ORDER BY checked_at DESC) = 1;

-- grain: one row per trainer sample whose stored ids differ from their re-rendering through a tokenizer's chat
-- template (or could not be re-rendered): the latest check of each tokenizer, of the sample's current attempt (a
-- check of an attempt since replaced says nothing about the current one). key: (run_id, episode_id, agent_id,
-- sample_idx, tokenizer_hash)
--   same_tokenizer  the ids were recorded with the checking tokenizer (training_samples.tokenizer_hash; NULL when
--                   the sample's tokenizer is unknown): drift then means ids that differ from their text, where with
--                   another tokenizer every sample differs
--   span_idx, span_kind, span_step_idx, span_message_idx  the stored span the first mismatch falls in (`prompt`,
--                   `model`, `inserted`); NULL past the stored ids, or without a mismatch position
CREATE OR REPLACE VIEW training_token_drift AS
SELECT r.*,
       CASE WHEN s.tokenizer_hash IS NULL THEN NULL ELSE s.tokenizer_hash = r.tokenizer_hash END AS same_tokenizer,
       p.span_idx, p.kind AS span_kind, p.step_idx AS span_step_idx, p.message_idx AS span_message_idx
FROM training_retokenization AS r
JOIN training_samples AS s USING (run_id, episode_id, attempt, agent_id, sample_idx)
LEFT JOIN training_spans AS p
  ON p.run_id = r.run_id AND p.episode_id = r.episode_id AND p.attempt = r.attempt AND p.agent_id = r.agent_id
 AND p.sample_idx = r.sample_idx AND r.first_mismatch >= p.token_start AND r.first_mismatch < p.token_end
WHERE r.first_mismatch IS NOT NULL OR r.detail IS NOT NULL;
