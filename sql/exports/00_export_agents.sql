-- export_agents: who each conversation of export_messages belongs to, for the per-agent kinds (ntp, sft-trajectory).
-- grain: one row per agent with messages in export_scope. key: (run_id, episode_id, agent_id)
--   agent_role  the `agents` row's role; for a source that records no agents row, 'main' for the root and
--               'unknown' for any other id (the rule of ir_agents)
--   depth       the `agents` row's depth; else 0 for main and 1 for any other agent
-- Portable SQL except CREATE OR REPLACE.
CREATE OR REPLACE VIEW export_agents AS
SELECT
    s.run_id, s.episode_id, s.agent_id,
    coalesce(g.agent_role, CASE WHEN s.agent_id = 'main' THEN 'main' ELSE 'unknown' END) AS agent_role,
    coalesce(g.depth, CASE WHEN s.agent_id = 'main' THEN 0 ELSE 1 END) AS depth
FROM (SELECT DISTINCT run_id, episode_id, agent_id FROM export_messages) AS s
LEFT JOIN agents AS g ON g.run_id = s.run_id AND g.episode_id = s.episode_id AND g.agent_id = s.agent_id;
