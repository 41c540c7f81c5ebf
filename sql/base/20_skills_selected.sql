-- grain: one row per skill injected into an episode's prompt (final attempt). key: (run_id, episode_id, skill_id)
-- rows of superseded attempts are in stg_skills_selected (column attempt).
CREATE OR REPLACE VIEW skills_selected AS
SELECT t.*
FROM stg_skills_selected AS t
LEFT JOIN retried_episodes AS r ON r.run_id = t.run_id AND r.episode_id = t.episode_id
WHERE t.attempt = coalesce(r.last_attempt, 1);
