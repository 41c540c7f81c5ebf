-- export: prm
-- grain: one row per agent trajectory (main and sub-agents) of a completed episode with a reward
-- trl: conversational stepwise supervision
-- sample: prompt, completions, labels, tools
-- filters: status, reward, r_success, import_fidelity, source_format, agent_role, est_tokens, n_steps
-- description: process-reward data: one label per step from the error taxonomy's rules, else from a Monte-Carlo value (mean final reward of the rollouts sharing the state prefix and the step's action)
-- params: export_prm_threshold
-- batch: task
--
-- Columns
--   prompt         JSON[] the agent's global prefix (system prompt, task, first observation)
--   completions    JSON[], one element per step: the JSON array of that step's messages (the assistant message
--                  with its tool calls, then the tool / feedback messages that answered it); rendering prompt
--                  followed by the concatenated steps reproduces the conversation
--   labels         BOOLEAN[] per step; label_sources VARCHAR[] says where each came from:
--                  'rule:<code>'  a step-scope error label fired at the step (protocol_*, invalid_action,
--                                 repeated_action_loop, search_churn, repeated_identical_call, tool_error,
--                                 edit_without_read, subagent_failure; lowest precedence named): false;
--                  'mc'           no rule fired: mc_value >= export_prm_threshold (default 0.5), where
--                                 mc_value = mean final reward of the rollouts in scope that reached the same
--                                 state (export_rl_states.state_key) and took the same action, at least 2;
--                  'outcome'      as 'mc' when this rollout is the only one through that state and action
--                                 (the value is its own final reward)
--   mc_values      DOUBLE[] the Monte-Carlo value of every step (also where a rule decided); mc_counts
--                  INTEGER[] the number of rollouts it averages
--   tools          JSON[] every tool the agent was offered over the trajectory, a name once (export_agent_tools:
--                  a name offered with several schemas, ShopSimRL's per-page `click`, merged)
-- DuckDB-specific: getvariable, list(... ORDER BY ...), to_json, arg_min.
CREATE OR REPLACE VIEW export_prm AS
WITH params AS (
    SELECT CAST(coalesce(getvariable('export_prm_threshold'), 0.5) AS DOUBLE) AS threshold
),

steps_labelled AS (
    SELECT
        d.decision_id, d.run_id, d.episode_id, d.task_id, d.agent_id, d.agent_role, d.step_idx, d.prompt,
        CAST(to_json(list_concat(d.completion, d.observation)) AS JSON) AS step_messages,
        r.rule AS rule,
        st.mc_n,
        st.mc_value,
        CASE WHEN r.rule IS NOT NULL THEN false ELSE st.mc_value >= p.threshold END AS label,
        CASE WHEN r.rule IS NOT NULL THEN 'rule:' || r.rule WHEN st.mc_n >= 2 THEN 'mc' ELSE 'outcome' END
            AS label_source,
        d.est_tokens, d.completion_tokens, d.status, d.reward, d.r_success, d.import_fidelity, d.source_format, d.split
    FROM export_decisions AS d
    CROSS JOIN params AS p
    JOIN export_rl_states AS st
        ON st.run_id = d.run_id AND st.episode_id = d.episode_id AND st.agent_id = d.agent_id
        AND st.step_idx = d.step_idx
    LEFT JOIN export_step_rules AS r
        ON r.run_id = d.run_id AND r.episode_id = d.episode_id AND r.agent_id = d.agent_id AND r.step_idx = d.step_idx
    WHERE d.status = 'completed' AND d.reward IS NOT NULL
),

trajectories AS (
    SELECT
        md5('prm/' || run_id || '/' || episode_id || '/' || agent_id) AS sample_id,
        run_id,
        episode_id,
        task_id,
        agent_id,
        agent_role,
        arg_min(prompt, step_idx) AS prompt,
        list(step_messages ORDER BY step_idx) AS completions,
        list(label ORDER BY step_idx) AS labels,
        list(label_source ORDER BY step_idx) AS label_sources,
        list(mc_value ORDER BY step_idx) AS mc_values,
        list(mc_n ORDER BY step_idx) AS mc_counts,
        CAST(count(*) AS INTEGER) AS n_steps,
        any_value(status) AS status,
        any_value(reward) AS reward,
        any_value(r_success) AS r_success,
        any_value(import_fidelity) AS import_fidelity,
        any_value(source_format) AS source_format,
        any_value(split) AS split,
        CAST(arg_min(est_tokens, step_idx) + sum(completion_tokens) AS BIGINT) AS est_tokens
    FROM steps_labelled
    GROUP BY run_id, episode_id, task_id, agent_id, agent_role
),

agent_tools AS (  -- the row trains every step: the tools of the whole trajectory, a name once (merged)
    SELECT run_id, episode_id, agent_id, list(tool ORDER BY name) AS tools
    FROM export_agent_tools
    GROUP BY run_id, episode_id, agent_id
),

final AS (
    SELECT
        r.sample_id, r.run_id, r.episode_id, r.task_id, r.agent_id, r.agent_role, r.prompt, r.completions,
        r.labels, r.label_sources, r.mc_values, r.mc_counts,
        coalesce(t.tools, CAST([] AS JSON[])) AS tools,
        r.n_steps, r.status, r.reward, r.r_success, r.import_fidelity, r.source_format, r.split, r.est_tokens
    FROM trajectories AS r
    LEFT JOIN agent_tools AS t ON t.run_id = r.run_id AND t.episode_id = r.episode_id AND t.agent_id = r.agent_id
)

SELECT * FROM final;
