-- grain: one row per model turn of an agent (final attempt). key: (run_id, episode_id, agent_id, step_idx)
-- rows of superseded attempts are in stg_steps (column attempt).
CREATE OR REPLACE VIEW steps AS
SELECT t.*
FROM stg_steps AS t
LEFT JOIN retried_episodes AS r ON r.run_id = t.run_id AND r.episode_id = t.episode_id
WHERE t.attempt = coalesce(r.last_attempt, 1);
