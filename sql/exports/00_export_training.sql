-- export_training_samples: the trainer samples (training namespace, sql/base/30_training.sql) of the runs an export
-- reads, with their token arrays and the facts the token kinds (rl-tokens, slime-samples) select on.
-- grain: one row per trainer sample (the last attempt of its episode). key: (run_id, episode_id, agent_id, sample_idx)
-- Which samples: those of the episodes in export_episodes (the runs in scope), and those whose episode the warehouse
-- does not hold at all (a slime dump ingested without its ShopSimRL traces: the tokens are the training data; their
-- episode columns are NULL). No batch could hold those, and the batches would not split the training tables
-- anyway (each would scan them whole): the token kinds are computed in one batch (`-- batch: all`; nothing here
-- aggregates a conversation, so DuckDB streams and spills the rows).
-- Columns beyond training_samples (sample_status = its `status`):
--   token_ids, loss_mask, rollout_logprobs, ref_logprobs   training_tokens
--   status, success, split, source_format, experiment, task_id   the episode's (export_episodes)
--   carries_persona   the prompt tokens hold the user persona: the agent's system message holds the persona
--                     section (`用户个人文档：`, the layout of export_strip_persona), or the sample's prompt text does
--   carries_reasoning the response tokens hold reasoning: the sample's response text holds a non-empty `<think>`
--                     block or the reasoning text of one of the agent's turns (steps.reasoning); with no response
--                     text (a runner sample of a tokenizer it cannot decode), any turn of the agent with reasoning
-- Privacy: token ids cannot lose a persona or reasoning without changing what was trained, so a sample that
-- carries one is read only with getvariable('export_include_persona') / ('export_include_reasoning').
-- DuckDB-specific: getvariable, regexp_matches, contains.
CREATE OR REPLACE VIEW export_training_samples AS
WITH samples AS (
    SELECT s.*, e.episode_id IS NOT NULL AS has_episode
    FROM training_samples AS s
    LEFT JOIN export_episodes AS e ON e.run_id = s.run_id AND e.episode_id = s.episode_id
    WHERE s.run_id IN (SELECT run_id FROM export_scope)
      AND (e.episode_id IS NOT NULL
           OR NOT EXISTS (SELECT 1 FROM stg_episodes AS x WHERE x.run_id = s.run_id AND x.episode_id = s.episode_id))
),

persona AS (
    SELECT DISTINCT run_id, episode_id, agent_id
    FROM messages
    WHERE run_id IN (SELECT run_id FROM export_scope) AND role = 'system' AND content LIKE '%用户个人文档：%'
),

reasoning AS (  -- the samples whose response holds a turn's reasoning (or cannot be read for it)
    SELECT s.run_id, s.episode_id, s.agent_id, s.sample_idx
    FROM samples AS s
    JOIN steps AS r ON r.run_id = s.run_id AND r.episode_id = s.episode_id AND r.agent_id = s.agent_id
    WHERE r.reasoning IS NOT NULL AND trim(r.reasoning) <> ''
      AND (s.response IS NULL OR contains(s.response, r.reasoning))
    GROUP BY s.run_id, s.episode_id, s.agent_id, s.sample_idx
),

marked AS (
    SELECT
        s.* EXCLUDE (status, has_episode),
        s.status AS sample_status,
        t.token_ids,
        t.loss_mask,
        t.rollout_logprobs,
        t.ref_logprobs,
        e.status,
        e.success,
        e.split,
        e.source_format,
        e.experiment,
        e.task_id,
        p.agent_id IS NOT NULL OR coalesce(s.prompt LIKE '%用户个人文档：%', false) AS carries_persona,
        r.agent_id IS NOT NULL OR coalesce(regexp_matches(s.response, '<think>\s*[^\s<]'), false) AS carries_reasoning
    FROM samples AS s
    JOIN training_tokens AS t
        ON t.run_id = s.run_id AND t.episode_id = s.episode_id AND t.attempt = s.attempt
        AND t.agent_id = s.agent_id AND t.sample_idx = s.sample_idx
    LEFT JOIN export_episodes AS e ON e.run_id = s.run_id AND e.episode_id = s.episode_id
    LEFT JOIN persona AS p ON p.run_id = s.run_id AND p.episode_id = s.episode_id AND p.agent_id = s.agent_id
    LEFT JOIN reasoning AS r
        ON r.run_id = s.run_id AND r.episode_id = s.episode_id AND r.agent_id = s.agent_id
        AND r.sample_idx = s.sample_idx
)

SELECT *
FROM marked
WHERE (NOT carries_persona OR coalesce(getvariable('export_include_persona'), false))
  AND (NOT carries_reasoning OR coalesce(getvariable('export_include_reasoning'), false));
