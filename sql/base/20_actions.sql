-- grain: one row per tool call or answer in a step (final attempt). key: (run_id, episode_id, agent_id, step_idx, call_idx)
-- rows of superseded attempts are in stg_actions (column attempt).
CREATE OR REPLACE VIEW actions AS
SELECT t.*
FROM stg_actions AS t
LEFT JOIN retried_episodes AS r ON r.run_id = t.run_id AND r.episode_id = t.episode_id
WHERE t.attempt = coalesce(r.last_attempt, 1);
