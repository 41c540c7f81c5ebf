-- export: sft-reasoning
-- grain: one row per (decision, teacher) with an accepted synthetic reasoning (table synthetic_reasoning)
-- trl: conversational prompt-completion
-- sample: prompt, completion, tools
-- filters: status, reward, r_success, success, import_fidelity, source_format, agent_role, est_tokens, teacher_model, teacher_fingerprint
-- default-where: status = 'completed' AND success
-- description: state -> synthetic reasoning + the recorded action: the teachers' accepted answers to reasoning-requests joined back to every decision with that request
-- params: export_window, export_max_tokens
--
-- Columns
--   prompt      JSON[] the decision's context (as in reasoning-requests: --window / --max-tokens apply)
--   completion  JSON[] the recorded assistant message with `reasoning_content` = the teacher's reasoning (the
--               agent's own recorded reasoning never: the teacher's replaces it, whatever the flags)
--   teacher_model, teacher_fingerprint, teacher_base_url  provenance of the reasoning (table synthetic_reasoning)
-- Only answers with verdict 'accepted' (their action equals the recorded one) are exported; rejected ones stay
-- in the table with their reason. A request answered by several teachers gives one row per teacher: select
-- one with --where "teacher_model = '...'".
-- DuckDB-specific: JSON[] lists (the message is rebuilt by export_message, which runs on Spark too).
CREATE OR REPLACE VIEW export_sft_reasoning AS
WITH answers AS (
    SELECT request_hash, teacher_fingerprint, teacher_model, teacher_base_url, reasoning
    FROM synthetic_reasoning
    WHERE verdict = 'accepted'
),

final AS (
    SELECT
        md5('sft-reasoning/' || r.sample_id || '/' || a.teacher_fingerprint) AS sample_id,
        r.run_id,
        r.episode_id,
        r.task_id,
        r.agent_id,
        r.agent_role,
        r.step_idx,
        r.state AS prompt,
        [export_message('assistant', r.action[1] ->> 'content', a.reasoning, r.action[1] -> 'tool_calls', NULL, NULL)]
            AS completion,
        r.tools,
        a.teacher_model,
        a.teacher_fingerprint,
        a.teacher_base_url,
        r.request_hash,
        r.status,
        r.reward,
        r.r_success,
        r.success,
        r.import_fidelity,
        r.source_format,
        r.split,
        r.est_tokens + CAST(ceil(length(a.reasoning) / 4.0) AS BIGINT) AS est_tokens
    FROM export_reasoning_requests AS r
    JOIN answers AS a ON a.request_hash = r.request_hash
)

SELECT * FROM final;
