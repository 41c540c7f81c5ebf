-- export: sft-trajectory
-- grain: one row per agent trajectory (main agents and sub-agents are separate rows)
-- trl: conversational language modeling (messages + tools; train with assistant-only loss)
-- sample: messages, tools
-- filters: status, reward, r_success, r_strict, success, import_fidelity, source_format, agent_role, depth, est_tokens, n_turns, split, experiment, task_id
-- default-where: status = 'completed' AND success
-- params: export_include_reasoning, export_include_persona
-- description: the whole conversation of one agent (global prefix and every turn, as the model saw it) with the union of the tools it was offered
-- Messages come from export_messages in order; tools are every tool offered to the agent, by name, each name
-- once: a name offered with several schemas (ShopSimRL's per-page `click`) gets one, its enums the union of
-- the values offered over the trajectory (export_agent_tools).
-- DuckDB-specific: JSON[] columns.
CREATE OR REPLACE VIEW export_sft_trajectory AS
WITH conv AS (
    SELECT run_id, episode_id, agent_id, list(message ORDER BY ord) AS messages, sum(est_tokens) AS est_tokens,
           count(DISTINCT from_step) AS n_turns
    FROM export_messages
    GROUP BY run_id, episode_id, agent_id
),

agent_tools AS (  -- a name once: its schemas merged (export_agent_tools; docs/export.md, "Tool lists")
    SELECT run_id, episode_id, agent_id, list(tool ORDER BY name) AS tools
    FROM export_agent_tools
    GROUP BY run_id, episode_id, agent_id
)

SELECT
    md5(c.run_id || '/' || c.episode_id || '/' || c.agent_id || ':sft-trajectory') AS sample_id,
    c.messages,
    coalesce(t.tools, CAST([] AS JSON[])) AS tools,
    c.run_id, c.episode_id, e.task_id, c.agent_id, a.agent_role, a.depth,
    e.status, e.reward, e.r_success, e.r_strict, e.success, e.import_fidelity, e.source_format, e.split, e.experiment,
    CAST(c.est_tokens AS BIGINT) AS est_tokens, c.n_turns
FROM conv AS c
JOIN export_episodes AS e ON e.run_id = c.run_id AND e.episode_id = c.episode_id
JOIN export_agents AS a ON a.run_id = c.run_id AND a.episode_id = c.episode_id AND a.agent_id = c.agent_id
LEFT JOIN agent_tools AS t ON t.run_id = c.run_id AND t.episode_id = c.episode_id AND t.agent_id = c.agent_id;
