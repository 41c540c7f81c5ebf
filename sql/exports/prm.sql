-- export: prm
-- grain: one row per agent trajectory (main and sub-agents) of a completed episode with a reward
-- trl: -
-- sample: prompt, steps, tools
-- filters: status, reward, r_success, import_fidelity, source_format, agent_role, est_tokens, n_steps
-- description: process-reward data, shopsim-wh's stepwise schema: the prompt, then one struct per step (its messages, a label from the error taxonomy's rules, else from a Monte-Carlo value: the mean final reward of the rollouts sharing the state prefix and the step's action); --prm-shape trl-stepwise writes TRL <= 1.13's prompt / completions / labels
-- params: export_prm_threshold
-- batch: task
-- shape: steps
-- shape-trl-stepwise: view=export_prm_trl_stepwise; trl=stepwise supervision (TRL <= 1.13, messages: render them through the chat template); sample=prompt, completions, labels, tools
--
-- TRL removed PRMTrainer and its stepwise-supervision dataset type in September 2026 (huggingface/trl#7133), so
-- the default shape is shopsim-wh's own (docs/export_rl.md, "prm", says what PRM users train with now).
-- Columns (shape `steps`, the default; view export_prm)
--   prompt         JSON[] the agent's global prefix (system prompt, task, first observation)
--   steps          one struct per step, in order: step_idx (steps.step_idx), completion JSON[] (the step's
--                  messages: the assistant message with its tool calls, then the tool / feedback messages that
--                  answered it; rendering prompt followed by every step's completion reproduces the
--                  conversation), label BOOLEAN, label_source VARCHAR, mc_value DOUBLE, mc_count INTEGER:
--     label_source 'rule:<code>'  a step-scope error label fired at the step (protocol_*, invalid_action,
--                                 repeated_action_loop, search_churn, repeated_identical_call, tool_error,
--                                 edit_without_read, subagent_failure; lowest precedence named): false;
--                  'mc'           no rule fired: mc_value >= export_prm_threshold (default 0.5), where
--                                 mc_value = mean final reward of the rollouts in scope that reached the same
--                                 state (export_rl_states.state_key) and took the same action, at least 2;
--                  'outcome'      as 'mc' when this rollout is the only one through that state and action
--                                 (the value is its own final reward)
--     mc_value     the Monte-Carlo value of the step (also where a rule decided); mc_count the number of
--                  rollouts it averages
--   tools          JSON[] every tool the agent was offered over the trajectory, a name once (export_agent_tools:
--                  a name offered with several schemas, ShopSimRL's per-page `click`, merged)
--   n_steps, status, reward, r_success, import_fidelity, source_format, split, est_tokens, and the lineage
--   sample_id, run_id, episode_id, task_id, agent_id, agent_role
-- Shape `trl-stepwise` (--prm-shape trl-stepwise; view export_prm_trl_stepwise): TRL <= 1.13's stepwise
-- supervision columns from the same rows: completions JSON[] (one element per step: the JSON array of the
-- step's messages), labels BOOLEAN[], with label_sources VARCHAR[], mc_values DOUBLE[], mc_counts INTEGER[]
-- beside them, then tools and the rest as above.
-- DuckDB-specific: getvariable, list(... ORDER BY ...), to_json, arg_min, struct_pack, lambdas.
CREATE OR REPLACE VIEW export_prm AS
WITH params AS (
    SELECT CAST(coalesce(getvariable('export_prm_threshold'), 0.5) AS DOUBLE) AS threshold
),

steps_labelled AS (
    SELECT
        d.decision_id, d.run_id, d.episode_id, d.task_id, d.agent_id, d.agent_role, d.step_idx, d.prompt,
        list_concat(d.completion, d.observation) AS step_messages,
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
        list(struct_pack(step_idx := step_idx, completion := step_messages, label := label,
                         label_source := label_source, mc_value := mc_value, mc_count := CAST(mc_n AS INTEGER))
             ORDER BY step_idx) AS steps,
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
        r.sample_id, r.run_id, r.episode_id, r.task_id, r.agent_id, r.agent_role, r.prompt, r.steps,
        coalesce(t.tools, CAST([] AS JSON[])) AS tools,
        r.n_steps, r.status, r.reward, r.r_success, r.import_fidelity, r.source_format, r.split, r.est_tokens
    FROM trajectories AS r
    LEFT JOIN agent_tools AS t ON t.run_id = r.run_id AND t.episode_id = r.episode_id AND t.agent_id = r.agent_id
)

SELECT * FROM final;

-- --prm-shape trl-stepwise: the same rows in TRL <= 1.13's stepwise-supervision columns (header above).
CREATE OR REPLACE VIEW export_prm_trl_stepwise AS
SELECT
    sample_id, run_id, episode_id, task_id, agent_id, agent_role, prompt,
    list_transform(steps, lambda s: CAST(to_json(s.completion) AS JSON)) AS completions,
    list_transform(steps, lambda s: s.label) AS labels,
    list_transform(steps, lambda s: s.label_source) AS label_sources,
    list_transform(steps, lambda s: s.mc_value) AS mc_values,
    list_transform(steps, lambda s: s.mc_count) AS mc_counts,
    tools, n_steps, status, reward, r_success, import_fidelity, source_format, split, est_tokens
FROM export_prm;
