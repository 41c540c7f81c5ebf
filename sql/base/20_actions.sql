-- grain: one row per tool call or answer in a step (final attempt). key: (run_id, episode_id, agent_id, step_idx, call_idx)
-- rows of superseded attempts are in stg_actions (column attempt).
CREATE OR REPLACE VIEW actions AS
SELECT t.*
FROM stg_actions AS t
JOIN final_attempts AS f
  ON t.run_id = f.run_id AND t.episode_id = f.episode_id AND t.attempt = f.attempt;
