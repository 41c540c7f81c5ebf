-- export: sft-action
-- grain: one row per decision (model turn) of any agent, main and sub-agents
-- trl: conversational prompt-completion
-- sample: prompt, completion, tools
-- filters: status, reward, r_success, r_strict, success, import_fidelity, source_format, agent_role, depth, est_tokens, prompt_tokens, split, experiment, task_id, step_idx, action_type, tool_name
-- default-where: status = 'completed' AND success
-- params: export_window, export_max_tokens, export_include_reasoning, export_include_persona
-- description: state -> next action: the reconstructed context (global prefix + last K turns within the token budget) and the one assistant message with its tool calls
-- Quality checks built in: turns that broke the tool protocol or hit the length limit are not demonstrations
-- (protocol_error / policy_failure set) and never appear; `success` is the documented rule of export_episodes
-- (r_success = 1 for sources with a reward, completed for reward-less traces).
-- DuckDB-specific: JSON[] columns.
CREATE OR REPLACE VIEW export_sft_action AS
SELECT
    md5(decision_id || ':sft-action') AS sample_id,
    prompt,
    completion,
    tools,
    run_id, episode_id, task_id, agent_id, agent_role, depth, step_idx,
    status, reward, r_success, r_strict, success, import_fidelity, source_format, split, experiment,
    action_type, tool_name, prompt_tokens, est_tokens
FROM export_decisions
WHERE protocol_error IS NULL AND policy_failure IS NULL;
