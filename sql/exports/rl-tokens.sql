-- export: rl-tokens
-- grain: one row per trainer sample (training_samples with its training_tokens): the token ids, masks, logprobs, advantage and reward a policy-gradient step reads
-- trl: -
-- sample: run_id, episode_id, agent_id, sample_idx
-- filters: status, success, split, source_format, experiment, task_id, source, sample_status, remove_sample, rollout_step, group_index, total_length, trainable_tokens, advantage_source, tokenizer_id
-- default-where: NOT remove_sample
-- description: token-level RL samples (slime dumps, runner turns with model.record_tokens): input_ids, loss_mask (response-length, slime's) and assistant_mask (full-length), rollout and reference logprobs, advantage (stored, else GRPO's), reward and r_*; remove_sample rows only with --where true
-- params: export_include_persona, export_include_reasoning
-- batch: all
--
-- Columns (docs/export_rl.md, "rl-tokens")
--   lineage        sample_id, run_id, episode_id, task_id, agent_id, sample_idx, rollout_step (slime's rollout
--                  number), rollout_id (shared by the samples of one episode), group_index, sample_index (slime
--                  `index`), split, source (`slime` or `runner`), source_format, experiment (the warehouse's
--                  training_samples row holds load_id and source_file)
--   tokenizer_id, tokenizer_hash   the tokenizer the ids belong to (NULL hash: unknown)
--   input_ids      INTEGER[] every token: prompt, then response (slime `tokens`)
--   prompt_length, response_length, total_length, trainable_tokens (loss-mask ones)
--   loss_mask      TINYINT[] one per response token (slime's convention; length response_length): 1 = sampled
--                  by the model and trained on, 0 = inserted (tool answers, template glue)
--   assistant_mask TINYINT[] one per token (length total_length; Hugging Face's convention): prompt_length
--                  zeros, then loss_mask
--   rollout_logprobs, ref_logprobs   DOUBLE[] one per response token (0.0 where the mask is 0); NULL when
--                  not recorded
--   advantage      the sample's stored advantage, else grpo_advantage (reward normalised within its group,
--                  sql/base/30_training.sql); advantage_source says which: 'stored' | 'grpo' (NULL: no reward);
--                  group_size the episodes of its group
--   reward, r_loose, r_strict, r_success   the sample's reward (the one it was trained with) and components
--   sample_status  slime's status (completed, truncated, aborted, ...); remove_sample: the trainer drops it
--   status, success  the episode's (export_episodes), as in every kind
-- Every row's tokens where loss_mask = 1 are the model's sampled ids (tests/test_export_tokens.py holds it
-- against the runner's model_turn_tokens). Samples whose tokens carry a persona or reasoning are exported only
-- with --include-persona / --include-reasoning (export_training_samples).
-- DuckDB-specific: list_transform, range, md5.
CREATE OR REPLACE VIEW export_rl_tokens AS
SELECT
    md5('rl-tokens/' || s.run_id || '/' || s.episode_id || '/' || s.agent_id || '/' || CAST(s.sample_idx AS VARCHAR))
        AS sample_id,
    s.run_id,
    s.episode_id,
    s.task_id,
    s.agent_id,
    s.sample_idx,
    s.rollout_step,
    s.rollout_id,
    s.group_index,
    s.sample_index,
    s.split,
    s.source,
    s.source_format,
    s.experiment,
    s.tokenizer_id,
    s.tokenizer_hash,
    s.token_ids AS input_ids,
    s.prompt_length,
    s.response_length,
    s.total_length,
    s.trainable_tokens,
    s.loss_mask,
    CASE WHEN s.loss_mask IS NOT NULL
         THEN list_concat(list_transform(range(s.prompt_length), lambda i: CAST(0 AS TINYINT)), s.loss_mask)
    END AS assistant_mask,
    s.rollout_logprobs,
    s.ref_logprobs,
    coalesce(s.advantage, s.grpo_advantage) AS advantage,
    CASE WHEN s.advantage IS NOT NULL THEN 'stored' WHEN s.grpo_advantage IS NOT NULL THEN 'grpo' END
        AS advantage_source,
    CAST(s.group_size AS INTEGER) AS group_size,
    s.reward,
    s.r_loose,
    s.r_strict,
    s.r_success,
    s.sample_status,
    coalesce(s.remove_sample, false) AS remove_sample,
    s.status,
    s.success
FROM export_training_samples AS s;
