-- grain: one row per message an agent saw, in order (final attempt). key: (run_id, episode_id, agent_id, msg_idx)
-- rows of superseded attempts are in stg_messages (column attempt).
CREATE OR REPLACE VIEW messages AS
SELECT t.*
FROM stg_messages AS t
LEFT JOIN retried_episodes AS r ON r.run_id = t.run_id AND r.episode_id = t.episode_id
WHERE t.attempt = coalesce(r.last_attempt, 1);
