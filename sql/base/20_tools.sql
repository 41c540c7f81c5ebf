-- grain: one row per distinct tool schema offered to an agent (final attempt).
-- key: (run_id, episode_id, agent_id, schema_hash)
CREATE OR REPLACE VIEW tools AS
SELECT t.*
FROM stg_tools AS t
LEFT JOIN retried_episodes AS r ON r.run_id = t.run_id AND r.episode_id = t.episode_id
WHERE coalesce(t.attempt, r.last_attempt, 1) = coalesce(r.last_attempt, 1);
