-- grain: one row per skill injected into an episode's prompt (final attempt). key: (run_id, episode_id, skill_id)
-- rows of superseded attempts are in stg_skills_selected (column attempt).
CREATE OR REPLACE VIEW skills_selected AS
SELECT t.*
FROM stg_skills_selected AS t
JOIN final_attempts AS f
  ON t.run_id = f.run_id AND t.episode_id = f.episode_id AND t.attempt = f.attempt;
