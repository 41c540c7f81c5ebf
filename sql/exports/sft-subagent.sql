-- export: sft-subagent
-- grain: one row per delegation decision (family 'delegate') and one per sub-agent trajectory (family 'subagent')
-- trl: conversational prompt-completion
-- sample: prompt, completion, tools
-- filters: family, status, reward, r_success, r_strict, success, import_fidelity, source_format, agent_role, depth, est_tokens, split, experiment, task_id
-- default-where: status = 'completed' AND success
-- params: export_window, export_max_tokens, export_include_reasoning, export_include_persona
-- materialize: export_decisions
-- description: two families: the parent's decision to delegate (context -> delegate call) and the sub-agent's own work (delegated query + its turns -> the summary it returns)
-- family 'delegate': a decision of any agent with at least one call that started a sub-agent (n_delegations > 0).
-- family 'subagent': a sub-agent's last decision: prompt = the delegated query (its prefix) and its earlier
-- turns, completion = its final message (the summary its parent receives as a subagent_summary observation).
-- DuckDB-specific: JSON[] columns.
CREATE OR REPLACE VIEW export_sft_subagent AS
WITH families AS (
    SELECT 'delegate' AS family, * FROM export_decisions
    WHERE n_delegations > 0 AND protocol_error IS NULL AND policy_failure IS NULL
    UNION ALL
    SELECT 'subagent' AS family, * FROM export_decisions
    WHERE depth > 0 AND is_last_turn AND policy_failure IS NULL
)

SELECT
    md5(decision_id || ':sft-subagent:' || family) AS sample_id,
    family,
    prompt,
    completion,
    tools,
    run_id, episode_id, task_id, agent_id, agent_role, parent_agent_id, depth, step_idx, spawned_agent_id,
    status, reward, r_success, r_strict, success, import_fidelity, source_format, split, experiment, est_tokens
FROM families;
