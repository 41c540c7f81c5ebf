-- grain: one row per message an agent saw, in order (final attempt). key: (run_id, episode_id, agent_id, msg_idx)
-- rows of superseded attempts are in stg_messages (column attempt).
CREATE OR REPLACE VIEW messages AS
SELECT t.*
FROM stg_messages AS t
JOIN final_attempts AS f
  ON t.run_id = f.run_id AND t.episode_id = f.episode_id AND t.attempt = f.attempt;
