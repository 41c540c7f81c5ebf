-- grain: one row per observation returned for an action (final attempt). key: (run_id, episode_id, agent_id, step_idx, call_id)
-- rows of superseded attempts are in stg_observations (column attempt).
CREATE OR REPLACE VIEW observations AS
SELECT t.*
FROM stg_observations AS t
JOIN final_attempts AS f
  ON t.run_id = f.run_id AND t.episode_id = f.episode_id AND t.attempt = f.attempt;
