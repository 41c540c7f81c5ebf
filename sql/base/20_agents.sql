-- grain: one row per agent of an episode (final attempt). key: (run_id, episode_id, agent_id)
-- rows of superseded attempts are in stg_agents (column attempt).
CREATE OR REPLACE VIEW agents AS
SELECT t.*
FROM stg_agents AS t
LEFT JOIN retried_episodes AS r ON r.run_id = t.run_id AND r.episode_id = t.episode_id
WHERE t.attempt = coalesce(r.last_attempt, 1);
