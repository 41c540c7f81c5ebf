-- grain: one row per model turn of an agent (final attempt). key: (run_id, episode_id, agent_id, step_idx)
-- rows of superseded attempts are in stg_steps (column attempt).
CREATE OR REPLACE VIEW steps AS
SELECT t.*
FROM stg_steps AS t
JOIN final_attempts AS f
  ON t.run_id = f.run_id AND t.episode_id = f.episode_id AND t.attempt = f.attempt;
