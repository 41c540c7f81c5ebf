-- export: sft-observation
-- grain: one row per decision (model turn) of any agent, main and sub-agents
-- trl: conversational prompt-completion
-- sample: prompt, completion, tools
-- filters: status, reward, r_success, r_strict, success, import_fidelity, source_format, agent_role, depth, est_tokens, split, experiment, task_id, step_idx, action_type, tool_name
-- default-where: status = 'completed' AND success
-- params: export_include_reasoning, export_include_persona
-- description: latest observation -> next action: the global prefix plus one user message holding what answered the previous turn (no older history)
-- The first turn's observation is already in the prefix (the task message), so its prompt is the prefix alone.
-- Turns that broke the tool protocol or hit the length limit are left out, as in sft-action.
-- DuckDB-specific: JSON[] columns, lambdas.
CREATE OR REPLACE VIEW export_sft_observation AS
WITH prefix AS (
    SELECT run_id, episode_id, agent_id, list(message ORDER BY ord) AS messages, sum(est_tokens) AS n
    FROM export_messages
    WHERE part = 'prefix'
    GROUP BY run_id, episode_id, agent_id
),

with_previous AS (
    SELECT
        *,
        lag(observation) OVER (PARTITION BY run_id, episode_id, agent_id ORDER BY step_idx) AS previous_observation
    FROM export_decisions
),

latest AS (
    SELECT
        *,
        array_to_string(list_transform(coalesce(previous_observation, CAST([] AS JSON[])),
                                       lambda m: coalesce(m ->> 'content', '')), chr(10) || chr(10)) AS observation_text
    FROM with_previous
)

SELECT
    md5(l.decision_id || ':sft-observation') AS sample_id,
    list_concat(
        coalesce(p.messages, CAST([] AS JSON[])),
        CASE WHEN len(coalesce(l.previous_observation, [])) > 0
             THEN [export_message('user', l.observation_text, NULL, NULL, NULL, NULL)]
             ELSE CAST([] AS JSON[]) END) AS prompt,
    l.completion,
    l.tools,
    l.run_id, l.episode_id, l.task_id, l.agent_id, l.agent_role, l.depth, l.step_idx,
    l.status, l.reward, l.r_success, l.r_strict, l.success, l.import_fidelity, l.source_format, l.split, l.experiment,
    l.action_type, l.tool_name,
    CAST(coalesce(p.n, 0) + est_tokens_of(l.observation_text, NULL, NULL) + l.completion_tokens AS BIGINT) AS est_tokens
FROM latest AS l
LEFT JOIN prefix AS p ON p.run_id = l.run_id AND p.episode_id = l.episode_id AND p.agent_id = l.agent_id
WHERE l.protocol_error IS NULL AND l.policy_failure IS NULL;
