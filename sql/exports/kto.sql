-- export: kto
-- grain: one row per decision (model turn) of any agent, main and sub-agents, of a completed episode
-- trl: conversational unpaired preference
-- sample: prompt, completion, label, tools
-- filters: status, reward, r_success, success, import_fidelity, source_format, agent_role, est_tokens, label, label_source
-- description: unpaired preference (KTO): each decision labelled desirable iff its episode succeeded and no step-scope error label fired at it
-- params: export_window, export_max_tokens
--
-- Labelling rule (docs/export_rl.md):
--   label = false, label_source = 'rule:<code>'  when the error taxonomy put a step-scope label on this decision
--                (protocol_*, invalid_action, repeated_action_loop, search_churn, repeated_identical_call,
--                tool_error, edit_without_read, subagent_failure; the lowest-precedence code is named);
--   otherwise label = success, label_source = 'outcome:success' | 'outcome:failure', where success is the
--                framework's documented rule (export_episodes.success: r_success = 1 for a source with a
--                reward, completion for a reward-less demonstration trace).
-- Episodes that failed for infrastructure reasons (status 'failed') are left out: no decision of theirs is
-- evidence about the policy.
-- DuckDB-specific: arg_min.
CREATE OR REPLACE VIEW export_kto AS
WITH final AS (
    SELECT
        md5('kto/' || d.decision_id) AS sample_id,
        d.run_id,
        d.episode_id,
        d.task_id,
        d.agent_id,
        d.agent_role,
        d.step_idx,
        d.prompt,
        d.completion,
        d.tools,
        CASE WHEN r.rule IS NOT NULL THEN false ELSE d.success END AS label,
        CASE
            WHEN r.rule IS NOT NULL THEN 'rule:' || r.rule
            WHEN d.success THEN 'outcome:success'
            ELSE 'outcome:failure'
        END AS label_source,
        d.status,
        d.reward,
        d.r_success,
        d.success,
        d.import_fidelity,
        d.source_format,
        d.split,
        d.est_tokens
    FROM export_decisions AS d
    LEFT JOIN export_step_rules AS r
        ON r.run_id = d.run_id AND r.episode_id = d.episode_id AND r.agent_id = d.agent_id AND r.step_idx = d.step_idx
    WHERE d.status = 'completed'
)

SELECT * FROM final;
