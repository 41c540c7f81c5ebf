-- grain: one row per observation returned for an action (final attempt). key: (run_id, episode_id, agent_id, step_idx, call_id)
-- rows of superseded attempts are in stg_observations (column attempt).
CREATE OR REPLACE VIEW observations AS
SELECT t.*
FROM stg_observations AS t
LEFT JOIN retried_episodes AS r ON r.run_id = t.run_id AND r.episode_id = t.episode_id
WHERE t.attempt = coalesce(r.last_attempt, 1);
