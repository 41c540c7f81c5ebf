-- grain: one row per distinct tool schema offered to an agent (final attempt).
-- key: (run_id, episode_id, agent_id, schema_hash)
-- rows of superseded attempts are in stg_tools (column attempt; NULL attempt = every attempt).
CREATE OR REPLACE VIEW tools AS
SELECT t.*
FROM stg_tools AS t
JOIN final_attempts AS f
  ON t.run_id = f.run_id AND t.episode_id = f.episode_id AND coalesce(t.attempt, f.attempt) = f.attempt;
