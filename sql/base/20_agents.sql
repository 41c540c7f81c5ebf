-- grain: one row per agent of an episode (final attempt). key: (run_id, episode_id, agent_id)
-- rows of superseded attempts are in stg_agents (column attempt).
CREATE OR REPLACE VIEW agents AS
SELECT t.*
FROM stg_agents AS t
JOIN final_attempts AS f
  ON t.run_id = f.run_id AND t.episode_id = f.episode_id AND t.attempt = f.attempt;
